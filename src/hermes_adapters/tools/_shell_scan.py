"""Reading shell text the way the shell does before expansion, for the command guard.

The guard (:mod:`hermes_adapters.tools.approval`) judges commands word by word, so it first
needs the words: this module is that reader, kept apart from the rules so that "what does
this text say" and "is what it says dangerous" can each be read and tested on their own.

A small quote-aware scanner splits the text into simple commands at the shell's control
operators (``;``, ``&&``, ``||``, ``|``, ``&``, newlines, parentheses) and pulls out
redirections, heredoc bodies and command/process substitutions. Operators are only
recognised outside quotes, so ``rm -rf ';' /`` stays one command. Each word is then
unquoted with :mod:`shlex`, so ``r''m``, ``\\rm`` and ``"rm"`` all read as ``rm``.
:func:`strip_wrappers` then peels ``sudo``, ``env``, ``VAR=val``, ``timeout N`` and the
like off a simple command to find the command that actually runs.

Nothing here judges anything; text that cannot be read raises :class:`ValueError`.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Lexed",
    "Pipeline",
    "SimpleCommand",
    "SubstitutionKind",
    "Token",
    "basename",
    "lex",
    "operands",
    "pipelines",
    "short_flags",
    "strip_wrappers",
]

SubstitutionKind = Literal["command", "process"]
"""``$(...)``/backticks (``command``) or ``<(...)``/``>(...)`` (``process``)."""

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

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "do", "while", "until"})

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


@dataclass(slots=True)
class Token:
    """A word or a control/redirection operator, as the shell splits them."""

    kind: Literal["word", "op"]
    raw: str
    value: str = ""
    quoted: bool = False
    fd: bool = False  # a file-descriptor number glued to a redirection ("2>")
    body: str = ""  # for a heredoc delimiter: the heredoc's text


@dataclass(slots=True)
class Lexed:
    """The tokens of a text and the code of every substitution found in it, in order."""

    tokens: list[Token]
    substitutions: list[tuple[SubstitutionKind, str]]  # (kind, inner code)


@dataclass(slots=True)
class SimpleCommand:
    """One simple command: its words (unquoted) and where its streams go."""

    words: list[str] = field(default_factory=list)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    stdin_text: list[str] = field(default_factory=list)  # heredoc bodies, here-strings


Pipeline = list[SimpleCommand]

_Subs = list[tuple[SubstitutionKind, str]]


# --- lexing ---------------------------------------------------------------------------------


def _skip_squote(text: str, i: int) -> int:
    """Index just past the ``'`` closing the one at ``i``."""
    j = text.find("'", i + 1)
    if j < 0:
        raise ValueError("unclosed single quote")
    return j + 1


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
            i = _skip_squote(text, i)
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


def _scan_substitution(text: str, i: int, subs: _Subs) -> int | None:
    """If ``$(``, ``$((`` or a backtick starts at ``i``, record it and return its end."""
    if text.startswith("$((", i):
        return _match_paren(text, i + 1) + 1  # arithmetic: no command runs
    if text.startswith("$(", i):
        end = _match_paren(text, i + 1)
        subs.append(("command", text[i + 2 : end]))
        return end + 1
    if text[i] == "`":
        end = _backtick_end(text, i)
        subs.append(("command", text[i + 1 : end]))
        return end + 1
    if text.startswith("${", i):
        end = text.find("}", i)
        if end < 0:
            raise ValueError("unclosed ${")
        inner = text[i + 2 : end]
        if "$(" in inner or "`" in inner:
            subs.append(("command", inner))
        return end + 1
    return None


def _skip_dquote(text: str, i: int, subs: _Subs) -> int:
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


def _body_substitutions(body: str, subs: _Subs) -> None:
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


def lex(text: str) -> Lexed:
    """Split ``text`` into words and operators, the way the shell does before expansion.

    Raises:
        ValueError: unbalanced quotes, parentheses or backticks.
    """
    tokens: list[Token] = []
    subs: _Subs = []
    pending_heredocs: list[tuple[Token, bool]] = []  # (delimiter word, strip tabs)
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
            subs.append(("process", text[i + 2 : end]))
            raw = text[i : end + 1]
            tokens.append(Token("word", raw, raw))
            i = end + 1
            continue
        if c in _OP_CHARS:
            op = next(o for o in _OPERATORS if text.startswith(o, i))
            tokens.append(Token("op", op))
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
                i = _skip_squote(text, i)
                continue
            if c == '"':
                i = _skip_dquote(text, i + 1, subs)
                continue
            stop = _scan_substitution(text, i, subs) if c in "$`" else None
            i = stop if stop is not None else i + 1
        raw = text[start:i]
        quoted = any(q in raw for q in "'\"\\")
        token = Token("word", raw, _unquote(raw), quoted)
        token.fd = raw.isdigit() and i < n and text[i] in "<>"
        tokens.append(token)
        if expect_delimiter is not None:
            pending_heredocs.append((token, expect_delimiter))
            expect_delimiter = None
    if pending_heredocs:
        _consume_heredocs(text, n, pending_heredocs, subs)
    return Lexed(tokens, subs)


def _consume_heredocs(text: str, i: int, pending: list[tuple[Token, bool]], subs: _Subs) -> int:
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


def pipelines(tokens: Sequence[Token]) -> list[Pipeline]:
    """Group tokens into pipelines of simple commands.

    Raises:
        ValueError: a redirection without a target.
    """
    found: list[Pipeline] = []
    pipe: Pipeline = []
    simple = SimpleCommand()

    def end_simple() -> None:
        nonlocal simple
        if simple.words or simple.redirects:
            pipe.append(simple)
        simple = SimpleCommand()

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
            found.append(pipe)
            pipe = []
    end_simple()
    if pipe:
        found.append(pipe)
    return found


# --- reading a simple command's words -----------------------------------------------------


def basename(word: str) -> str:
    """A command word without its directory: ``/usr/bin/rm`` is ``rm``."""
    return posixpath.basename(word) or word


def short_flags(args: Sequence[str]) -> str:
    """All single-letter flags before ``--`` run together: ``-r -f`` and ``-rf`` both give rf."""
    letters = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--"):
            letters.append(arg[1:])
    return "".join(letters)


def operands(args: Sequence[str]) -> list[str]:
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


def strip_wrappers(words: list[str]) -> tuple[list[str], list[str]]:
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
        name = basename(words[0])
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
