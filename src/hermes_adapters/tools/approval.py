"""The command guard: which shell commands need the user's approval, and which never run.

This is a tripwire for approval prompts, not a sandbox. A determined model (or a prompt
injection) can always phrase a destructive command so that no static check recognises it:
a script written to disk and run, ``python -c``, a compiler, a network download. The guard
exists to stop the common accidents and the well-known bypasses (WIRE.md §5) and to put a
human in the loop for them; the real limits are the process group, the timeout, the
scrubbed environment and the pinned working directory of the terminal tool, and, where it
matters, an OS sandbox around the whole agent.

How a command is judged (:func:`assess_command`):

1. The raw text is checked for things that survive any tokenising: the fork bomb and SQL
   that drops, truncates or deletes without ``WHERE``.
2. A small quote-aware scanner splits the text into simple commands at the shell's control
   operators (``;``, ``&&``, ``||``, ``|``, ``&``, newlines, parentheses) and pulls out
   redirections, heredoc bodies and command/process substitutions. Operators are only
   recognised outside quotes, so ``rm -rf ';' /`` stays one command. Each word is then
   unquoted with :mod:`shlex`, so ``r''m``, ``\\rm`` and ``"rm"`` all read as ``rm``.
3. Wrappers are stripped from each simple command (``sudo``, ``env``, ``VAR=val``,
   ``nohup``, ``time``, ``nice``, ``timeout N``, ``command``, ``exec``, ``xargs`` ...) and
   the command word is reduced to its basename, so ``/usr/bin/rm`` is ``rm``.
4. Rules keyed on the command word decide. Code the guard cannot see through (``sh -c``,
   ``eval``, ``$(...)``, backticks, input piped into a shell, unparseable text) needs
   approval; where the code is a literal string it is judged too, so ``bash -c 'rm -rf /'``
   is still a hard block.

:class:`Approvals` turns a verdict into a decision: hard blocks are refused, dangerous
commands go to the host's approver (once, for the session, always, or deny), and without an
approver they are refused with a message telling the model to ask the user.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hermes_core.ports.interaction import Approver

__all__ = [
    "Approvals",
    "Assessment",
    "DENIED_MESSAGE",
    "Verdict",
    "assess_command",
    "reads_commands_from_stdin",
]

Verdict = Literal["allow", "needs_approval", "block"]

DENIED_MESSAGE = "BLOCKED: Command denied by the user. Do NOT retry or rephrase it."
_NO_APPROVER = (
    "BLOCKED: approval required ({reason}) but no approval callback is registered. "
    "Ask the user to run it themselves or to enable approvals."
)
_HARD_BLOCK = "BLOCKED: {reason}. This command is never allowed."

_MAX_DEPTH = 6
"""Nesting of ``sh -c``/``$(...)`` the guard follows before it gives up and asks."""


@dataclass(frozen=True, slots=True)
class Assessment:
    """The guard's verdict on one command line.

    ``reason`` is what the user is shown; ``reasons`` are the individual findings behind a
    ``needs_approval`` verdict, each a stable key that a "session"/"always" decision
    remembers, so approving "recursive delete" once covers later recursive deletes too.
    """

    verdict: Verdict
    reason: str = ""
    reasons: tuple[str, ...] = field(default=())


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
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "do", "while", "until"})
_POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})

# fmt: off
_XARGS_ARG_OPTIONS = frozenset(
    {
        "-I", "-n", "-P", "-L", "-s", "-d", "-E", "-a", "--max-args", "--max-procs",
        "--delimiter", "--arg-file", "--max-lines", "--max-chars", "--eof",
    }
)
# fmt: on

# Wrappers: command word -> options that consume the next word. Anything else starting
# with "-" is taken as a flag; "--" ends the options.
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "nohup": frozenset(),
    "setsid": frozenset(),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "-P", "-u"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "busybox": frozenset(),
    "chroot": frozenset({"--userspec", "--groups"}),
    "xargs": _XARGS_ARG_OPTIONS,
}
_WRAPPER_POSITIONALS = {"timeout": 1, "chroot": 1}
"""Wrappers followed by a positional argument of their own before the wrapped command."""


# --- lexing ---------------------------------------------------------------------------------

# fmt: off
_OPERATORS = sorted(
    [
        "<<<", "<<-", "&>>", ";;&", "&&", "||", ";;", ";&", "|&", ">>", "<<", ">&", "<&",
        "&>", ">|", "<>", ";", "&", "|", "(", ")", "<", ">", "\n",
    ],
    key=len,
    reverse=True,
)
# fmt: on
_OP_CHARS = frozenset(";&|()<>\n")
_PIPES = frozenset({"|", "|&"})
_REDIRECTS = frozenset({"<", ">", ">>", "<<", "<<-", "<<<", ">&", "<&", "&>", "&>>", ">|", "<>"})


@dataclass(slots=True)
class _Token:
    kind: Literal["word", "op"]
    raw: str
    value: str = ""
    quoted: bool = False
    fd: bool = False  # a file-descriptor number glued to a redirection ("2>")
    body: str = ""  # for a heredoc delimiter: the heredoc's text


@dataclass(slots=True)
class _Lexed:
    tokens: list[_Token]
    substitutions: list[tuple[str, str]]  # (reason, inner code)


@dataclass(slots=True)
class _Simple:
    """One simple command: its words (unquoted) and where its streams go."""

    words: list[str] = field(default_factory=list)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    stdin_text: list[str] = field(default_factory=list)  # heredoc bodies, here-strings


def _match_paren(text: str, i: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``i``, skipping quoted text."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise ValueError("unclosed single quote")
            i = j + 1
            continue
        if c == '"':
            i = _skip_dquote(text, i + 1, [])
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced parenthesis")


def _backtick_end(text: str, i: int) -> int:
    """Index of the backtick closing the one at ``i``."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == "`":
            return j
        j += 1
    raise ValueError("unclosed backtick")


def _scan_substitution(text: str, i: int, subs: list[tuple[str, str]]) -> int | None:
    """If ``$(``, ``$((`` or a backtick starts at ``i``, record it and return its end."""
    if text.startswith("$((", i):
        return _match_paren(text, i + 1) + 1  # arithmetic: no command runs
    if text.startswith("$(", i):
        end = _match_paren(text, i + 1)
        subs.append((R_CMD_SUBST, text[i + 2 : end]))
        return end + 1
    if text[i] == "`":
        end = _backtick_end(text, i)
        subs.append((R_CMD_SUBST, text[i + 1 : end]))
        return end + 1
    if text.startswith("${", i):
        end = text.find("}", i)
        if end < 0:
            raise ValueError("unclosed ${")
        inner = text[i + 2 : end]
        if "$(" in inner or "`" in inner:
            subs.append((R_CMD_SUBST, inner))
        return end + 1
    return None


