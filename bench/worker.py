"""One measured client process: one variant, every phase, one JSON line on stdout.

Each variant runs in a process of its own because the two figures that matter most for
thousands of concurrent conversations are per process: CPU time (``time.process_time``
counts every thread of this process and nothing of the server's) and peak RSS
(``ru_maxrss`` only ever grows, so two variants in one process would share a peak).

Phases are time-boxed rather than count-boxed, so a slow variant costs the same wall time
as a fast one and ``make bench`` stays within its budget on any machine:

* ``seq``: conversations one after another, in ``batches`` batches of ``seconds`` each;
  reports the median batch's wall and CPU milliseconds per conversation;
* ``conc``: ``concurrency`` tasks share up to ``conversations`` conversations until
  ``seconds`` have passed; reports conversations per second and CPU per conversation.

Every phase also reads the mock server's counters before and after, for the request bytes
per conversation and the server's own CPU (to show it was not the bottleneck).

Run by ``bench.cli``; by hand: ``python -m bench.worker '<json config>'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import io
import json
import pstats
import resource
import statistics
import sys
import time
import urllib.request
from collections.abc import Mapping
from typing import Any

from bench.runners import INPROC_SERVER, Runner, Template, make_runner

__all__ = ["main", "run_worker"]


def _rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB.

    The peak is ``VmHWM`` from /proc: on Linux ``ru_maxrss`` survives ``exec``, so a
    worker forked from the orchestrator would report the orchestrator's size as its
    floor. ``ru_maxrss`` is the fallback where there is no /proc.
    """
    peak = current = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    current = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return current, peak


