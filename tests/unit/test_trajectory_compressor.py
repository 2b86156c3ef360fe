"""TrajectoryCompressor: fit ShareGPT samples into a token budget (REFERENCE.md §1).

Unit tests over a scripted model: the behaviour under test is which turns are kept, where
the ``[CONTEXT SUMMARY]:`` turn goes and what the one summarisation request contains, all
decided locally; the model only supplies the summary text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from hermes_adapters.llm.scripted import ScriptedModel, raise_error, reply
from hermes_bootstrap.trajectory_compressor import (
    DEFAULT_SUMMARY_NOTICE,
    FALLBACK_SUMMARY,
    TrajectoryCompressor,
    estimate,
)
from hermes_core.errors import ModelUnavailable
from hermes_core.messages import UserMessage

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


def turn(role: str, value: str) -> dict[str, str]:
    return {"from": role, "value": value}


def long_record(rounds: int = 6, size: int = 400) -> dict[str, Any]:
    """system, human, then ``rounds`` of gpt-call/tool pairs, then a final gpt answer."""
    conversations = [turn("system", "SYS"), turn("human", "do the task")]
    for k in range(rounds):
        conversations.append(turn("gpt", f"call {k} " + "c" * size))
        conversations.append(turn("tool", f"result {k} " + "r" * size))
    conversations.append(turn("gpt", "final answer"))
    return {"prompt_index": 7, "conversations": conversations, "completed": True}


async def test_estimate_is_a_quarter_of_the_length_rounded_up() -> None:
    assert [estimate(""), estimate("abc"), estimate("abcd"), estimate("abcde")] == [0, 1, 1, 2]


async def test_record_within_budget_is_returned_unchanged_without_a_model_call() -> None:
    model = ScriptedModel()
    record = long_record(rounds=1, size=10)
    async with TrajectoryCompressor(model, target_tokens=1000) as compressor:
        out = await compressor.compress(record)
    assert out == record and out is not record
    assert model.requests == []
    assert not model.closed  # borrowed models are left open


async def test_middle_is_summarised_between_protected_head_and_tail() -> None:
    model = ScriptedModel([reply("[CONTEXT SUMMARY]: searched six times, found r.")])
    record = long_record()
    compressor = TrajectoryCompressor(model, target_tokens=500, summary_tokens=50)
    out = await compressor.compress(record)
    turns = out["conversations"]
    original = record["conversations"]

    assert turns[0] == turn("system", "SYS" + DEFAULT_SUMMARY_NOTICE)
    assert turns[1] == original[1]
    assert turns[2] == turn("human", "[CONTEXT SUMMARY]: searched six times, found r.")
    tail = turns[3:]
    assert tail == original[len(original) - len(tail) :]  # the ending is kept verbatim
    assert len(tail) >= 4
    assert tail[0]["from"] != "tool"  # no tool response without its call
    assert compressor.count(turns) <= 500
    assert {k: v for k, v in out.items() if k != "conversations"} == {
        "prompt_index": 7,
        "completed": True,
    }
    assert record["conversations"][0] == turn("system", "SYS")  # input not mutated

    (request,) = model.requests
    assert request.tools == ()
    assert request.max_tokens == 100
    (message,) = request.messages
    assert isinstance(message, UserMessage) and isinstance(message.content, str)
    assert "[Turn 2 - GPT]:\ncall 0" in message.content
    assert "[Turn 3 - TOOL]:\nresult 0" in message.content
    assert "final answer" not in message.content
    assert 'starting with "[CONTEXT SUMMARY]:"' in message.content


async def test_only_as_many_turns_as_needed_are_summarised() -> None:
    model = ScriptedModel([reply("short")])
    record = long_record(rounds=6, size=400)
    total = sum(estimate(t["value"]) for t in record["conversations"])
    compressor = TrajectoryCompressor(model, target_tokens=total - 150, summary_tokens=10)
    out = await compressor.compress(record)
    turns = out["conversations"]
    # one call/response pair (~200 tokens) covers the overage; the rest stays verbatim
    assert turns[2] == turn("human", "[CONTEXT SUMMARY]: short")
    assert turns[3:] == record["conversations"][4:]


async def test_a_boundary_never_splits_a_call_from_its_response() -> None:
    model = ScriptedModel([reply("[CONTEXT SUMMARY]: x")])
    record = long_record(rounds=6, size=400)
    # with protect_tail=2 the tail would start on a tool turn: the cut moves before its call
    compressor = TrajectoryCompressor(model, target_tokens=100, protect_tail=2, summary_tokens=5)
    out = await compressor.compress(record)
    turns = out["conversations"]
    summary_at = next(i for i, t in enumerate(turns) if t["value"].startswith("[CONTEXT"))
    after = turns[summary_at + 1 :]
    assert after == record["conversations"][-3:]  # gpt call, its tool result, final answer
    assert after[0]["from"] == "gpt"
    for i, t in enumerate(turns):
        if t["from"] == "tool":
            assert turns[i - 1]["from"] == "gpt"


async def test_model_failure_uses_the_fallback_summary() -> None:
    model = ScriptedModel([raise_error(ModelUnavailable("down"))])
    compressor = TrajectoryCompressor(model, target_tokens=300, summary_tokens=10)
    out = await compressor.compress(long_record())
    assert out["conversations"][2] == turn("human", FALLBACK_SUMMARY)
    assert FALLBACK_SUMMARY.startswith("[CONTEXT SUMMARY]:")
    assert compressor.summary_failures == 1


async def test_truncated_summary_is_not_trusted() -> None:
    model = ScriptedModel([reply("half a summ", finish_reason="length")])
    compressor = TrajectoryCompressor(model, target_tokens=300, summary_tokens=10)
    out = await compressor.compress(long_record())
    assert out["conversations"][2]["value"] == FALLBACK_SUMMARY


async def test_nothing_to_compress_between_protected_turns() -> None:
    model = ScriptedModel()
    record = {"conversations": [turn("system", "s" * 4000), turn("human", "h" * 4000)]}
    compressor = TrajectoryCompressor(model, target_tokens=10)
    assert await compressor.compress(record) == record
    assert await compressor.compress({"no": "conversation"}) == {"no": "conversation"}
    assert model.requests == []


async def test_compress_file_keeps_order_and_drops_bad_lines(tmp_path: Path) -> None:
    model = ScriptedModel([reply(f"[CONTEXT SUMMARY]: s{k}") for k in range(3)])
    small = long_record(rounds=1, size=4)
    lines = [
        json.dumps({**long_record(), "prompt_index": 0}),
        json.dumps({**small, "prompt_index": 1}),
        "not json",
        "",
        json.dumps({**long_record(), "prompt_index": 2}),
        json.dumps({**long_record(), "prompt_index": 3}, ensure_ascii=False),
    ]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    await anyio.Path(src).write_text("\n".join(lines) + "\n", encoding="utf-8")
    compressor = TrajectoryCompressor(
        model, target_tokens=600, summary_tokens=10, concurrency=2, owns_model=True
    )
    async with compressor:
        stats = await compressor.compress_file(src, dst)
    assert model.closed  # owned models are closed with the compressor

    rows = [json.loads(line) for line in dst.read_text(encoding="utf-8").splitlines()]
    assert [r["prompt_index"] for r in rows] == [0, 1, 2, 3]
    assert rows[1] == {**small, "prompt_index": 1}
    for row in (rows[0], rows[2], rows[3]):
        assert row["conversations"][2]["value"].startswith("[CONTEXT SUMMARY]: s")
    assert stats.total == 4
    assert stats.compressed == 3
    assert stats.under_target == 1
    assert stats.invalid_rows == 1
    assert stats.still_over_limit == 0
    assert stats.summary_failures == 0


async def test_close_is_idempotent() -> None:
    model = ScriptedModel()
    compressor = TrajectoryCompressor(model, owns_model=True)
    await compressor.close()
    await compressor.close()
    assert model.closed