def _skip_dquote(text: str, i: int, subs: list[tuple[str, str]]) -> int:
    """Scan a double-quoted string starting after its ``"``; substitutions still run there."""
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        end = _scan_substitution(text, i, subs) if c in "$`" else None
        i = end if end is not None else i + 1
    raise ValueError("unclosed double quote")


def _body_substitutions(body: str, subs: list[tuple[str, str]]) -> None:
    """An unquoted heredoc delimiter means ``$(...)`` in the body runs: find them."""
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            i += 2
            continue
        end = _scan_substitution(body, i, subs) if c in "$`" else None
        i = end if end is not None else i + 1


def _unquote(raw: str) -> str:
    """The word as the command sees it (quotes and escapes removed, no expansion)."""
    return " ".join(shlex.split(raw, comments=False, posix=True))


def _lex(text: str) -> _Lexed:
    """Split ``text`` into words and operators, the way the shell does before expansion.

    Raises:
        ValueError: unbalanced quotes, parentheses or backticks.
    """
    tokens: list[_Token] = []
    subs: list[tuple[str, str]] = []
    pending_heredocs: list[tuple[_Token, bool]] = []  # (delimiter word, strip tabs)
    expect_delimiter: bool | None = None
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and text.startswith("\\\n", i):
            i += 2  # line continuation
            continue
        if c == "#":  # a comment starts only at the beginning of a word
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if c in "<>" and text.startswith("(", i + 1):
            end = _match_paren(text, i + 1)
            subs.append((R_PROC_SUBST, text[i + 2 : end]))
            raw = text[i : end + 1]
            tokens.append(_Token("word", raw, raw))
            i = end + 1
            continue
        if c in _OP_CHARS:
            op = next(o for o in _OPERATORS if text.startswith(o, i))
            tokens.append(_Token("op", op))
            i += len(op)
            if op in {"<<", "<<-"}:
                expect_delimiter = op == "<<-"
            if op == "\n" and pending_heredocs:
                i = _consume_heredocs(text, i, pending_heredocs, subs)
                pending_heredocs.clear()
            continue
        start = i
        while i < n:
            c = text[i]
            if c in " \t\r" or c in _OP_CHARS:
                break
            if c == "\\":
                i += 2
                continue
            if c == "'":
                j = text.find("'", i + 1)
                if j < 0:
                    raise ValueError("unclosed single quote")
                i = j + 1
                continue
            if c == '"':
                i = _skip_dquote(text, i + 1, subs)
                continue
            stop = _scan_substitution(text, i, subs) if c in "$`" else None
            i = stop if stop is not None else i + 1
        raw = text[start:i]
        quoted = any(q in raw for q in "'\"\\")
        token = _Token("word", raw, _unquote(raw), quoted)
        token.fd = raw.isdigit() and i < n and text[i] in "<>"
        tokens.append(token)
        if expect_delimiter is not None:
            pending_heredocs.append((token, expect_delimiter))
            expect_delimiter = None
    if pending_heredocs:
        _consume_heredocs(text, n, pending_heredocs, subs)
    return _Lexed(tokens, subs)


