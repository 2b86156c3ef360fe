"""Aggregate worker results, derive the overheads, judge the targets, render the tables.

Kept apart from the orchestration so the smoke test (and anyone reading an old
``bench/results/*.json``) can render a table without running anything.

The headline number is the *overhead per model round*: ``(agent ms/conv - raw ms/conv) /
(K + 1)`` with the same transport, where ``K + 1`` is the number of model calls in a
conversation of ``K`` tool rounds. It is computed from wall time (what the issue's targets
are stated in) and from client CPU time (steadier on a shared machine: the server's time
and the scheduler's noise are not in it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TARGETS",
    "Target",
    "aggregate_runs",
    "judge_targets",
    "overheads",
    "render",
]

MAIN_RUNNERS = ("agent", "raw")
TRANSPORT_ORDER = ("httpx", "aiohttp", "inproc")
VARIANT_ORDER = (
    "agent-httpx",
    "raw-httpx",
    "agent-aiohttp",
    "raw-aiohttp",
    "agent-inproc",
    "raw-inproc",
    "fresh-httpx",
    "fresh-aiohttp",
    "anthropic-httpx",
    "anthropic-aiohttp",
)


@dataclass(frozen=True, slots=True)
class Target:
    """One target of the performance issue; ``at_most`` says which side is good."""

    key: str
    label: str
    limit: float
    at_most: bool
    unit: str

    def met(self, value: float | None) -> bool | None:
        if value is None or math.isnan(value):
            return None
        return value <= self.limit if self.at_most else value >= self.limit


TARGETS = (
    Target("overhead_k3", "overhead per model round, K=3 (wall)", 0.3, True, "ms"),
    Target("flatness", "overhead growth K=10 vs K=3", 0.05, True, "ms/round"),
    Target("c50", "agent conversations/s at C=50", 1500, False, "conv/s"),
    Target("c500", "agent conversations/s at C=500", 800, False, "conv/s"),
    Target("rss_c500", "agent peak RSS at C=500", 80, True, "MB"),
    Target("sqlite_batched", "SQLite batched append", 20_000, False, "msg/s"),
    Target("fts_p50_1m", "SQLite FTS p50 at 1M messages", 5, True, "ms"),
)


# -- aggregation ----------------------------------------------------------------------------


def _median_tree(values: Sequence[Any]) -> Any:
    """Median of numbers; recurse into dicts; keep the first of anything else."""
    first = values[0]
    if isinstance(first, bool) or first is None or isinstance(first, str):
        return first
    if isinstance(first, int | float):
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        return statistics.median(numbers) if numbers else None
    if isinstance(first, dict):
        keys = [k for k in first if all(isinstance(v, dict) and k in v for v in values)]
        return {k: _median_tree([v[k] for v in values]) for k in keys}
    return first


def aggregate_runs(runs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per variant: the median over runs of every phase figure (and of the peak RSS)."""
    by_variant: dict[str, list[Mapping[str, Any]]] = {}
    for result in runs:
        by_variant.setdefault(str(result["variant"]), []).append(result)
    out: dict[str, Any] = {}
    for variant, results in by_variant.items():
        merged = _median_tree(
            [{"phases": r["phases"], "peak_rss_mb": r["peak_rss_mb"]} for r in results]
        )
        merged["runs"] = len(results)
        merged["per_run"] = [
            {
                name: {
                    key: phase.get(key)
                    for key in ("ms_per_conv", "cpu_ms_per_conv", "conv_per_s")
                    if key in phase
                }
                for name, phase in r["phases"].items()
            }
            for r in results
        ]
        out[variant] = merged
    return out


