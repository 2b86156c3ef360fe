"""The command guard's rules: which commands are hard-blocked and which need approval.

The guard (:mod:`hermes_adapters.tools.approval`) is three jobs: reading shell text
(:mod:`~hermes_adapters.tools._shell_scan`), judging what was read (this module), and turning
the judgement into a decision with the user (``approval``). The rules live here, apart from
the reader and the decision, so the list of what counts as dangerous can be read, reviewed
and extended in one place.

:func:`inspect_command` first checks the raw text for what survives any tokenising (the
fork bomb, SQL that drops, truncates or deletes without ``WHERE``), then judges each simple
command by its command word once wrappers are stripped. Code the guard cannot see through
(``sh -c``, ``eval``, ``$(...)``, backticks, input piped into a shell, unparseable text)
needs approval; where that code is a literal string it is judged too, so ``bash -c 'rm -rf
/'`` is still a hard block.

Each finding is a stable ``R_*`` key: an approval for the session remembers these keys.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from hermes_adapters.tools._shell_scan import (
    Pipeline,
    SimpleCommand,
    SubstitutionKind,
    basename,
    lex,
    operands,
    pipelines,
    short_flags,
    strip_wrappers,
)

__all__ = [
    "MAX_DEPTH",
    "R_CHMOD",
    "R_CHOWN",
    "R_CMD_SUBST",
    "R_DECODED_TO_SHELL",
    "R_DISK_WRITE",
    "R_DYNAMIC_NAME",
    "R_ETC_WRITE",
    "R_EVAL",
    "R_FIND_DELETE",
    "R_FORCE_KILL",
    "R_FORK_BOMB",
    "R_GIT_CLEAN",
    "R_GIT_PUSH",
    "R_GIT_RESET",
    "R_HEREDOC_TO_SHELL",
    "R_KILL_ALL",
    "R_MKFS",
    "R_MOVE_SYSTEM",
    "R_PIPE_TO_SHELL",
    "R_POWER",
    "R_PROC_SUBST",
    "R_RC_WRITE",
    "R_REMOTE_TO_SHELL",
    "R_RM_RECURSIVE",
    "R_ROOT_DELETE",
    "R_SHELL_CODE",
    "R_SQL_DELETE",
    "R_SQL_DROP",
    "R_SQL_TRUNCATE",
    "R_TOO_DEEP",
    "R_UNPARSEABLE",
    "Findings",
    "inspect_command",
    "reads_commands_from_stdin",
]

MAX_DEPTH = 6
"""Nesting of ``sh -c``/``$(...)`` the guard follows before it gives up and asks."""


# --- reasons (stable keys: approvals are remembered by them) -----------------------------

R_ROOT_DELETE = "recursive delete of /, a system directory or the home directory"
R_MKFS = "formatting a filesystem (mkfs)"
R_DISK_WRITE = "writing to a raw disk device"
R_FORK_BOMB = "fork bomb"
R_KILL_ALL = "killing every process (kill -1)"
R_POWER = "shutting down or rebooting the machine"

R_RM_RECURSIVE = "recursive delete"
R_FIND_DELETE = "deleting files with find"
R_CHMOD = "world-writable permissions (chmod)"
R_CHOWN = "recursive chown"
R_SQL_DROP = "SQL DROP"
R_SQL_TRUNCATE = "SQL TRUNCATE"
R_SQL_DELETE = "SQL DELETE without WHERE"
R_ETC_WRITE = "writing to /etc"
R_RC_WRITE = "overwriting a shell startup or SSH file"
R_REMOTE_TO_SHELL = "remote content piped to a shell"
R_DECODED_TO_SHELL = "decoded payload piped to a shell"
R_PIPE_TO_SHELL = "input piped into a shell interpreter"
R_HEREDOC_TO_SHELL = "heredoc fed to a shell interpreter"
R_GIT_RESET = "git reset --hard"
R_GIT_PUSH = "git force push"
R_GIT_CLEAN = "git clean"
R_FORCE_KILL = "force kill (SIGKILL)"
R_MOVE_SYSTEM = "moving a system directory"
R_SHELL_CODE = "shell code string (sh -c)"
R_EVAL = "eval of a constructed command"
R_CMD_SUBST = "command substitution"
R_PROC_SUBST = "process substitution"
R_DYNAMIC_NAME = "command name computed at run time"
R_UNPARSEABLE = "command could not be parsed"
R_TOO_DEEP = "nested shell code too deep to check"

_SUBSTITUTION_REASONS: dict[SubstitutionKind, str] = {
    "command": R_CMD_SUBST,
    "process": R_PROC_SUBST,
}


# --- word lists ---------------------------------------------------------------------------

# fmt: off
_SYSTEM_DIRS = frozenset(
    {
        "/home", "/root", "/etc", "/usr", "/var", "/bin", "/sbin", "/boot", "/lib",
        "/lib64", "/opt", "/srv", "/dev", "/proc", "/sys",
    }
)
# fmt: on
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh"})
_INTERPRETER = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|perl|ruby|node|nodejs|php|lua|pwsh)$")
_FETCHERS = frozenset({"curl", "wget", "fetch", "http", "https", "aria2c", "lwp-request"})
_DECODERS = frozenset({"base64", "base32", "basenc", "xxd", "openssl", "uudecode", "gpg"})
# fmt: off
_RC_FILES = frozenset(
    {
        ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
        ".zprofile", ".zshenv", ".zlogin", ".kshrc", ".cshrc", ".tcshrc",
        "authorized_keys",
    }
)
# fmt: on
_DISK = re.compile(r"^/dev/(sd|nvme|hd|mmcblk|vd|xvd)")
_POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_STDIN_CLIENTS = frozenset(
    {"psql", "mysql", "mariadb", "sqlite3", "mongo", "mongosh", "redis-cli", "sqlcmd", "duckdb"}
)


# --- targets and interpreters -------------------------------------------------------------


def _normalise_path(arg: str) -> str:
    """A target as a comparable path: ``$HOME``/``${HOME}`` become ``~``, dots collapse."""
    path = arg.replace("${HOME}", "~").replace("$HOME", "~")
    if path.startswith("~"):
        _, _, tail = path.partition("/")  # "~" and "~user" are both somebody's home
        rest = posixpath.normpath("/" + tail) if tail else "/"
        return "~" if rest == "/" else "~" + rest
    if path.startswith("/"):
        return "/" + posixpath.normpath(path).lstrip("/")
    return path


def _is_critical_target(arg: str) -> bool:
    """``/``, a system directory, the home directory, or everything inside one of them."""
    path = _normalise_path(arg)
    if path.endswith("/*"):
        path = path[:-2] or "/"
    return path in {"/", "~"} or path in _SYSTEM_DIRS


def _under_etc(arg: str) -> bool:
    path = _normalise_path(arg)
    return path == "/etc" or path.startswith("/etc/")


def _is_rc_file(arg: str) -> bool:
    return basename(_normalise_path(arg)) in _RC_FILES


def _world_writable(mode: str) -> bool:
    """Does a chmod mode give write permission to everyone (``777``, ``o+w``, ``a=rwx``)?"""
    if re.fullmatch(r"[0-7]{3,4}", mode):
        return int(mode[-1]) & 2 == 2
    for clause in mode.split(","):
        m = re.fullmatch(r"([ugoa]*)([+=])([rwxXst]*)", clause)
        if m and "w" in m.group(3) and ("o" in m.group(1) or "a" in m.group(1)):
            return True
    return False


def _is_interpreter(name: str) -> bool:
    return name in _SHELLS or bool(_INTERPRETER.match(name))


def _reads_code_from_stdin(words: Sequence[str]) -> bool:
    """An interpreter with no script argument executes whatever arrives on stdin."""
    if not words:
        return False
    name = basename(words[0])
    if not _is_interpreter(name):
        return False
    args = words[1:]
    flags = short_flags(args)
    if name in _SHELLS:
        if "c" in flags:
            return False
        return "s" in flags or not operands(args)
    if any(a in {"-c", "-e", "-m", "-E", "--eval", "--command"} for a in args):
        return False
    found = operands(args)
    return not found or found[0] == "-"


# --- rules ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Findings:
    """What the rules found, in the order found: hard blocks and approval triggers."""

    blocks: list[str] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)

    def block(self, reason: str) -> None:
        if reason not in self.blocks:
            self.blocks.append(reason)

    def ask(self, reason: str) -> None:
        if reason not in self.approvals:
            self.approvals.append(reason)

    def merge(self, other: Findings) -> None:
        """Take in the findings of nested code (``sh -c``, ``$(...)``, a heredoc body)."""
        for reason in other.blocks:
            self.block(reason)
        for reason in other.approvals:
            self.ask(reason)


def _check_write_targets(targets: Sequence[str], out: Findings) -> None:
    """Paths about to be written: a raw disk, ``/etc``, a shell startup or SSH file."""
    if any(_DISK.match(t) for t in targets):
        out.block(R_DISK_WRITE)
    if any(_under_etc(t) for t in targets):
        out.ask(R_ETC_WRITE)
    if any(_is_rc_file(t) for t in targets):
        out.ask(R_RC_WRITE)


def _check_rm(args: list[str], out: Findings) -> None:
    recursive = "r" in short_flags(args).lower() or "--recursive" in args
    if not recursive:
        return
    if any(_is_critical_target(t) for t in operands(args)):
        out.block(R_ROOT_DELETE)
    else:
        out.ask(R_RM_RECURSIVE)


def _check_kill(name: str, args: list[str], out: Findings) -> None:
    if name in {"pkill", "killall"}:
        if _kill_signal(args) in {"9", "KILL", "SIGKILL"}:
            out.ask(R_FORCE_KILL)
        return
    if args == ["-1"]:
        out.block(R_KILL_ALL)
        return
    signal, targets = None, list(args)
    if targets and targets[0] in {"-s", "-n", "--signal"} and len(targets) > 1:
        signal, targets = targets[1], targets[2:]
    elif targets and targets[0].startswith("-") and targets[0] != "--" and len(targets) > 1:
        signal, targets = targets[0][1:], targets[1:]
    if targets and targets[0] == "--":
        targets = targets[1:]
    if "-1" in targets:
        out.block(R_KILL_ALL)
    if signal is not None and signal.upper().removeprefix("SIG") in {"9", "KILL"}:
        out.ask(R_FORCE_KILL)


def _kill_signal(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg in {"-s", "--signal"} and i + 1 < len(args):
            return args[i + 1].upper()
        if arg.startswith("--signal="):
            return arg.split("=", 1)[1].upper()
        if arg.startswith("-") and arg[1:].upper() in {"9", "KILL", "SIGKILL"}:
            return arg[1:].upper()
    return None


def _check_git(args: list[str], out: Findings) -> None:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        if opt in {"-C", "-c", "--git-dir", "--work-tree", "--namespace"} and rest:
            rest.pop(0)
    if not rest:
        return
    sub, sub_args = rest[0], rest[1:]
    if sub == "reset" and "--hard" in sub_args:
        out.ask(R_GIT_RESET)
    elif sub == "push" and (
        "f" in short_flags(sub_args)
        or any(a == "--force" or a.startswith("--force-with-lease") for a in sub_args)
        or any(a.startswith("+") for a in operands(sub_args))
        or "--mirror" in sub_args
        or "--delete" in sub_args
    ):
        out.ask(R_GIT_PUSH)
    elif sub == "clean" and ("f" in short_flags(sub_args) or "--force" in sub_args):
        out.ask(R_GIT_CLEAN)


def _check_find(args: list[str], out: Findings, depth: int) -> None:
    if "-delete" in args:
        out.ask(R_FIND_DELETE)
    for i, arg in enumerate(args):
        if arg in {"-exec", "-execdir", "-ok", "-okdir"}:
            inner: list[str] = []
            for word in args[i + 1 :]:
                if word in {";", "+"}:
                    break
                inner.append(word)
            command = strip_wrappers(inner)[0]
            if command and basename(command[0]) in {"rm", "shred", "unlink"}:
                out.ask(R_FIND_DELETE)
            _check_simple(SimpleCommand(words=inner), out, depth + 1)


def _check_command(name: str, args: list[str], out: Findings, depth: int) -> None:
    """The rules keyed on the command word (already stripped of wrappers)."""
    if name == "rm":
        _check_rm(args, out)
    elif name.startswith("mkfs") or name in {"mke2fs", "mkswap"}:
        out.block(R_MKFS)
    elif name == "dd":
        if any(a.startswith("of=") and _DISK.match(a[3:]) for a in args):
            out.block(R_DISK_WRITE)
    elif name in {"kill", "pkill", "killall"}:
        _check_kill(name, args, out)
    elif name in _POWER:
        out.block(R_POWER)
    elif name in {"init", "telinit"}:
        if any(a in {"0", "6"} for a in args):
            out.block(R_POWER)
    elif name == "systemctl":
        ops = operands(args)
        if ops and ops[0] in {"poweroff", "reboot", "halt", "kexec"}:
            out.block(R_POWER)
    elif name == "find":
        _check_find(args, out, depth)
    elif name == "chmod":
        mode = next((a for a in args if not a.startswith("-") or re.fullmatch(r"-[rwx]+", a)), "")
        if _world_writable(mode):
            out.ask(R_CHMOD)
    elif name in {"chown", "chgrp"}:
        if "R" in short_flags(args) or "--recursive" in args:
            out.ask(R_CHOWN)
    elif name == "git":
        _check_git(args, out)
    elif name == "mv":
        if any(_is_critical_target(a) for a in operands(args)):
            out.ask(R_MOVE_SYSTEM)
    elif name in {"tee", "cp", "install", "ln", "rsync"}:
        _check_write_targets(operands(args) if name == "tee" else operands(args)[-1:], out)
    elif name == "sed":
        in_place = "i" in short_flags(args) or any(a.startswith("--in-place") for a in args)
        if in_place and any(_under_etc(t) for t in operands(args)):
            out.ask(R_ETC_WRITE)
    elif name == "eval":
        out.ask(R_EVAL)
        out.merge(inspect_command(" ".join(args), depth + 1))
    elif name in _SHELLS or name == "su":
        _check_shell_code(args, out, depth)


def _check_shell_code(args: list[str], out: Findings, depth: int) -> None:
    """``sh -c CODE``: ask, and judge CODE too so a hard block inside stays a hard block."""
    for i, arg in enumerate(args):
        if arg == "--":
            return
        if arg in {"-c", "--command"} or (
            arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]
        ):
            out.ask(R_SHELL_CODE)
            code = next((a for a in args[i + 1 :] if not a.startswith("-")), "")
            out.merge(inspect_command(code, depth + 1))
            return


def _check_simple(simple: SimpleCommand, out: Findings, depth: int) -> None:
    for op, target in simple.redirects:
        if ">" not in op or target.isdigit() or target == "-":
            continue
        _check_write_targets((target,), out)
    words, split_strings = strip_wrappers(simple.words)
    for code in split_strings:
        out.ask(R_SHELL_CODE)
        out.merge(inspect_command(code, depth + 1))
    if not words:
        return
    head = words[0]
    if "$" in head or "`" in head:
        out.ask(R_DYNAMIC_NAME)
        return
    name = basename(head)
    if any(ch in head for ch in "*?[") or ("{" in head and "," in head):  # glob, {rm,-rf,/}
        out.ask(R_DYNAMIC_NAME)
        return
    if simple.stdin_text and _reads_code_from_stdin(words):
        out.ask(R_HEREDOC_TO_SHELL)
        for code in simple.stdin_text:
            out.merge(inspect_command(code, depth + 1))
    _check_command(name, words[1:], out, depth)


def _check_pipeline(pipe: Pipeline, out: Findings, depth: int) -> None:
    stripped = [strip_wrappers(s.words)[0] for s in pipe]
    for index, simple in enumerate(pipe):
        _check_simple(simple, out, depth)
        if index == 0 or not _reads_code_from_stdin(stripped[index]):
            continue
        for before, words in zip(pipe[:index], stripped[:index], strict=True):
            for code in before.stdin_text:  # cat <<EOF | sh: the body is the code
                out.merge(inspect_command(code, depth + 1))
            if words and basename(words[0]) in {"echo", "printf"}:
                out.merge(inspect_command(" ".join(words[1:]), depth + 1))
        upstream = [basename(w[0]) for w in stripped[:index] if w]
        if any(name in _FETCHERS for name in upstream):
            out.ask(R_REMOTE_TO_SHELL)
        elif any(
            name in _DECODERS and any(f in s for f in ("-d", "--decode", "-D", "-r"))
            for name, s in zip(upstream, stripped[:index], strict=False)
        ):
            out.ask(R_DECODED_TO_SHELL)
        else:
            out.ask(R_PIPE_TO_SHELL)


_FORK_BOMB = re.compile(
    r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;?\s*:"
    r"|(?P<fn>[A-Za-z_][\w]*)\s*\(\s*\)\s*\{[^}]*\b(?P=fn)\s*\|\s*(?P=fn)\s*&"
)
_SQL_DROP = re.compile(r"\bDROP\s+(TABLE|DATABASE|SCHEMA)\b", re.IGNORECASE)
_SQL_TRUNCATE = re.compile(r"\b(?:(?i:truncate)\s+(?i:table)\b|TRUNCATE\s+\w)")
_SQL_DELETE = re.compile(r"\bDELETE\s+FROM\b(?P<rest>[^;\"'\n]*)", re.IGNORECASE)
_SQL_WHERE = re.compile(r"\bWHERE\b", re.IGNORECASE)


def _text_checks(text: str, out: Findings) -> None:
    if _FORK_BOMB.search(text):
        out.block(R_FORK_BOMB)
    if _SQL_DROP.search(text):
        out.ask(R_SQL_DROP)
    if _SQL_TRUNCATE.search(text):
        out.ask(R_SQL_TRUNCATE)
    for m in _SQL_DELETE.finditer(text):
        if not _SQL_WHERE.search(m.group("rest")):
            out.ask(R_SQL_DELETE)


def inspect_command(command: str, depth: int = 0) -> Findings:
    """Every rule's findings for one command line nested ``depth`` levels deep.

    Text that cannot be parsed is itself a finding (:data:`R_UNPARSEABLE`); a bug in a rule
    may still raise, which the caller must treat as "needs approval".
    """
    out = Findings()
    if depth > MAX_DEPTH:
        out.ask(R_TOO_DEEP)
        return out
    command = command.replace("\\\n", "")  # bash joins lines first: r\<newline>m is rm
    _text_checks(command, out)
    try:
        lexed = lex(command)
        found = pipelines(lexed.tokens)
    except ValueError:
        out.ask(R_UNPARSEABLE)
        return out
    for kind, inner in lexed.substitutions:
        out.ask(_SUBSTITUTION_REASONS[kind])
        out.merge(inspect_command(inner, depth + 1))
    for pipe in found:
        _check_pipeline(pipe, out, depth)
    return out


def reads_commands_from_stdin(command: str) -> bool:
    """Does some stage of ``command`` execute what it reads on stdin?

    True for a shell or interpreter without a script and for SQL/database clients: text
    written to such a process later is itself a command and goes through the guard too.
    Unparseable text counts as yes.
    """
    try:
        found = pipelines(lex(command).tokens)
    except ValueError:
        return True
    for pipe in found:
        for simple in pipe:
            words = strip_wrappers(simple.words)[0]
            if words and (_reads_code_from_stdin(words) or basename(words[0]) in _STDIN_CLIENTS):
                return True
    return False