def _consume_heredocs(
    text: str, i: int, pending: list[tuple[_Token, bool]], subs: list[tuple[str, str]]
) -> int:
    """Read heredoc bodies after a newline into their delimiter tokens.

    Returns where the next command starts. An unterminated heredoc runs to the end of the
    text, as in bash.
    """
    for delimiter, strip_tabs in pending:
        start = end = i
        while i < len(text):
            nl = text.find("\n", i)
            line = text[i : len(text) if nl < 0 else nl]
            end = i
            i = len(text) if nl < 0 else nl + 1
            if (line.lstrip("\t") if strip_tabs else line) == delimiter.value:
                break
        else:
            end = len(text)
        delimiter.body = text[start:end]
        if not delimiter.quoted:
            _body_substitutions(delimiter.body, subs)
    return i


def _pipelines(tokens: Sequence[_Token]) -> list[list[_Simple]]:
    """Group tokens into pipelines of simple commands.

    Raises:
        ValueError: a redirection without a target.
    """
    pipelines: list[list[_Simple]] = []
    pipe: list[_Simple] = []
    simple = _Simple()

    def end_simple() -> None:
        nonlocal simple
        if simple.words or simple.redirects:
            pipe.append(simple)
        simple = _Simple()

    it = iter(tokens)
    for token in it:
        if token.kind == "word":
            if not token.fd:
                simple.words.append(token.value)
            continue
        if token.raw in _REDIRECTS:
            target = next(it, None)
            if target is None or target.kind != "word":
                raise ValueError(f"redirection {token.raw!r} without a target")
            simple.redirects.append((token.raw, target.value))
            if token.raw in {"<<", "<<-"}:
                simple.stdin_text.append(target.body)
            elif token.raw == "<<<":
                simple.stdin_text.append(target.value)
            continue
        end_simple()
        if token.raw not in _PIPES and pipe:
            pipelines.append(pipe)
            pipe = []
    end_simple()
    if pipe:
        pipelines.append(pipe)
    return pipelines


# --- wrapper stripping and small helpers --------------------------------------------------


def _basename(word: str) -> str:
    return posixpath.basename(word) or word


def _short_flags(args: Sequence[str]) -> str:
    """All single-letter flags before ``--`` run together: ``-r -f`` and ``-rf`` both give rf."""
    letters = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--"):
            letters.append(arg[1:])
    return "".join(letters)


def _operands(args: Sequence[str]) -> list[str]:
    """Arguments that are not options (everything after ``--`` counts)."""
    out: list[str] = []
    dashdash = False
    for arg in args:
        if dashdash:
            out.append(arg)
        elif arg == "--":
            dashdash = True
        elif not arg.startswith("-") or arg == "-":
            out.append(arg)
    return out


