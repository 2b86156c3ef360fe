"""``python -m bench`` (``make bench``): run everything, print the table, write the JSON.

Order of work, and why:

1. start the mock server in its own process (its CPU must not count as the client's);
2. run one agent conversation in this process to *capture* its request body: the raw
   baseline copies the system prompt, tool schemas and key order from it, and then this
   process checks that raw and agent bodies are byte-identical at K=3, K=10 and streamed
   (differing bytes would make the comparison meaningless);
3. run the variants in separate worker processes, interleaved (run 1: A B C D, run 2:
   B C D A, ...), so a burst of load from elsewhere on the machine hits every variant
   rather than one; figures are medians over runs;
4. the store figures; then derive overheads, judge the targets, print, and write
   ``bench/results/latest.json`` plus a timestamped copy.

``--quick`` is a < 60 s smoke run with short phases and a small search corpus; ``--full``
adds the 1M-message search corpus (minutes to build the first time; cached after).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import RESULTS_SCHEMA
from bench.report import aggregate_runs, judge_targets, overheads, render
from bench.runners import INPROC_SERVER, Template, make_runner, parse_variant
from bench.stores import StoreConfig

__all__ = ["Options", "Plan", "main", "run"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MAIN_VARIANTS = (
    "agent-httpx",
    "raw-httpx",
    "agent-aiohttp",
    "raw-aiohttp",
    "agent-inproc",
    "raw-inproc",
)
EXTRA_VARIANTS = ("fresh-aiohttp", "anthropic-aiohttp")
WORKER_TIMEOUT = 180.0
Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Plan:
    """How long each phase runs; three presets below (full, quick, smoke)."""

    runs: int = 3
    seq_batches: int = 3
    seq_seconds: float = 0.3
    seq_min: int = 5
    levels: tuple[int, ...] = (1, 50, 500)
    conc_seconds: tuple[float, ...] = (1.0, 1.5, 2.0)
    conc_warmup: float = 0.5
    conc_budget: int = 1_000_000
    warmup: int = 10
    stream: bool = True
    extras: bool = True

    def phases(self, variant: str) -> list[dict[str, Any]]:
        """The phases of one worker; extras only get the phases they are there for."""
        runner, transport = parse_variant(variant)
        seq: dict[str, Any] = {
            "kind": "seq",
            "batches": self.seq_batches,
            "seconds": self.seq_seconds,
            "min_conversations": self.seq_min,
        }
        if transport == "inproc":
            # No network: only the harness's CPU is measured, so many short batches give a
            # steady median (and a minimum) for the same wall time.
            seq["batches"] = self.seq_batches * 3
            seq["seconds"] = self.seq_seconds / 3
        phases: list[dict[str, Any]] = [
            {**seq, "name": "seq_k3", "rounds": 3},
        ]
        if runner in ("agent", "raw"):
            phases.append({**seq, "name": "seq_k10", "rounds": 10})
        if self.stream and runner != "fresh":
            phases.append({**seq, "name": "seq_k3_stream", "rounds": 3, "stream": True})
        if runner in ("agent", "raw") and transport != "inproc":
            for level, seconds in zip(self.levels, self.conc_seconds, strict=True):
                phases.append(
                    {
                        "kind": "conc",
                        "name": f"c{level}",
                        "rounds": 3,
                        "concurrency": level,
                        "conversations": self.conc_budget,
                        "seconds": seconds,
                        "warmup_seconds": self.conc_warmup,
                    }
                )
        return phases


FULL = Plan()
QUICK = Plan(
    runs=1,
    seq_batches=2,
    seq_seconds=0.25,
    conc_seconds=(0.5, 0.75, 1.0),
    conc_warmup=0.3,
    warmup=5,
    extras=False,
)
SMOKE = Plan(
    runs=1,
    seq_batches=1,
    seq_seconds=0.0,
    seq_min=3,
    conc_seconds=(0.3, 0.3, 0.3),
    conc_warmup=0.05,
    conc_budget=10,
    warmup=1,
    extras=False,
)

FULL_STORES = StoreConfig()
QUICK_STORES = StoreConfig(
    single_appends=500,
    batched_appends=5_000,
    fts_sizes=(20_000,),
    queries=80,
    resume_repeats=1,
    append_seconds=0.75,
)


@dataclass(slots=True)
class Options:
    """Everything one benchmark run needs; built from the command line or by a test."""

    mode: str = "full"
    plan: Plan = FULL
    stores: StoreConfig = FULL_STORES
    only: str | None = None
    variants: tuple[str, ...] = MAIN_VARIANTS
    extras: tuple[str, ...] = EXTRA_VARIANTS
    pg_url: str | None = None
    latency_ms: float = 0.0
    profile: bool = False
    py_spy: bool = False
    in_process: bool = False
    """Run workers in this process (the smoke test: no process start-up; RSS meaningless)."""
    results_dir: Path | None = RESULTS
    notes: list[str] = field(default_factory=list)


# -- the mock server process ------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@contextlib.contextmanager
def mock_server(latency_ms: float = 0.0) -> Iterator[str]:
    """The mock server in a child process; yields its base URL, stops it on exit."""
    command = [sys.executable, "-m", "bench.mock_server", "--port", "0", "--watch-stdin"]
    if latency_ms:
        command += ["--latency-ms", str(latency_ms)]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("the mock server did not start (see its stderr above)")
        yield f"http://127.0.0.1:{json.loads(line)['port']}"
    finally:
        if process.stdin is not None:
            process.stdin.close()  # the server exits when its stdin closes
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.terminate()
            process.wait(timeout=5)
        if process.stdout is not None:
            process.stdout.close()


def _control(server: str, path: str, *, post: bool = False) -> Any:
    request = urllib.request.Request(f"{server}{path}", method="POST" if post else "GET")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


# -- capture and byte check ---------------------------------------------------------------


def _normalise(bodies: Sequence[str]) -> list[str]:
    """Bodies with the per-agent ``prompt_cache_key`` (a random uuid) blanked."""
    out = []
    for body in bodies:
        data = json.loads(body)
        key = data.get("prompt_cache_key")
        out.append(body.replace(key, "KEY") if isinstance(key, str) and key else body)
    return out


async def _one(
    server: str, variant: str, rounds: int, stream: bool, template: Template | None
) -> list[str]:
    _control(server, "/_bench/reset", post=True)
    runner = make_runner(variant, server, rounds, template=template, stream=stream)
    try:
        await runner.conversation()
    finally:
        await runner.aclose()
    bodies: list[str] = _control(server, "/_bench/bodies")
    return bodies


async def capture(server: str, variants: Sequence[str]) -> tuple[Template, dict[str, Any]]:
    """The agent's request template, and whether each raw variant sends the same bodies."""
    first = await _one(server, "agent-httpx", 3, False, None)
    template = Template.from_body(first[0])
    checks: dict[str, Any] = {}
    # inproc variants send through the same RawRunner code as raw-httpx, without a socket
    # the server could record: checking raw-httpx covers their bodies.
    raws = [v for v in variants if v.startswith("raw-") and not v.endswith("-inproc")]
    for rounds, stream in ((3, False), (10, False), (3, True)):
        agent = _normalise(await _one(server, "agent-httpx", rounds, stream, None))
        for variant in raws:
            raw = _normalise(await _one(server, variant, rounds, stream, template))
            checks[f"{variant} K={rounds}{' stream' if stream else ''}"] = raw == agent
    return template, checks


