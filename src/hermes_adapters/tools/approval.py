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

Steps 2 and 3 live in :mod:`~hermes_adapters.tools._shell_scan`, steps 1 and 4 in
:mod:`~hermes_adapters.tools._command_rules`; this module is the guard's public face: the
verdict, the finding keys (``R_*``) and the approval decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from hermes_adapters.tools import _command_rules
from hermes_adapters.tools._command_rules import (
    Findings,
    inspect_command,
    reads_commands_from_stdin,
)
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

# The finding keys (``Assessment.reasons``) are part of this module's interface: a host
# persists the ones the user approved "always" and hands them back to :class:`Approvals`.
R_CHMOD = _command_rules.R_CHMOD
R_CHOWN = _command_rules.R_CHOWN
R_CMD_SUBST = _command_rules.R_CMD_SUBST
R_DECODED_TO_SHELL = _command_rules.R_DECODED_TO_SHELL
R_DISK_WRITE = _command_rules.R_DISK_WRITE
R_DYNAMIC_NAME = _command_rules.R_DYNAMIC_NAME
R_ETC_WRITE = _command_rules.R_ETC_WRITE
R_EVAL = _command_rules.R_EVAL
R_FIND_DELETE = _command_rules.R_FIND_DELETE
R_FORCE_KILL = _command_rules.R_FORCE_KILL
R_FORK_BOMB = _command_rules.R_FORK_BOMB
R_GIT_CLEAN = _command_rules.R_GIT_CLEAN
R_GIT_PUSH = _command_rules.R_GIT_PUSH
R_GIT_RESET = _command_rules.R_GIT_RESET
R_HEREDOC_TO_SHELL = _command_rules.R_HEREDOC_TO_SHELL
R_KILL_ALL = _command_rules.R_KILL_ALL
R_MKFS = _command_rules.R_MKFS
R_MOVE_SYSTEM = _command_rules.R_MOVE_SYSTEM
R_PIPE_TO_SHELL = _command_rules.R_PIPE_TO_SHELL
R_POWER = _command_rules.R_POWER
R_PROC_SUBST = _command_rules.R_PROC_SUBST
R_RC_WRITE = _command_rules.R_RC_WRITE
R_REMOTE_TO_SHELL = _command_rules.R_REMOTE_TO_SHELL
R_RM_RECURSIVE = _command_rules.R_RM_RECURSIVE
R_ROOT_DELETE = _command_rules.R_ROOT_DELETE
R_SHELL_CODE = _command_rules.R_SHELL_CODE
R_SQL_DELETE = _command_rules.R_SQL_DELETE
R_SQL_DROP = _command_rules.R_SQL_DROP
R_SQL_TRUNCATE = _command_rules.R_SQL_TRUNCATE
R_TOO_DEEP = _command_rules.R_TOO_DEEP
R_UNPARSEABLE = _command_rules.R_UNPARSEABLE


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


def _verdict(out: Findings) -> Assessment:
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
        return _verdict(inspect_command(command))
    except Exception:  # a guard bug must fail closed, not crash the tool
        return Assessment("needs_approval", R_UNPARSEABLE, (R_UNPARSEABLE,))


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