def _strip_wrappers(words: list[str]) -> tuple[list[str], list[str]]:
    """The wrapped command once wrappers, assignments and keywords are peeled off.

    Returns the command words and any ``env -S`` strings (code the guard should re-read).
    """
    words = list(words)
    split_strings: list[str] = []
    changed = True
    while words and changed:
        changed = False
        while words and (_ASSIGNMENT.match(words[0]) or words[0] in _KEYWORDS):
            words.pop(0)
            changed = True
        if not words:
            break
        name = _basename(words[0])
        if name not in _WRAPPERS:
            break
        if name == "command" and len(words) > 1 and words[1] in {"-v", "-V"}:
            return [], split_strings  # a lookup, nothing runs
        takes_arg = _WRAPPERS[name]
        words.pop(0)
        changed = True
        while words and words[0].startswith("-") and words[0] != "-":
            opt = words.pop(0)
            if opt == "--":
                break
            if name == "env" and (opt in {"-S", "--split-string"} or opt.startswith("-S")):
                code = opt[2:] if opt.startswith("-S") and len(opt) > 2 else ""
                if not code and words:
                    code = words.pop(0)
                split_strings.append(code)
                continue
            if opt.startswith("--split-string="):
                split_strings.append(opt.split("=", 1)[1])
                continue
            if opt in takes_arg and "=" not in opt and words:
                words.pop(0)
        for _ in range(_WRAPPER_POSITIONALS.get(name, 0)):
            if words:
                words.pop(0)
    return words, split_strings


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
    return _basename(_normalise_path(arg)) in _RC_FILES


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
    name = _basename(words[0])
    if not _is_interpreter(name):
        return False
    args = words[1:]
    flags = _short_flags(args)
    if name in _SHELLS:
        if "c" in flags:
            return False
        return "s" in flags or not _operands(args)
    if any(a in {"-c", "-e", "-m", "-E", "--eval", "--command"} for a in args):
        return False
    operands = _operands(args)
    return not operands or operands[0] == "-"


# --- rules ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Findings:
    blocks: list[str] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)

    def block(self, reason: str) -> None:
        if reason not in self.blocks:
            self.blocks.append(reason)

    def ask(self, reason: str) -> None:
        if reason not in self.approvals:
            self.approvals.append(reason)

    def merge(self, other: Assessment) -> None:
        if other.verdict == "block":
            for reason in other.reasons or (other.reason,):
                self.block(reason)
        elif other.verdict == "needs_approval":
            for reason in other.reasons or (other.reason,):
                self.ask(reason)


def _check_rm(args: list[str], out: _Findings) -> None:
    recursive = "r" in _short_flags(args).lower() or "--recursive" in args
    if not recursive:
        return
    if any(_is_critical_target(t) for t in _operands(args)):
        out.block(R_ROOT_DELETE)
    else:
        out.ask(R_RM_RECURSIVE)


def _check_kill(name: str, args: list[str], out: _Findings) -> None:
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


def _check_git(args: list[str], out: _Findings) -> None:
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
        "f" in _short_flags(sub_args)
        or any(a == "--force" or a.startswith("--force-with-lease") for a in sub_args)
        or any(a.startswith("+") for a in _operands(sub_args))
        or "--mirror" in sub_args
        or "--delete" in sub_args
    ):
        out.ask(R_GIT_PUSH)
    elif sub == "clean" and ("f" in _short_flags(sub_args) or "--force" in sub_args):
        out.ask(R_GIT_CLEAN)


def _check_find(args: list[str], out: _Findings, depth: int) -> None:
    if "-delete" in args:
        out.ask(R_FIND_DELETE)
    for i, arg in enumerate(args):
        if arg in {"-exec", "-execdir", "-ok", "-okdir"}:
            inner: list[str] = []
            for word in args[i + 1 :]:
                if word in {";", "+"}:
                    break
                inner.append(word)
            command = _strip_wrappers(inner)[0]
            if command and _basename(command[0]) in {"rm", "shred", "unlink"}:
                out.ask(R_FIND_DELETE)
            _check_simple(_Simple(words=inner), out, depth + 1)


