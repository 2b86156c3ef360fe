"""The ``hermes`` command.

Subcommands: ``chat`` (one shot or interactive), ``demo`` (the offline run behind
``make demo``), ``batch`` (dataset runs), ``sessions`` (the store), ``config check`` and
``mcp list``. Each lives in a package-private ``_cli_*`` module; this one assembles the
parser and owns the rules every command keeps, so a script can rely on them: results on
stdout, diagnostics on stderr as ``hermes: <message>``, and the exit code says what
happened (0 ok, 1 the operation failed, 2 usage or configuration error, 130 interrupted).
See ``docs/cli.md``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from hermes_bootstrap import _cli_batch, _cli_chat, _cli_config, _cli_demo, _cli_mcp, _cli_sessions
from hermes_bootstrap._cli_common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    HermesArgumentParser,
    warn,
)
from hermes_core.errors import ConfigError, HermesError, ModelAuthError

__all__ = ["build_parser", "main"]


def build_parser() -> HermesArgumentParser:
    parser = HermesArgumentParser(
        prog="hermes",
        description="Hermes agent harness. Run 'hermes COMMAND --help' for a command's options.",
        epilog="Exit codes: 0 ok, 1 operation failed, 2 usage or configuration error, "
        "130 interrupted.",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log progress to stderr (-vv for debug detail)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (_cli_chat, _cli_demo, _cli_batch, _cli_sessions, _cli_config, _cli_mcp):
        module.register(commands)
    return parser


def _exit_code(exc: BaseException) -> int | None:
    """The exit code for an escaped exception, after printing its message; None: unknown.

    Task groups wrap failures in exception groups; the first leaf decides, so a batch run
    that failed on a bad dataset still reports the dataset, not "unhandled errors".
    """
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _exit_code(exc.exceptions[0])
    if isinstance(exc, CliError):
        warn(exc.message)
        return exc.code
    if isinstance(exc, KeyboardInterrupt):
        print(file=sys.stderr)
        warn("interrupted")
        return EXIT_INTERRUPTED
    if isinstance(exc, ConfigError | ModelAuthError):
        warn(str(exc))
        return EXIT_USAGE
    if isinstance(exc, HermesError | OSError):
        warn(str(exc) or type(exc).__name__)
        return EXIT_FAILED
    return None


class _StderrWarnings(logging.Handler):
    """Hermes' own warnings as ``hermes: warning: ...`` lines on the current stderr.

    The stream is looked up per record (not bound once) so a replaced ``sys.stderr``, as
    in tests, is honoured.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"hermes: {record.levelname.lower()}: {record.getMessage()}\n")
        except Exception:
            self.handleError(record)


_WARNINGS = _StderrWarnings(logging.WARNING)


def _configure_logging(verbosity: int) -> None:
    """Warnings of the ``hermes`` loggers always reach stderr; ``-v`` adds progress logs."""
    logger = logging.getLogger("hermes")
    if _WARNINGS not in logger.handlers:
        logger.addHandler(_WARNINGS)
    _WARNINGS.setLevel(logging.CRITICAL + 1 if verbosity else logging.WARNING)
    if verbosity:
        logging.basicConfig(
            level=logging.DEBUG if verbosity > 1 else logging.INFO,
            format="%(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hermes`` with ``argv`` (default: the process arguments); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    _configure_logging(args.verbose)
    try:
        return int(args.handler(args))
    except BrokenPipeError:  # `hermes sessions list | head`: the reader left, not an error
        _silence_stdout()
        return 0
    except BaseException as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    raise SystemExit(main())
