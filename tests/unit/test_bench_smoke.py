"""The benchmark still runs end to end and prints every row the performance table needs.

A benchmark that silently breaks is worse than none: the next performance claim would be
made without it. This runs the agent half for a handful of conversations (workers in this
process, the mock server in its own) and checks the table's shape and the byte-equality
check, never a timing: timings belong to ``make bench``, not to the test suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) leaves the repo root out
    sys.path.insert(0, str(ROOT))

from bench.cli import SMOKE, Options, run  # noqa: E402
from bench.report import render  # noqa: E402

VARIANTS = ("agent-httpx", "raw-httpx", "agent-inproc", "raw-inproc")


def test_quick_agent_benchmark_prints_the_expected_rows(tmp_path: Path) -> None:
    options = Options(
        mode="smoke",
        plan=SMOKE,
        only="agent",
        variants=VARIANTS,
        in_process=True,
        results_dir=tmp_path,
    )
    result = run(options, log=lambda _message: None)
    text = render(result)

    agent = result["agent"]
    assert agent["bytes_identical"] is True, agent["byte_checks"]
    assert set(agent["variants"]) == set(VARIANTS)
    for variant in ("agent-httpx", "raw-httpx"):
        phases = agent["variants"][variant]["phases"]
        assert set(phases) == {"seq_k3", "seq_k10", "seq_k3_stream", "c1", "c50", "c500"}
        assert all(phase.get("failures", 0) == 0 for phase in phases.values())
        assert phases["seq_k3"]["requests_per_conv"] == 4  # K=3: three tool rounds + answer
        assert phases["seq_k10"]["requests_per_conv"] == 11
    assert (
        agent["variants"]["agent-httpx"]["phases"]["seq_k3"]["body_bytes_per_conv"]
        == agent["variants"]["raw-httpx"]["phases"]["seq_k3"]["body_bytes_per_conv"]
    )
    for row in (
        "ms/conv sequential, K=3 (median)",
        "ms/conv sequential, K=10 (median)",
        "client CPU ms/conv, K=3",
        "conversations/s, C=1",
        "conversations/s, C=50",
        "conversations/s, C=500",
        "client CPU ms/conv, C=500",
        "peak RSS MB (after C=500)",
        "request body bytes/conv, K=3",
        "overhead ms/model round, K=3 (wall)",
        "growth K=10 - K=3, ms/round (wall)",
        "agent conversations/s at C=50",
        "agent peak RSS at C=500",
    ):
        assert row in text, f"row {row!r} missing from:\n{text}"
    assert set(result["agent"]["overhead"]) == {"httpx", "inproc"}