def _check_command(name: str, args: list[str], out: _Findings, depth: int) -> None:
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
        ops = _operands(args)
        if ops and ops[0] in {"poweroff", "reboot", "halt", "kexec"}:
            out.block(R_POWER)
    elif name == "find":
        _check_find(args, out, depth)
    elif name == "chmod":
        mode = next((a for a in args if not a.startswith("-") or re.fullmatch(r"-[rwx]+", a)), "")
        if _world_writable(mode):
            out.ask(R_CHMOD)
    elif name in {"chown", "chgrp"}:
        if "R" in _short_flags(args) or "--recursive" in args:
            out.ask(R_CHOWN)
    elif name == "git":
        _check_git(args, out)
    elif name == "mv":
        if any(_is_critical_target(a) for a in _operands(args)):
            out.ask(R_MOVE_SYSTEM)
    elif name in {"tee", "cp", "install", "ln", "rsync"}:
        targets = _operands(args) if name == "tee" else _operands(args)[-1:]
        if any(_DISK.match(t) for t in targets):
            out.block(R_DISK_WRITE)
        if any(_under_etc(t) for t in targets):
            out.ask(R_ETC_WRITE)
        if any(_is_rc_file(t) for t in targets):
            out.ask(R_RC_WRITE)
    elif name == "sed":
        in_place = "i" in _short_flags(args) or any(a.startswith("--in-place") for a in args)
        if in_place and any(_under_etc(t) for t in _operands(args)):
            out.ask(R_ETC_WRITE)
    elif name == "eval":
        out.ask(R_EVAL)
        out.merge(_assess(" ".join(args), depth + 1))
    elif name in _SHELLS or name == "su":
        _check_shell_code(args, out, depth)


def _check_shell_code(args: list[str], out: _Findings, depth: int) -> None:
    """``sh -c CODE``: ask, and judge CODE too so a hard block inside stays a hard block."""
    for i, arg in enumerate(args):
        if arg == "--":
            return
        if arg in {"-c", "--command"} or (
            arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]
        ):
            out.ask(R_SHELL_CODE)
            code = next((a for a in args[i + 1 :] if not a.startswith("-")), "")
            out.merge(_assess(code, depth + 1))
            return


def _check_simple(simple: _Simple, out: _Findings, depth: int) -> None:
    for op, target in simple.redirects:
        if ">" not in op or target.isdigit() or target == "-":
            continue
        if _DISK.match(target):
            out.block(R_DISK_WRITE)
        if _under_etc(target):
            out.ask(R_ETC_WRITE)
        if _is_rc_file(target):
            out.ask(R_RC_WRITE)
    words, split_strings = _strip_wrappers(simple.words)
    for code in split_strings:
        out.ask(R_SHELL_CODE)
        out.merge(_assess(code, depth + 1))
    if not words:
        return
    head = words[0]
    if "$" in head or "`" in head:
        out.ask(R_DYNAMIC_NAME)
        return
    name = _basename(head)
    if any(ch in head for ch in "*?[") or ("{" in head and "," in head):  # glob, {rm,-rf,/}
        out.ask(R_DYNAMIC_NAME)
        return
    if simple.stdin_text and _reads_code_from_stdin(words):
        out.ask(R_HEREDOC_TO_SHELL)
        for code in simple.stdin_text:
            out.merge(_assess(code, depth + 1))
    _check_command(name, words[1:], out, depth)


def _check_pipeline(pipe: list[_Simple], out: _Findings, depth: int) -> None:
    stripped = [_strip_wrappers(s.words)[0] for s in pipe]
    for index, simple in enumerate(pipe):
        _check_simple(simple, out, depth)
        if index == 0 or not _reads_code_from_stdin(stripped[index]):
            continue
        for before, words in zip(pipe[:index], stripped[:index], strict=True):
            for code in before.stdin_text:  # cat <<EOF | sh: the body is the code
                out.merge(_assess(code, depth + 1))
            if words and _basename(words[0]) in {"echo", "printf"}:
                out.merge(_assess(" ".join(words[1:]), depth + 1))
        upstream = [_basename(w[0]) for w in stripped[:index] if w]
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


