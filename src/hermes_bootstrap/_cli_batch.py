"""``hermes batch``: run ``BatchRunner`` over a JSONL dataset from the shell.

Runs take hours, so the command shows progress on stderr as it goes and ends with the
counts a user needs to decide what to do next (resume, inspect failures, train). Real
providers are wired here, in the composition root: the runner gets a factory that builds
one fresh adapter per prompt, and the credential is checked before the first prompt so a
missing key fails in a second, not after a dataset's worth of failed samples.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio

from hermes_adapters.llm.profiles import PROFILES, build_chat_model, resolve_api_key
from hermes_bootstrap._cli_chat import add_model_options
from hermes_bootstrap._cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    Subcommands,
    home_option,
    plain,
    positive_int,
    print_json,
)
from hermes_bootstrap.batch import DISTRIBUTIONS, STATISTICS_FILE, BatchProgress, BatchRunner
from hermes_bootstrap.config import hermes_home, load_config, read_dotenv
from hermes_core.errors import ConfigError
from hermes_core.ports.llm import ChatModel

__all__ = ["register"]


class _Progress:
    """Progress on stderr: one redrawn line on a terminal, a line per prompt otherwise.

    A log file or CI console shows every update instead of a garbled carriage-return line.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._drawn = False

    def __call__(self, p: BatchProgress) -> None:
        eta = f"{p.eta:.0f}s" if p.eta is not None else "?"
        text = (
            f"[{p.done}/{p.total}] {p.rate:.2f} prompts/s  eta {eta}  "
            f"failed {p.failed}  discarded {p.discarded}"
        )
        if self._tty:
            self._stream.write(f"\r{text}\x1b[K")
            self._drawn = True
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()


def _silent(progress: BatchProgress) -> None:
    """Stands in for the runner's own terminal bar when ``--quiet`` asks for silence."""


def _shared_model(args: argparse.Namespace, provider: str) -> ChatModel | None:
    """One model for a real provider, shared by every prompt (one HTTP session, warm
    connections); ``None`` keeps the offline planner, which is built per prompt.

    Raises:
        ConfigError: unknown provider, no model name, or no base URL for ``custom``.
        ModelAuthError: no key applies; the message names the variables to set.
    """
    if provider == "scripted":
        return None
    profile = PROFILES.get(provider)
    if profile is None:
        known = ", ".join(["scripted", *sorted(PROFILES)])
        raise ConfigError(f"unknown provider {provider!r}; known: {known}")
    home = hermes_home(args.home)
    config = load_config(home)
    model = args.model or (config.model.default if config.model.provider == provider else None)
    if not model:
        raise ConfigError(f"--model is required for provider {provider!r}")
    url = (args.base_url or profile.base_url).rstrip("/")
    if not url:
        raise ConfigError(f"provider {provider!r} needs --base-url")
    environ = dict(os.environ)
    dotenv = read_dotenv(home / ".env")
    resolve_api_key(profile, api_key=args.api_key, base_url=url, environ=environ, dotenv=dotenv)
    return build_chat_model(
        provider,
        model,
        api_key=args.api_key,
        base_url=args.base_url,
        api_mode=config.model.api_mode if config.model.provider == provider else None,
        environ=environ,
        dotenv=dotenv,
    )


def _summary(runner: BatchRunner, statistics: dict[str, object]) -> list[str]:
    report = runner.report
    lines = [
        f"run {runner.run_name}: {report.dataset_rows} prompts in the dataset, "
        f"{report.processed} run now",
        f"  written    {report.written}",
        f"  failed     {report.failed}" + ("  (retried by --resume)" if report.failed else ""),
        f"  discarded  {report.discarded_no_reasoning}  (no reasoning in any turn)",
    ]
    skipped = report.skipped_by_checkpoint + report.resumed_by_content
    if skipped:
        lines.append(f"  skipped    {skipped}  (already done)")
    bad = report.invalid_json_rows + report.missing_prompt_rows
    if bad:
        lines.append(f"  bad rows   {bad}  (invalid JSON or no 'prompt')")
    if report.merge is not None:
        merge = report.merge
        lines.append(
            f"  merged     {merge.kept} of {merge.total_rows} rows from {merge.shard_files} "
            f"shard(s) into {runner.output_dir / 'trajectories.jsonl'}"
        )
    lines.append(
        f"  statistics {runner.output_dir / STATISTICS_FILE} "
        f"({statistics.get('duration_seconds')} s)"
    )
    return lines


async def _run_then_close(
    runner: BatchRunner, model: ChatModel | None, resume: bool
) -> dict[str, Any]:
    try:
        return await runner.run(resume=resume)
    finally:
        if model is not None:
            with anyio.CancelScope(shield=True):
                await model.aclose()


def _run(args: argparse.Namespace) -> int:
    provider = args.provider or "scripted"
    shared = _shared_model(args, provider)
    progress = _Progress(sys.stderr)
    runner = BatchRunner(
        Path(args.dataset),
        args.batch_size,
        args.run_name,
        distribution=args.distribution,
        model=args.model,
        provider=provider,
        base_url=args.base_url,
        api_key=args.api_key,
        num_workers=args.workers,
        max_iterations=args.max_turns,
        reasoning_config={"enabled": False} if args.reasoning_disabled else None,
        output_root=args.output_root,
        chat_model=shared,
        progress=_silent if args.quiet else progress,
        workspace=args.workspace,
    )
    try:
        statistics = anyio.run(_run_then_close, runner, shared, args.resume)
    finally:
        progress.close()
    if args.json:
        print_json(
            {
                "output_dir": str(runner.output_dir),
                "report": plain(runner.report),
                "statistics": statistics,
            }
        )
    else:
        print("\n".join(_summary(runner, statistics)))
    return EXIT_FAILED if runner.report.failed else EXIT_OK


def register(commands: Subcommands) -> None:
    batch = commands.add_parser(
        "batch",
        help="run the agent over a JSONL dataset and write training trajectories",
        description='Run one isolated agent per dataset row ({"prompt": ...}) and write '
        "shards, a checkpoint, the merged trajectories.jsonl and statistics.json under "
        "OUTPUT_ROOT/RUN_NAME. Exits 1 when prompts failed (rerun with --resume).",
    )
    batch.add_argument("dataset", metavar="DATASET.jsonl", help="one JSON object per line")
    batch.add_argument("--run-name", required=True, help="output folder name; keys the resume")
    batch.add_argument("--batch-size", type=positive_int, default=10, help="prompts per batch")
    batch.add_argument("--workers", type=positive_int, default=4, help="batches run at once")
    batch.add_argument(
        "--max-turns", type=positive_int, default=10, help="model calls per prompt (10)"
    )
    batch.add_argument(
        "--distribution",
        choices=sorted(DISTRIBUTIONS),
        default="default",
        help="toolset distribution sampled per prompt",
    )
    batch.add_argument("--resume", action="store_true", help="skip prompts already written")
    add_model_options(batch, host_variables=False)
    batch.add_argument(
        "--reasoning-disabled", action="store_true", help="ask the model not to reason"
    )
    batch.add_argument("--output-root", default="data", metavar="DIR", help="(default: data)")
    batch.add_argument(
        "--workspace", metavar="DIR", help="directory the file and terminal tools work in"
    )
    home_option(batch)
    batch.add_argument("--json", action="store_true", help="print the report as JSON")
    batch.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    batch.set_defaults(handler=_run)