def server_stats(server: str) -> dict[str, Any] | None:
    """The mock server's counters (a blocking call: only ever between timed regions)."""
    if server == INPROC_SERVER:
        return None
    with urllib.request.urlopen(f"{server}/_bench/stats", timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


def _delta(
    before: Mapping[str, Any], after: Mapping[str, Any], count: int, wall_s: float
) -> dict[str, float]:
    """Server-side figures of a phase. Per conversation only means something for ``seq``
    phases (a ``conc`` phase also serves warm-up and cancelled conversations), so the
    concurrency figures are rates: the server's CPU share and new connections per request.
    ``-1``: the ``after`` stats call itself came on a new connection."""
    n = max(count, 1)
    requests = max(after["requests"] - before["requests"], 1)
    return {
        "requests_per_conv": (after["requests"] - before["requests"]) / n,
        "body_bytes_per_conv": (after["body_bytes"] - before["body_bytes"]) / n,
        "header_bytes_per_conv": (after["header_bytes"] - before["header_bytes"]) / n,
        "server_cpu_ms_per_conv": (after["cpu_s"] - before["cpu_s"]) * 1000 / n,
        "server_cpu_share": (after["cpu_s"] - before["cpu_s"]) / wall_s if wall_s > 0 else 0.0,
        "new_connections_per_100_requests": 100
        * max(after["connections"] - before["connections"] - 1, 0)
        / requests,
        "server_errors": after["errors"] - before["errors"],
    }


async def _sequential(runner: Runner, phase: Mapping[str, Any]) -> dict[str, Any]:
    seconds = float(phase["seconds"])
    minimum = int(phase.get("min_conversations", 5))
    walls: list[float] = []
    cpus: list[float] = []
    total = 0
    for _ in range(int(phase["batches"])):
        count = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        stop = wall0 + seconds
        while count < minimum or time.perf_counter() < stop:
            await runner.conversation()
            count += 1
        walls.append((time.perf_counter() - wall0) * 1000 / count)
        cpus.append((time.process_time() - cpu0) * 1000 / count)
        total += count
    return {
        "conversations": total,
        "ms_per_conv": statistics.median(walls),
        "ms_per_conv_min": min(walls),
        "ms_per_conv_batches": walls,
        "cpu_ms_per_conv": statistics.median(cpus),
        "cpu_ms_per_conv_min": min(cpus),
        "cpu_ms_per_conv_batches": cpus,
    }


async def _concurrent(runner: Runner, phase: Mapping[str, Any]) -> dict[str, Any]:
    """Steady-state throughput at a fixed concurrency, measured in a time window.

    ``concurrency`` lanes run conversations back to back; after ``warmup_seconds`` (pool
    connections opened, caches warm) completions and CPU are counted for ``seconds``, then
    every lane is cancelled. Cancelling instead of draining keeps the phase's wall time
    bounded even when a variant is slow enough that 500 in-flight conversations would take
    minutes to finish; the figure is completions in the window over the window's length.
    ``conversations`` caps the total (the smoke test), ending the window early.
    """
    concurrency = int(phase["concurrency"])
    remaining = int(phase["conversations"])
    done = 0
    failures: list[str] = []
    finished = asyncio.Event()
    lanes_left = concurrency

    async def lane() -> None:
        nonlocal remaining, done, lanes_left
        try:
            while remaining > 0:
                remaining -= 1
                try:
                    await runner.conversation()
                except Exception as exc:  # counted and reported: a failure is not speed
                    failures.append(f"{type(exc).__name__}: {exc}")
                    return
                done += 1
        finally:
            lanes_left -= 1
            if not lanes_left:
                finished.set()

    async def wait(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(finished.wait(), seconds)

    tasks = [asyncio.create_task(lane()) for _ in range(concurrency)]
    try:
        await wait(float(phase.get("warmup_seconds", 0.5)))
        done0, cpu0, wall0 = done, time.process_time(), time.perf_counter()
        await wait(float(phase["seconds"]))
        counted, cpu, wall = done - done0, time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "conversations": counted,
        "wall_s": wall,
        "conv_per_s": counted / wall if wall > 0 else 0.0,
        "cpu_ms_per_conv": cpu * 1000 / max(counted, 1),
        "cpu_share": cpu / wall if wall > 0 else 0.0,
        "failures": len(failures),
        "first_failure": failures[0] if failures else None,
    }


async def run_worker(config: Mapping[str, Any]) -> dict[str, Any]:
    """Run every phase of ``config`` for one variant and return the measurements."""
    variant = str(config["variant"])
    server = str(config["server"])
    template = Template.from_json(config["template"]) if config.get("template") else None
    runners: dict[tuple[int, bool], Runner] = {}
    results: dict[str, Any] = {}
    profile = cProfile.Profile() if config.get("profile") else None
    rss_start = _rss_mb()[0]
    try:
        for phase in config["phases"]:
            key = (int(phase["rounds"]), bool(phase.get("stream", False)))
            runner = runners.get(key)
            if runner is None:
                runner = runners[key] = make_runner(
                    variant,
                    server,
                    key[0],
                    template=template,
                    stream=key[1],
                    latency_ms=float(config.get("latency_ms", 0.0)),
                )
                for _ in range(int(config.get("warmup", 10))):
                    await runner.conversation()
            gc.collect()
            before = server_stats(server)
            phase_started = time.perf_counter()
            if profile is not None:
                profile.enable()
            if phase["kind"] == "seq":
                result = await _sequential(runner, phase)
            else:
                result = await _concurrent(runner, phase)
            if profile is not None:
                profile.disable()
            phase_wall = time.perf_counter() - phase_started
            after = server_stats(server)
            if before is not None and after is not None:
                result.update(_delta(before, after, result["conversations"], phase_wall))
            result["rss_mb"], result["peak_rss_mb"] = _rss_mb()
            results[str(phase["name"])] = result
    finally:
        for runner in runners.values():
            await runner.aclose()
    out: dict[str, Any] = {
        "variant": variant,
        "phases": results,
        "rss_start_mb": rss_start,
        "peak_rss_mb": _rss_mb()[1],
    }
    if profile is not None:
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)
        out["profile"] = text.getvalue()
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.worker CONFIG_JSON``: print the result as one JSON line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m bench.worker '<json config>'")
    config = json.loads(args[0])
    result = asyncio.run(run_worker(config))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