def _text_checks(text: str, out: _Findings) -> None:
    if _FORK_BOMB.search(text):
        out.block(R_FORK_BOMB)
    if _SQL_DROP.search(text):
        out.ask(R_SQL_DROP)
    if _SQL_TRUNCATE.search(text):
        out.ask(R_SQL_TRUNCATE)
    for m in _SQL_DELETE.finditer(text):
        if not _SQL_WHERE.search(m.group("rest")):
            out.ask(R_SQL_DELETE)


def _assess(command: str, depth: int) -> Assessment:
    out = _Findings()
    if depth > _MAX_DEPTH:
        out.ask(R_TOO_DEEP)
        return _verdict(out)
    command = command.replace("\\\n", "")  # bash joins lines first: r\<newline>m is rm
    _text_checks(command, out)
    try:
        lexed = _lex(command)
        pipelines = _pipelines(lexed.tokens)
    except ValueError:
        out.ask(R_UNPARSEABLE)
        return _verdict(out)
    for reason, inner in lexed.substitutions:
        out.ask(reason)
        out.merge(_assess(inner, depth + 1))
    for pipe in pipelines:
        _check_pipeline(pipe, out, depth)
    return _verdict(out)


def _verdict(out: _Findings) -> Assessment:
    if out.blocks:
        return Assessment("block", out.blocks[0], tuple(out.blocks))
    if out.approvals:
        return Assessment("needs_approval", "; ".join(out.approvals), tuple(out.approvals))
    return Assessment("allow")


def assess_command(command: str) -> Assessment:
    """Judge one shell command line: ``allow``, ``needs_approval`` or ``block``.

    Never raises: text the guard cannot parse needs approval, because what it cannot read it
    cannot vouch for.
    """
    try:
        return _assess(command, 0)
    except Exception:  # a guard bug must fail closed, not crash the tool
        return Assessment("needs_approval", R_UNPARSEABLE, (R_UNPARSEABLE,))


_STDIN_CLIENTS = frozenset(
    {"psql", "mysql", "mariadb", "sqlite3", "mongo", "mongosh", "redis-cli", "sqlcmd", "duckdb"}
)


def reads_commands_from_stdin(command: str) -> bool:
    """Does some stage of ``command`` execute what it reads on stdin?

    True for a shell or interpreter without a script and for SQL/database clients: text
    written to such a process later is itself a command and goes through the guard too.
    Unparseable text counts as yes.
    """
    try:
        pipelines = _pipelines(_lex(command).tokens)
    except ValueError:
        return True
    for pipe in pipelines:
        for simple in pipe:
            words = _strip_wrappers(simple.words)[0]
            if words and (_reads_code_from_stdin(words) or _basename(words[0]) in _STDIN_CLIENTS):
                return True
    return False


class Approvals:
    """Approval state for one agent session: which dangerous findings the user has allowed.

    A "session" or "always" answer remembers the finding keys (``Assessment.reasons``) on
    this instance, so the user is not asked again for the same kind of command. "always"
    keys are also listed in :attr:`permanent` for a host that wants to persist them and
    hand them back through ``always=`` next time. Hard blocks ignore every approval.
    """

    def __init__(self, *, always: Iterable[str] = ()) -> None:
        self._permanent: set[str] = set(always)
        self._session: set[str] = set(self._permanent)

    @property
    def approved(self) -> frozenset[str]:
        """Finding keys approved for this session (including the permanent ones)."""
        return frozenset(self._session)

    @property
    def permanent(self) -> frozenset[str]:
        """Finding keys the user approved with "always"."""
        return frozenset(self._permanent)

    async def check(self, command: str, approver: Approver | None) -> str | None:
        """``None`` when ``command`` may run, else the ``BLOCKED: ...`` text for the model."""
        assessment = assess_command(command)
        if assessment.verdict == "allow":
            return None
        if assessment.verdict == "block":
            return _HARD_BLOCK.format(reason=assessment.reason)
        pending = [r for r in assessment.reasons if r not in self._session]
        if not pending:
            return None
        reason = "; ".join(pending)
        if approver is None:
            return _NO_APPROVER.format(reason=reason)
        decision = await approver(command, reason)
        if decision == "once":
            return None
        if decision in {"session", "always"}:
            self._session.update(pending)
            if decision == "always":
                self._permanent.update(pending)
            return None
        return DENIED_MESSAGE
