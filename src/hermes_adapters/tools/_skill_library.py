"""The skill library: finding skills on disk, reading them, and editing the local ones.

The ``skills`` tools (:mod:`hermes_adapters.tools.skills`) are thin JSON shells over this
library; it lives apart from them so that discovery, the SKILL.md format and the on-disk
layout can be used by the composition root (the prompt's skills index) without the tools,
and read without their schemas in the way.

A skill is a directory holding ``SKILL.md`` (YAML frontmatter with ``name``, ``description``
and ``category``, then Markdown instructions) and optional supporting files under
``references/``, ``templates/``, ``scripts/`` and ``assets/``. Every supporting-file path
the model names is confined to its skill directory, lexically and through symlinks, the way
the file tools confine paths to the workspace.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import yaml

from hermes_adapters.tools._common import looks_binary, open_nofollow
from hermes_adapters.tools._write import atomic_write
from hermes_adapters.tools.workspace import PathOutsideWorkspace, Workspace
from hermes_core.errors import ToolError

__all__ = [
    "CATEGORY_FILE",
    "DEFAULT_CATEGORY",
    "MANAGE_ACTIONS",
    "SKILL_FILE",
    "SUPPORT_DIRS",
    "Skill",
    "SkillError",
    "SkillLibrary",
    "parse_frontmatter",
    "render_skills_index",
]

log = logging.getLogger("hermes_adapters.tools.skills")  # the public module's name

SKILL_FILE = "SKILL.md"
CATEGORY_FILE = "DESCRIPTION.md"
SUPPORT_DIRS: tuple[str, ...] = ("references", "templates", "scripts", "assets")
MANAGE_ACTIONS: tuple[str, ...] = ("create", "patch", "edit", "delete", "write_file", "remove_file")
DEFAULT_CATEGORY = "general"

_NAME = re.compile(r"^[a-z0-9][a-z0-9-_]{0,63}$")
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_MAX_DEPTH = 3
"""``skills/<name>`` or ``skills/<category>/<name>``, plus one spare level; bounds symlink loops."""
_HEAD_BYTES = 64 * 1024
"""Discovery reads only this much of each SKILL.md: the frontmatter is at the top."""
_MAX_SKILL_CHARS = 100_000
_MAX_FILE_BYTES = 1_000_000
_MAX_LISTED_FILES = 50
_INDEX_DESCRIPTION_CHARS = 240
_MAX_DESCRIPTION_CHARS = 1024

_INDEX_INTRO = (
    "Before replying, scan the skills below. If one matches the task, load it with "
    "skill_view(name) and follow its instructions: skills hold procedures that worked before."
)
_INDEX_OUTRO = "If none matches, continue normally."


class SkillError(ToolError):
    """A skill operation was refused: bad name, missing skill, invalid SKILL.md, bad path.

    The message is written for the model, which reads it as the tool's error result.
    """


@dataclass(frozen=True, slots=True)
class Skill:
    """One discovered skill. ``local`` skills live under ``$HERMES_HOME/skills``."""

    name: str
    description: str
    category: str
    directory: Path
    local: bool

    @property
    def skill_file(self) -> Path:
        return self.directory / SKILL_FILE


# -- pure helpers ----------------------------------------------------------------------


def parse_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """``(frontmatter, body)``; ``({}, text)`` when the text has no ``---`` block.

    Raises:
        SkillError: the block is not valid YAML or not a mapping.
    """
    match = _FRONTMATTER.match(text.removeprefix("\ufeff"))
    if match is None:
        return {}, text
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise SkillError(f"SKILL.md frontmatter is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SkillError("SKILL.md frontmatter must be a YAML mapping (key: value lines)")
    return data, text.removeprefix("\ufeff")[match.end() :]


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def _check_name(value: object, what: str = "name") -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise SkillError(
            f"invalid skill {what} {value!r}: use 1-64 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return value


def _validated_skill_md(content: object, name: str) -> tuple[str, dict[str, Any]]:
    """The text and frontmatter of a SKILL.md the model wants to write, checked before any write."""
    if not isinstance(content, str) or not content.strip():
        raise SkillError("`content` must be the full SKILL.md text (frontmatter and body)")
    if len(content) > _MAX_SKILL_CHARS:
        raise SkillError(f"SKILL.md is {len(content):,} chars; the limit is {_MAX_SKILL_CHARS:,}")
    meta, body = parse_frontmatter(content)
    if not meta:
        raise SkillError(
            "SKILL.md must start with YAML frontmatter: '---\\nname: ...\\ndescription: ...\\n---'"
        )
    if meta.get("name") != name:
        raise SkillError(f"frontmatter `name` must be {name!r}, got {meta.get('name')!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("frontmatter needs a non-empty `description`")
    if len(description) > _MAX_DESCRIPTION_CHARS:
        raise SkillError(f"`description` is limited to {_MAX_DESCRIPTION_CHARS} chars")
    if "category" in meta:
        _check_name(meta["category"], "category")
    if not body.strip():
        raise SkillError("SKILL.md needs instructions after the frontmatter")
    return content, meta


def _support_path(file_path: object) -> PurePosixPath:
    """A lexically safe relative path under one of the supporting-file directories."""
    if not isinstance(file_path, str) or not file_path.strip():
        raise SkillError("`file_path` must be a relative path such as 'references/api.md'")
    if "\x00" in file_path or "\\" in file_path:
        raise SkillError(f"file_path {file_path!r} contains a NUL byte or a backslash")
    path = PurePosixPath(file_path)
    if path.is_absolute() or ".." in path.parts:
        raise SkillError(f"file_path {file_path!r} must be relative and must not contain '..'")
    if len(path.parts) < 2 or path.parts[0] not in SUPPORT_DIRS:
        raise SkillError(
            f"file_path {file_path!r} must name a file under "
            + ", ".join(f"{d}/" for d in SUPPORT_DIRS)
        )
    return path


def render_skills_index(skills: Sequence[Skill], categories: dict[str, str] | None = None) -> str:
    """The ``## Skills (mandatory)`` block of the stable prompt tier; ``""`` with no skills.

    Categories, then skills within them, are sorted by name so the same library always
    renders the same bytes whatever order the filesystem listed it in.
    """
    if not skills:
        return ""
    descriptions = categories or {}
    grouped: dict[str, list[Skill]] = {}
    for skill in skills:
        grouped.setdefault(skill.category, []).append(skill)
    lines = ["## Skills (mandatory)", _INDEX_INTRO, "<available_skills>"]
    for category in sorted(grouped):
        about = _one_line(descriptions.get(category, ""), _INDEX_DESCRIPTION_CHARS)
        lines.append(f"  {category}: {about}" if about else f"  {category}:")
        for skill in sorted(grouped[category], key=lambda s: s.name):
            about = _one_line(skill.description, _INDEX_DESCRIPTION_CHARS)
            lines.append(f"    - {skill.name}: {about}" if about else f"    - {skill.name}")
    lines += ["</available_skills>", _INDEX_OUTRO]
    return "\n".join(lines)


# -- async file helpers ----------------------------------------------------------------


async def _read_text(path: Path, limit: int) -> str:
    """Up to ``limit`` bytes of a file, refusing a symlink leaf and binary content."""
    async with await anyio.open_file(path, "rb", opener=open_nofollow) as f:
        data = await f.read(limit + 1)
    if looks_binary(data):
        raise SkillError(f"{path.name} is a binary file; it cannot be shown as text")
    if len(data) > limit:
        raise SkillError(f"{path.name} is larger than {limit:,} bytes")
    return data.decode("utf-8", errors="replace")


async def _sorted_entries(directory: anyio.Path) -> list[anyio.Path]:
    """A directory's entries by name (listing order varies by filesystem). Raises OSError."""
    return sorted([e async for e in directory.iterdir()], key=lambda e: e.name)