def _get(variants: Mapping[str, Any], variant: str, phase: str, key: str) -> float | None:
    try:
        value = variants[variant]["phases"][phase][key]
    except (KeyError, TypeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def _per_round(agent: float | None, raw: float | None, rounds: int) -> float | None:
    if agent is None or raw is None:
        return None
    return (agent - raw) / (rounds + 1)


def overheads(variants: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per transport: the agent's cost per model round over the raw loop, and ratios."""
    out: dict[str, dict[str, float | None]] = {}
    for transport in TRANSPORT_ORDER:
        agent, raw = f"agent-{transport}", f"raw-{transport}"
        if agent not in variants or raw not in variants:
            continue
        row: dict[str, float | None] = {}
        for rounds in (3, 10):
            phase = f"seq_k{rounds}"
            row[f"k{rounds}_ms"] = _per_round(
                _get(variants, agent, phase, "ms_per_conv"),
                _get(variants, raw, phase, "ms_per_conv"),
                rounds,
            )
            row[f"k{rounds}_cpu_ms"] = _per_round(
                _get(variants, agent, phase, "cpu_ms_per_conv"),
                _get(variants, raw, phase, "cpu_ms_per_conv"),
                rounds,
            )
        k3, k10 = row.get("k3_ms"), row.get("k10_ms")
        row["flatness_ms"] = None if k3 is None or k10 is None else k10 - k3
        k3c, k10c = row.get("k3_cpu_ms"), row.get("k10_cpu_ms")
        row["flatness_cpu_ms"] = None if k3c is None or k10c is None else k10c - k3c
        for rounds in (3, 10):
            phase = f"seq_k{rounds}"
            row[f"k{rounds}_cpu_min_ms"] = _per_round(
                _get(variants, agent, phase, "cpu_ms_per_conv_min"),
                _get(variants, raw, phase, "cpu_ms_per_conv_min"),
                rounds,
            )
        row["stream_k3_ms"] = _per_round(
            _get(variants, agent, "seq_k3_stream", "ms_per_conv"),
            _get(variants, raw, "seq_k3_stream", "ms_per_conv"),
            3,
        )
        for level in ("c50", "c500"):
            a = _get(variants, agent, level, "conv_per_s")
            r = _get(variants, raw, level, "conv_per_s")
            row[f"{level}_ratio"] = a / r if a and r else None
        out[transport] = row
    return out


def judge_targets(
    variants: Mapping[str, Any],
    over: Mapping[str, Mapping[str, float | None]],
    stores: Mapping[str, Any] | None,
) -> dict[str, dict[str, Any]]:
    """Every target against each transport's agent (store targets are transport-free)."""
    sqlite = (stores or {}).get("sqlite") or {}
    fts_1m = (sqlite.get("fts") or {}).get("1000000") or {}
    shared: dict[str, float | None] = {
        "sqlite_batched": sqlite.get("append_batched_msgs_per_s"),
        "fts_p50_1m": fts_1m.get("p50_ms"),
    }
    out: dict[str, dict[str, Any]] = {}
    for target in TARGETS:
        values: dict[str, float | None] = {}
        if target.key in shared:
            values["-"] = shared[target.key]
        for transport in TRANSPORT_ORDER if target.key not in shared else ():
            agent = f"agent-{transport}"
            per = over.get(transport, {})
            if target.key == "overhead_k3":
                value = per.get("k3_ms")
            elif target.key == "flatness":
                flat = per.get("flatness_ms")
                value = None if flat is None else abs(flat)
            elif target.key == "rss_c500":
                value = _get(variants, agent, "c500", "peak_rss_mb")
            else:
                value = _get(variants, agent, target.key, "conv_per_s")
            if value is not None:
                values[transport] = value
        out[target.key] = {
            "label": target.label,
            "limit": target.limit,
            "at_most": target.at_most,
            "unit": target.unit,
            "values": values,
            "met": {k: target.met(v) for k, v in values.items()},
        }
    return out


# -- rendering ------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text (and Markdown-compatible) table."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths))
        + "|"
    )
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


AGENT_ROWS: tuple[tuple[str, str, str], ...] = (
    ("ms/conv sequential, K=3 (median)", "seq_k3", "ms_per_conv"),
    ("ms/conv sequential, K=10 (median)", "seq_k10", "ms_per_conv"),
    ("ms/conv sequential, K=3, streamed", "seq_k3_stream", "ms_per_conv"),
    ("client CPU ms/conv, K=3", "seq_k3", "cpu_ms_per_conv"),
    ("client CPU ms/conv, K=10", "seq_k10", "cpu_ms_per_conv"),
    ("conversations/s, C=1", "c1", "conv_per_s"),
    ("conversations/s, C=50", "c50", "conv_per_s"),
    ("conversations/s, C=500", "c500", "conv_per_s"),
    ("client CPU ms/conv, C=50", "c50", "cpu_ms_per_conv"),
    ("client CPU ms/conv, C=500", "c500", "cpu_ms_per_conv"),
    ("peak RSS MB (after C=500)", "c500", "peak_rss_mb"),
    ("request body bytes/conv, K=3", "seq_k3", "body_bytes_per_conv"),
    ("request header bytes/conv, K=3", "seq_k3", "header_bytes_per_conv"),
    ("new connections per 100 requests, C=50", "c50", "new_connections_per_100_requests"),
    ("new connections per 100 requests, C=500", "c500", "new_connections_per_100_requests"),
    ("mock server CPU ms/conv, K=3", "seq_k3", "server_cpu_ms_per_conv"),
    ("mock server CPU share, C=50", "c50", "server_cpu_share"),
)


def render_agent(agent: Mapping[str, Any]) -> str:
    variants: Mapping[str, Any] = agent.get("variants") or {}
    names = [v for v in VARIANT_ORDER if v in variants] + sorted(
        v for v in variants if v not in VARIANT_ORDER
    )
    if not names:
        return "(no agent results)"
    rows = []
    for label, phase, key in AGENT_ROWS:
        cells = [_fmt(_get(variants, v, phase, key)) for v in names]
        if any(c != "-" for c in cells):
            rows.append([label, *cells])
    failures = [_get(variants, v, p, "failures") or 0 for v in names for p in ("c1", "c50", "c500")]
    if any(failures):
        rows.append(
            [
                "failed conversations (C runs)",
                *[
                    _fmt(sum(_get(variants, v, p, "failures") or 0 for p in ("c1", "c50", "c500")))
                    for v in names
                ],
            ]
        )
    parts = [table(["per conversation", *names], rows)]
    over: Mapping[str, Mapping[str, float | None]] = agent.get("overhead") or {}
    if over:
        transports = [t for t in TRANSPORT_ORDER if t in over]
        labels = (
            ("overhead ms/model round, K=3 (wall)", "k3_ms"),
            ("overhead ms/model round, K=10 (wall)", "k10_ms"),
            ("growth K=10 - K=3, ms/round (wall)", "flatness_ms"),
            ("overhead ms/model round, K=3 (client CPU)", "k3_cpu_ms"),
            ("overhead ms/model round, K=10 (client CPU)", "k10_cpu_ms"),
            ("growth K=10 - K=3, ms/round (CPU)", "flatness_cpu_ms"),
            ("overhead ms/model round, K=3 (CPU, best batch)", "k3_cpu_min_ms"),
            ("overhead ms/model round, K=10 (CPU, best batch)", "k10_cpu_min_ms"),
            ("overhead ms/model round, K=3 streamed (wall)", "stream_k3_ms"),
            ("throughput agent/raw, C=50", "c50_ratio"),
            ("throughput agent/raw, C=500", "c500_ratio"),
        )
        rows = [[label, *[_fmt(over[t].get(key), 3) for t in transports]] for label, key in labels]
        parts.append(table(["agent vs raw, same transport", *transports], rows))
    return "\n\n".join(parts)


def render_stores(stores: Mapping[str, Any]) -> str:
    names = [n for n in ("sqlite", "postgres") if stores.get(n)]
    if not names:
        return "(no store results)"

    def fts(store: Mapping[str, Any], size: str, key: str, cls: str | None = None) -> Any:
        found = (store.get("fts") or {}).get(size)
        if not found:
            return None
        if cls is not None:
            return (found.get("classes") or {}).get(cls, {}).get(key)
        return found.get(key)

    sizes = sorted(
        {size for n in names for size in (stores[n].get("fts") or {})}, key=lambda s: int(s)
    )
    batch = next((stores[n].get("append_batch_size") for n in names), 100)
    rows = [
        [
            "append, one message per call (msg/s)",
            *[_fmt(stores[n].get("append_single_msgs_per_s")) for n in names],
        ],
        [
            f"append, batches of {batch} (msg/s)",
            *[_fmt(stores[n].get("append_batched_msgs_per_s")) for n in names],
        ],
        [
            "  same, synchronous=normal (opt-in) (msg/s)",
            *[_fmt(stores[n].get("append_batched_normal_msgs_per_s")) for n in names],
        ],
        [
            "  full-text catch-up of those rows (msg/s)",
            *[_fmt(stores[n].get("fts_catch_up_msgs_per_s")) for n in names],
        ],
        [
            "append, batches of 4 = one agent round (msg/s)",
            *[_fmt(stores[n].get("append_round_of_4_msgs_per_s")) for n in names],
        ],
    ]
    for size in sizes:
        label = f"{int(size):,}"
        rows.append(
            [
                f"FTS search p50 / p95 at {label} msgs (ms)",
                *[
                    f"{_fmt(fts(stores[n], size, 'p50_ms'))} / {_fmt(fts(stores[n], size, 'p95_ms'))}"
                    for n in names
                ],
            ]
        )
        rows.append(
            [
                f"  frequent-word p50 / p95 at {label} (ms)",
                *[
                    f"{_fmt(fts(stores[n], size, 'p50_ms', 'frequent'))} / "
                    f"{_fmt(fts(stores[n], size, 'p95_ms', 'frequent'))}"
                    for n in names
                ],
            ]
        )
    resume = [stores[n].get("resume") or {} for n in names]
    messages = next((r.get("messages") for r in resume if r.get("messages")), 10_000)
    rows.append(
        [
            f"resume {messages:,}-msg session: open + load + repair (ms)",
            *[_fmt(r.get("cold_ms")) for r in resume],
        ]
    )
    rows.append(["  same, connection already open (ms)", *[_fmt(r.get("warm_ms")) for r in resume]])
    rows.append(
        [
            "  get_resume_conversations (ms)",
            *[_fmt(r.get("resume_conversations_ms")) for r in resume],
        ]
    )
    return table(["session store", *names], rows)


def render_targets(targets: Mapping[str, Mapping[str, Any]]) -> str:
    rows = []
    for entry in targets.values():
        sign = "<=" if entry["at_most"] else ">="
        values = entry["values"]
        if not values:
            continue
        measured = ", ".join(
            f"{_fmt(v)}" + ("" if k == "-" else f" ({k})") for k, v in values.items()
        )
        verdicts = {k: m for k, m in entry["met"].items()}
        if all(m is None for m in verdicts.values()):
            verdict = "not measured"
        else:
            verdict = ", ".join(
                ("met" if m else "short" if m is not None else "-")
                + ("" if k == "-" else f" ({k})")
                for k, m in verdicts.items()
            )
        rows.append(
            [entry["label"], f"{sign} {_fmt(entry['limit'])} {entry['unit']}", measured, verdict]
        )
    return table(["target", "goal", "measured", "verdict"], rows)


def render(result: Mapping[str, Any]) -> str:
    """The whole report: header, agent table, overheads, stores, targets."""
    machine = result.get("machine") or {}
    versions = result.get("versions") or {}
    head = [
        f"Hermes bench ({result.get('mode', '?')}), {machine.get('cpus', '?')} CPUs, "
        f"Python {machine.get('python', '?')}, load average {machine.get('loadavg_start', '?')} "
        f"-> {machine.get('loadavg_end', '?')}, {_fmt(result.get('duration_s'))} s",
        "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
    ]
    agent = result.get("agent") or {}
    if agent:
        head.append(
            f"agent: {agent.get('runs', '?')} interleaved run(s) per variant; "
            f"raw bodies identical to the agent's: {_fmt(agent.get('bytes_identical'))}"
        )
    for note in result.get("notes") or ():
        head.append(f"note: {note}")
    parts = ["\n".join(head)]
    if agent:
        parts.append(render_agent(agent))
    stores = result.get("stores")
    if stores:
        parts.append(render_stores(stores))
    targets = result.get("targets")
    if targets:
        parts.append(render_targets(targets))
    return "\n\n".join(parts) + "\n"
