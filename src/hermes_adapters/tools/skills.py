"""Skills: procedures the agent keeps on disk, listed in the prompt and loaded on demand.

A skill is a directory holding ``SKILL.md`` (YAML frontmatter with ``name``, ``description``
and ``category``, then Markdown instructions) and optional supporting files under
``references/``, ``templates/``, ``scripts/`` and ``assets/``. Only the one-line index goes
into the system prompt; the body is read with ``skill_view`` when a task needs it, so a large
library costs a few hundred tokens, not its full text (progressive disclosure).

Skills come from ``$HERMES_HOME/skills`` (local, writable) and from any number of external
directories (read-only, e.g. a shared team library). On a name clash the local skill wins,
so a user can override a shared skill by creating one of the same name. ``skill_view`` and
``skill_manage`` take model-supplied paths, so every supporting-file path is confined to its
skill directory the same way the file tools confine paths to the workspace.

The index is a pure function of the discovered skills with a fixed ordering, because the
stable prompt tier must stay byte-identical for provider prompt caching.

This module is the three tools; the library they share (discovery, the SKILL.md format,
confinement, the index) is :mod:`~hermes_adapters.tools._skill_library`, whose public names
are re-exported here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hermes_adapters.tools._common import BadInput, bool_arg
from hermes_adapters.tools._skill_library import (
    MANAGE_ACTIONS,
    SUPPORT_DIRS,
    Skill,
    SkillError,
    SkillLibrary,
    parse_frontmatter,
    render_skills_index,
)
from hermes_core.ports.tools import Tool, ToolContext, ToolResult, ToolSpec, tool_error

__all__ = [
    "MANAGE_ACTIONS",
    "SUPPORT_DIRS",
    "Skill",
    "SkillError",
    "SkillLibrary",
    "SkillManageTool",
    "SkillViewTool",
    "SkillsListTool",
    "parse_frontmatter",
    "render_skills_index",
    "skill_tools",
]

TOOLSET = "skills"
_MANAGE_TEXT_ARGS = (
    "content",
    "old_string",
    "new_string",
    "category",
    "file_path",
    "file_content",
    "absorbed_into",
)


# -- the tools -------------------------------------------------------------------------


def _opt_str(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is not None and not isinstance(value, str):
        raise BadInput(f"argument {key!r} must be a string, got {type(value).__name__}")
    return value


class _SkillTool:
    """Shared shape: a library, a spec, and refusals turned into error results."""

    SPEC: ClassVar[ToolSpec]

    def __init__(self, library: SkillLibrary) -> None:
        self._library = library

    @property
    def spec(self) -> ToolSpec:
        return self.SPEC

    async def available(self) -> bool:
        return True

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not isinstance(args, dict):
            return tool_error("arguments must be a JSON object")
        try:
            return ToolResult.of(await self._run(args))
        except (SkillError, BadInput) as exc:
            return tool_error(str(exc))
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            return tool_error(f"{exc.strerror or exc}{where}")

    async def _run(self, args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._library!r})"


class SkillsListTool(_SkillTool):
    """``skills_list``: the catalogue, so the model can pick a skill to load."""

    SPEC = ToolSpec(
        name="skills_list",
        toolset=TOOLSET,
        parallel_safe=True,
        description=(
            "List available skills (name, description, category). Optionally filter by "
            "category. Load a skill's full instructions with skill_view."
        ),
        parameters={
            "type": "object",
            "properties": {
                "category": {"type": "string", "description": "Only skills in this category."}
            },
        },
    )

    async def _run(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self._library.list(_opt_str(args, "category"))


class SkillViewTool(_SkillTool):
    """``skill_view``: one skill's instructions, or one of its supporting files."""

    SPEC = ToolSpec(
        name="skill_view",
        toolset=TOOLSET,
        parallel_safe=True,
        description=(
            "Load a skill: its full SKILL.md and the list of its supporting files. With "
            "file_path, load one supporting file (under references/, templates/, scripts/ "
            "or assets/) instead."
        ),
        parameters={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The skill name from skills_list."},
                "file_path": {"type": "string", "description": "e.g. 'references/api.md'."},
            },
            "required": ["name"],
        },
    )

    async def _run(self, args: dict[str, Any]) -> dict[str, Any]:
        name = _opt_str(args, "name")
        if not name:
            raise BadInput("missing required argument 'name'")
        return await self._library.view(name, _opt_str(args, "file_path"))


class SkillManageTool(_SkillTool):
    """``skill_manage``: the model records and maintains its own procedures."""

    SPEC = ToolSpec(
        name="skill_manage",
        toolset=TOOLSET,
        description=(
            "Create, update or delete your local skills. create: new skill from `content` "
            "(SKILL.md with frontmatter name, description, optional category). edit: replace "
            "SKILL.md with `content`. patch: replace `old_string` with `new_string` in SKILL.md "
            "(or in `file_path`); set replace_all for every occurrence. delete: remove the "
            "skill (`absorbed_into` names the skill that now holds its content). write_file / "
            "remove_file: a supporting file under references/, templates/, scripts/ or assets/."
        ),
        parameters={
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(MANAGE_ACTIONS)},
                "name": {"type": "string", "maxLength": 64},
                "content": {"type": "string", "description": "Full SKILL.md text."},
                **{key: {"type": "string"} for key in _MANAGE_TEXT_ARGS if key != "content"},
                "replace_all": {"type": "boolean", "default": False},
            },
            "required": ["action", "name"],
        },
    )

    async def _run(self, args: dict[str, Any]) -> dict[str, Any]:
        action = _opt_str(args, "action")
        name = _opt_str(args, "name")
        if not action or not name:
            raise BadInput("skill_manage needs `action` and `name`")
        texts: dict[str, Any] = {key: _opt_str(args, key) for key in _MANAGE_TEXT_ARGS}
        return await self._library.manage(
            action, name, replace_all=bool_arg(args, "replace_all"), **texts
        )


def skill_tools(library: SkillLibrary) -> list[Tool]:
    """The three ``skills`` toolset tools sharing one library."""
    return [SkillsListTool(library), SkillViewTool(library), SkillManageTool(library)]