async def _files_under(directory: anyio.Path, prefix: str) -> list[str]:
    """Relative paths of regular files under ``directory``; symlinked dirs are not entered."""
    found: list[str] = []
    pending = [(directory, prefix)]
    while pending and len(found) < _MAX_LISTED_FILES:
        current, rel = pending.pop()
        try:
            entries = await _sorted_entries(current)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if await entry.is_symlink() or not await entry.is_dir():
                found.append(f"{rel}/{entry.name}")
            else:
                pending.append((entry, f"{rel}/{entry.name}"))
    return sorted(found)[:_MAX_LISTED_FILES]


async def _remove_tree(path: anyio.Path) -> None:
    """Delete a directory tree without following symlinks (a link is removed, not its target)."""
    if await path.is_symlink() or not await path.is_dir():
        await path.unlink()
        return
    async for entry in path.iterdir():
        await _remove_tree(entry)
    await path.rmdir()


# -- the library -----------------------------------------------------------------------


class SkillLibrary:
    """Discovers skills in the local and external directories and edits the local ones.

    Discovery rescans the disk on every ``list``/``view``/``manage`` call (another process
    may have added a skill); :meth:`index_text` renders the result of the last scan, so call
    :meth:`discover` once before building a prompt.
    """

    def __init__(self, home_skills_dir: Path, external_dirs: Sequence[Path] = ()) -> None:
        self.home = Path(home_skills_dir)
        self.external_dirs = tuple(Path(d) for d in external_dirs)
        self._skills: dict[str, Skill] = {}
        self._categories: dict[str, str] = {}
        self._lock = anyio.Lock()

    # -- discovery ---------------------------------------------------------------------

    async def discover(self) -> list[Skill]:
        """Scan every directory; local first, so its skills win name clashes."""
        skills: dict[str, Skill] = {}
        categories: dict[str, str] = {}
        roots = [(self.home, True)] + [(d, False) for d in self.external_dirs]
        for root, local in roots:
            await self._scan(anyio.Path(root), local, skills, categories)
        self._skills, self._categories = skills, categories
        return sorted(skills.values(), key=lambda s: (s.category, s.name))

    async def _scan(
        self, root: anyio.Path, local: bool, skills: dict[str, Skill], categories: dict[str, str]
    ) -> None:
        if not await root.is_dir():
            return
        pending: list[tuple[anyio.Path, tuple[str, ...]]] = [(root, ())]
        while pending:
            directory, rel = pending.pop(0)
            if rel and await (directory / SKILL_FILE).is_file():
                skill = await self._load(Path(directory), rel, local)
                if skill is not None:
                    skills.setdefault(skill.name, skill)
                continue
            if rel and await (directory / CATEGORY_FILE).is_file():
                categories.setdefault(rel[-1], await self._category_text(directory))
            if len(rel) >= _MAX_DEPTH:
                continue
            try:
                entries = await _sorted_entries(directory)
            except OSError:
                continue
            for entry in entries:
                if not entry.name.startswith(".") and await entry.is_dir():
                    pending.append((entry, (*rel, entry.name)))

    async def _load(self, directory: Path, rel: tuple[str, ...], local: bool) -> Skill | None:
        try:
            meta, body = parse_frontmatter(await _read_text(directory / SKILL_FILE, _HEAD_BYTES))
        except (SkillError, OSError) as exc:
            log.warning("skipping skill at %s: %s", directory, exc)
            return None
        name = meta.get("name", directory.name)
        if not isinstance(name, str) or not _NAME.match(name):
            log.warning("skipping skill at %s: invalid name %r", directory, name)
            return None
        description = meta.get("description")
        if not isinstance(description, str) or not description.strip():
            lines = (ln.strip() for ln in body.splitlines())
            description = next((ln for ln in lines if ln and not ln.startswith("#")), "")
        category = meta.get("category")
        if not isinstance(category, str) or not category.strip():
            category = rel[0] if len(rel) > 1 else DEFAULT_CATEGORY
        return Skill(
            name=name,
            description=_one_line(description, _MAX_DESCRIPTION_CHARS),
            category=category.strip(),
            directory=directory,
            local=local,
        )

    async def _category_text(self, directory: anyio.Path) -> str:
        try:
            meta, body = parse_frontmatter(await _read_text(Path(directory / CATEGORY_FILE), 8192))
        except (SkillError, OSError):
            return ""
        described = meta.get("description")
        if isinstance(described, str) and described.strip():
            return described
        return next((ln.strip() for ln in body.splitlines() if ln.strip()), "").lstrip("# ")

    def index_text(self) -> str:
        """The prompt's skills block for the last :meth:`discover` (``""`` if none)."""
        return render_skills_index(list(self._skills.values()), self._categories)

    async def _find(self, name: object) -> Skill:
        if not isinstance(name, str) or not name.strip():
            raise SkillError("`name` must be a skill name from skills_list")
        await self.discover()
        skill = self._skills.get(name.strip())
        if skill is None:
            raise SkillError(f"unknown skill {name!r}; call skills_list to see the available ones")
        return skill

    async def _confined(self, skill: Skill, rel: PurePosixPath, *, for_write: bool) -> Path:
        """The real path of a supporting file, after the lexical and the symlink checks."""
        workspace = Workspace(skill.directory)
        try:
            real = await workspace.aresolve(str(rel), for_write=for_write)
        except PathOutsideWorkspace as exc:
            raise SkillError(f"file_path {str(rel)!r} is refused: {exc.reason}") from None
        root = workspace.root
        assert root is not None
        inside = real.relative_to(root).parts
        if len(inside) < 2 or inside[0] not in SUPPORT_DIRS:
            raise SkillError(f"file_path {str(rel)!r} is refused: a symlink leads elsewhere")
        return real

    # -- reading -----------------------------------------------------------------------

    async def list(self, category: str | None = None) -> dict[str, Any]:
        """Name, description and category of every skill (optionally one category)."""
        skills = await self.discover()
        chosen = [s for s in skills if category is None or s.category == category]
        result: dict[str, Any] = {
            "success": True,
            "count": len(chosen),
            "skills": [
                {"name": s.name, "description": s.description, "category": s.category}
                for s in chosen
            ],
            "categories": sorted({s.category for s in skills}),
        }
        if category is not None and not chosen:
            result["message"] = f"no skills in category {category!r}"
        else:
            result["hint"] = "Load a skill's instructions with skill_view(name)."
        return result

    async def view(self, name: str, file_path: str | None = None) -> dict[str, Any]:
        """The whole SKILL.md with its supporting-file list, or one supporting file."""
        skill = await self._find(name)
        if file_path is not None:
            rel = _support_path(file_path)
            real = await self._confined(skill, rel, for_write=False)
            if not await anyio.Path(real).is_file():
                raise SkillError(f"skill {skill.name!r} has no file {str(rel)!r}")
            content = await _read_text(real, _MAX_FILE_BYTES)
            return {"success": True, "name": skill.name, "file": rel.as_posix(), "content": content}
        content = await _read_text(skill.skill_file, _MAX_SKILL_CHARS * 4)
        linked: dict[str, list[str]] = {}
        for sub in SUPPORT_DIRS:
            folder = anyio.Path(skill.directory / sub)
            if not await folder.is_symlink() and await folder.is_dir():
                files = await _files_under(folder, sub)
                if files:
                    linked[sub] = files
        result: dict[str, Any] = {
            "success": True,
            "name": skill.name,
            "description": skill.description,
            "category": skill.category,
            "source": "local" if skill.local else "external",
            "content": content,
            "linked_files": linked,
        }
        if linked:
            result["hint"] = "Load a supporting file with skill_view(name, file_path=...)."
        return result

    # -- writing -----------------------------------------------------------------------

    async def manage(
        self,
        action: str,
        name: str,
        *,
        content: str | None = None,
        old_string: str | None = None,
        new_string: str | None = None,
        replace_all: bool = False,
        category: str | None = None,
        file_path: str | None = None,
        file_content: str | None = None,
        absorbed_into: str | None = None,
    ) -> dict[str, Any]:
        """Create, change or delete a local skill; external skills are read-only.

        Writes are atomic (temp file and rename), so a concurrent ``skill_view`` never
        sees half a SKILL.md, and a lock keeps two manage calls from interleaving.
        """
        if action not in MANAGE_ACTIONS:
            raise SkillError(f"`action` must be one of {', '.join(MANAGE_ACTIONS)}; got {action!r}")
        _check_name(name)
        async with self._lock:
            if action == "create":
                return await self._create(name, content, category)
            skill = await self._find(name)
            if not skill.local:
                raise SkillError(
                    f"skill {name!r} is external and read-only; create a local skill of the same "
                    "name to override it"
                )
            if action == "edit":
                text, _ = _validated_skill_md(content, name)
                await atomic_write(skill.skill_file, text.encode())
                return _done(f"Skill {name!r} rewritten.", skill.skill_file)
            if action == "patch":
                return await self._patch(skill, old_string, new_string, replace_all, file_path)
            if action == "delete":
                return await self._delete(skill, absorbed_into)
            rel = _support_path(file_path)
            real = await self._confined(skill, rel, for_write=True)
            if action == "write_file":
                if not isinstance(file_content, str):
                    raise SkillError("write_file needs `file_content` (the file's full text)")
                if len(file_content.encode()) > _MAX_FILE_BYTES:
                    raise SkillError(f"file_content is over {_MAX_FILE_BYTES:,} bytes")
                await atomic_write(real, file_content.encode())
                return _done(f"Wrote {rel.as_posix()} in skill {name!r}.", real)
            target = anyio.Path(real)
            if await target.is_symlink() or not await target.is_file():
                raise SkillError(f"skill {name!r} has no file {rel.as_posix()!r}")
            await target.unlink()
            return _done(f"Removed {rel.as_posix()} from skill {name!r}.", real)

    async def _create(self, name: str, content: str | None, category: str | None) -> dict[str, Any]:
        text, meta = _validated_skill_md(content, name)
        if category is not None:
            _check_name(category, "category")
            if "category" in meta and meta["category"] != category:
                raise SkillError(
                    f"`category` {category!r} disagrees with the frontmatter's {meta['category']!r}"
                )
        folder = category or meta.get("category")
        await self.discover()
        existing = self._skills.get(name)
        if existing is not None and existing.local:
            raise SkillError(f"skill {name!r} already exists; use action 'edit' or 'patch'")
        directory = self.home / folder / name if folder else self.home / name
        if await anyio.Path(directory).exists():
            raise SkillError(f"{directory} already exists; choose another name")
        await anyio.Path(directory).mkdir(parents=True)
        await atomic_write(directory / SKILL_FILE, text.encode())
        await self.discover()
        result = _done(f"Skill {name!r} created.", directory / SKILL_FILE)
        if existing is not None:
            result["note"] = f"it overrides the external skill at {existing.directory}"
        return result

    async def _patch(
        self,
        skill: Skill,
        old_string: str | None,
        new_string: str | None,
        replace_all: bool,
        file_path: str | None,
    ) -> dict[str, Any]:
        if not isinstance(old_string, str) or not old_string:
            raise SkillError("patch needs a non-empty `old_string` copied from the file")
        if not isinstance(new_string, str):
            raise SkillError("patch needs `new_string` (use '' to delete the text)")
        if file_path is None:
            target, shown = skill.skill_file, SKILL_FILE
        else:
            rel = _support_path(file_path)
            target, shown = await self._confined(skill, rel, for_write=True), rel.as_posix()
        text = await _read_text(target, _MAX_FILE_BYTES)
        count = text.count(old_string)
        if count == 0:
            raise SkillError(f"`old_string` was not found in {shown}; view the skill and copy it")
        if count > 1 and not replace_all:
            raise SkillError(
                f"`old_string` occurs {count} times in {shown}; add context or set replace_all"
            )
        updated = text.replace(old_string, new_string, -1 if replace_all else 1)
        if file_path is None:
            _validated_skill_md(updated, skill.name)
        await atomic_write(target, updated.encode())
        result = _done(f"Patched {shown} of skill {skill.name!r}.", target)
        result["replacements"] = count if replace_all else 1
        return result

    async def _delete(self, skill: Skill, absorbed_into: str | None) -> dict[str, Any]:
        if absorbed_into is not None:
            _check_name(absorbed_into, "absorbed_into")
            if absorbed_into == skill.name or absorbed_into not in self._skills:
                raise SkillError("`absorbed_into` must name another existing skill")
        await _remove_tree(anyio.Path(skill.directory))
        parent = anyio.Path(skill.directory.parent)
        if Path(parent) != self.home:
            with contextlib.suppress(OSError):  # an emptied category folder goes too
                await parent.rmdir()
        await self.discover()
        message = f"Skill {skill.name!r} deleted."
        if absorbed_into is not None:
            message += f" Its content lives on in {absorbed_into!r}."
        return _done(message, skill.directory)

    def __repr__(self) -> str:
        return f"SkillLibrary({str(self.home)!r}, external={[str(d) for d in self.external_dirs]})"


def _done(message: str, path: Path) -> dict[str, Any]:
    return {"success": True, "message": message, "path": str(path)}