# -- workers ------------------------------------------------------------------------------


def _run_worker(config: Mapping[str, Any], options: Options, log: Log) -> dict[str, Any] | None:
    variant = str(config["variant"])
    if options.in_process:
        from bench.worker import run_worker

        return asyncio.run(run_worker(config))
    command = [sys.executable, "-m", "bench.worker", json.dumps(config)]
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if options.py_spy and variant.startswith("agent-") and Path(spy).exists():
        assert options.results_dir is not None
        out = options.results_dir / f"py-spy-{variant}.svg"
        command = [spy, "record", "--rate", "250", "-o", str(out), "--", *command]
    try:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        log(f"  {variant}: timed out after {WORKER_TIMEOUT:.0f} s")
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        log(f"  {variant}: failed (exit {done.returncode})\n{done.stderr[-2000:]}")
        return None
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _versions() -> dict[str, str]:
    out = {}
    for name in ("httpx", "httpcore", "anyio", "sniffio", "aiohttp", "uvloop", "pydantic"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def run_agent(options: Options, server: str, log: Log) -> dict[str, Any]:
    """Capture, check bytes, then every worker, interleaved; returns the agent section."""
    variants = list(options.variants)
    extras = list(options.extras) if options.plan.extras else []
    log("capturing the agent's request and checking the raw loop sends the same bytes")
    template, checks = asyncio.run(capture(server, [*variants, *extras]))
    identical = all(checks.values())
    if not identical:
        options.notes.append(f"raw bodies differ from the agent's: {checks}")
    results: list[dict[str, Any]] = []
    profiled: set[str] = set()
    for run in range(options.plan.runs):
        order = variants[run % len(variants) :] + variants[: run % len(variants)]
        for variant in order + (extras if run == 0 else []):
            profile = options.profile and variant not in profiled
            profiled.add(variant)
            config = {
                "variant": variant,
                "server": INPROC_SERVER if variant.endswith("-inproc") else server,
                "template": template.to_json(),
                "phases": options.plan.phases(variant),
                "warmup": options.plan.warmup,
                "latency_ms": options.latency_ms,
                "profile": profile,
            }
            started = time.perf_counter()
            result = _run_worker(config, options, log)
            if result is None:
                continue
            text = result.pop("profile", None)
            if text and options.results_dir is not None:
                (options.results_dir / f"profile-{variant}.txt").write_text(text)
            results.append(result)
            seq = result["phases"].get("seq_k3", {})
            log(
                f"  run {run + 1}/{options.plan.runs} {variant:<16} "
                f"K=3 {seq.get('ms_per_conv', float('nan')):6.2f} ms/conv  "
                f"({time.perf_counter() - started:4.1f} s)"
            )
    variants_out = aggregate_runs(results)
    return {
        "runs": options.plan.runs,
        "plan": dataclasses.asdict(options.plan),
        "bytes_identical": identical,
        "byte_checks": checks,
        "variants": variants_out,
        "overhead": overheads(variants_out),
    }


def run_stores(options: Options, log: Log) -> dict[str, Any]:
    """SQLite always; PostgreSQL when a URL was given (or ``auto`` starts one)."""
    from bench.stores import postgres_figures, sqlite_figures

    out: dict[str, Any] = {"config": dataclasses.asdict(options.stores)}
    log("session stores: SQLite")
    out["sqlite"] = asyncio.run(sqlite_figures(options.stores, log=log))
    if options.pg_url:
        log("session stores: PostgreSQL")
        with _postgres(options.pg_url) as url:
            out["postgres"] = asyncio.run(postgres_figures(url, options.stores, log=log))
    return out


@contextlib.contextmanager
def _postgres(url: str) -> Iterator[str]:
    """``auto``: a throwaway server from tests/pg_server.py; otherwise ``url`` as given."""
    if url != "auto":
        yield url
        return
    sys.path.insert(0, str(ROOT))
    from tests.pg_server import running_postgres

    with running_postgres() as started:
        yield started


def run(options: Options, log: Log = print) -> dict[str, Any]:
    """Run what ``options`` asks for and return the result (not yet written)."""
    started = time.perf_counter()
    result: dict[str, Any] = {
        "schema": RESULTS_SCHEMA,
        "mode": options.mode,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_start": _loadavg(),
        },
        "versions": _versions(),
    }
    if options.results_dir is not None:
        options.results_dir.mkdir(parents=True, exist_ok=True)
    if options.only in (None, "agent"):
        with mock_server(options.latency_ms) as server:
            result["agent"] = run_agent(options, server, log)
    stores = None
    if options.only in (None, "stores"):
        stores = run_stores(options, log)
        result["stores"] = stores
    if "agent" in result:
        result["targets"] = judge_targets(
            result["agent"]["variants"], result["agent"]["overhead"], stores
        )
    elif stores is not None:
        result["targets"] = judge_targets({}, {}, stores)
    result["machine"]["loadavg_end"] = _loadavg()
    result["duration_s"] = time.perf_counter() - started
    result["notes"] = list(options.notes)
    return result


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def write(result: Mapping[str, Any], text: str, directory: Path) -> Path:
    """``latest.json``/``latest.txt`` plus a timestamped JSON; returns the latest path."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    payload = json.dumps(result, indent=2, sort_keys=False)
    (directory / f"bench-{stamp}-{result.get('mode', 'run')}.json").write_text(payload)
    latest = directory / "latest.json"
    latest.write_text(payload)
    (directory / "latest.txt").write_text(text)
    return latest


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Hermes benchmarks: agent overhead vs a raw client, and the session stores.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a < 60 s smoke run")
    size.add_argument(
        "--full", action="store_true", help="also the 1M-message search corpus (slow to build)"
    )
    parser.add_argument("--only", choices=("agent", "stores"), help="run one half only")
    parser.add_argument(
        "--pg",
        metavar="URL",
        default=os.environ.get("HERMES_BENCH_PG"),
        help="PostgreSQL server for the store figures (env HERMES_BENCH_PG); 'auto' starts "
        "a throwaway one with tests/pg_server.py",
    )
    parser.add_argument("--runs", type=int, help="interleaved runs per variant")
    parser.add_argument(
        "--variants",
        help=f"comma-separated main variants (default {','.join(MAIN_VARIANTS)})",
    )
    parser.add_argument(
        "--no-extras", action="store_true", help=f"skip {', '.join(EXTRA_VARIANTS)}"
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="mock inference delay")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile each variant once (bench/results/)"
    )
    parser.add_argument(
        "--py-spy", action="store_true", help="py-spy flame graphs of the agent workers"
    )
    parser.add_argument("--no-cache", action="store_true", help="rebuild the search corpora")
    args = parser.parse_args(argv)
    options = Options()
    if args.quick:
        options.mode, options.plan, options.stores = "quick", QUICK, QUICK_STORES
    elif args.full:
        options.mode = "full+1M"
        options.stores = dataclasses.replace(FULL_STORES, fts_sizes=(100_000, 1_000_000))
    if args.runs:
        options.plan = dataclasses.replace(options.plan, runs=args.runs)
    if args.no_extras:
        options.plan = dataclasses.replace(options.plan, extras=False)
    if args.no_cache:
        options.stores = dataclasses.replace(options.stores, cache=False)
    if args.variants:
        chosen = tuple(v.strip() for v in args.variants.split(",") if v.strip())
        for variant in chosen:
            parse_variant(variant)
        options.variants = chosen
    options.only = args.only
    options.pg_url = args.pg
    options.latency_ms = args.latency_ms
    options.profile = args.profile
    options.py_spy = args.py_spy
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench``; the exit status is 0 unless nothing ran."""
    options = parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = run(options, log)
    text = render(result)
    print(text)
    assert options.results_dir is not None
    latest = write(result, text, options.results_dir)
    print(f"results: {latest.relative_to(ROOT)} (and latest.txt)")
    return 0
