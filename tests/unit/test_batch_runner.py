"""BatchRunner: shards, checkpoint, statistics, merge filtering and resume (REFERENCE.md §1).

Unit tests over a ``FunctionModel`` rather than recorded exchanges: what is under test is
the files the runner writes, which users' pipelines read as they are, so every expected
row, checkpoint and statistics value is written out here from the reference description.
The model's behaviour is a pure function of the prompt index, so a cancelled-and-resumed
run can be compared with an uninterrupted one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from hermes_adapters.llm.scripted import (
    FunctionModel,
    ModelStep,
    call,
    raise_error,
    reply,
    tool_calls,
)
from hermes_bootstrap.batch import (
    ALL_POSSIBLE_TOOLS,
    DISTRIBUTIONS,
    BatchProgress,
    BatchRunner,
    Distribution,
    sample_toolsets,
    tool_result_failed,
)
from hermes_core.errors import ConfigError, ModelError
from hermes_core.messages import AssistantMessage, UserMessage
from hermes_core.ports.llm import ModelRequest
from hermes_core.ports.tools import FunctionTool, ToolContext, ToolSpec
from hermes_core.toolsets import STATIC_TOOLSETS
from hermes_core.trajectory import trajectory_system_prompt

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

RUN = "golden"
MODEL = "test-model"
N_PROMPTS = 50
DEFAULT_TOOLSETS = ["web", "vision", "image_gen", "terminal", "file", "browser"]

SEARCH_SPEC = ToolSpec(
    "web_search",
    "Search the web",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    toolset="web",
)
SYSTEM = trajectory_system_prompt([SEARCH_SPEC.function_schema()])


def prompt(i: int) -> str:
    return f"Find fact #{i} — café"


async def _search(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    query = str(args["query"])
    if query.endswith("9"):
        return {"error": "rate limited"}
    return {"results": [f"r-{query}"]}


SEARCH = FunctionTool(SEARCH_SPEC, _search)


def _index_of(request: ModelRequest) -> int:
    user = next(m for m in request.messages if isinstance(m, UserMessage))
    assert isinstance(user.content, str)
    return int(user.content.split("#")[1].split(" ")[0])


def respond(request: ModelRequest) -> ModelStep:
    """The model's script, by prompt index ``i`` (``kind = i % 10``).

    kind 3 fails, kind 5 answers without reasoning (discarded), kind 7 calls a tool that
    does not exist (filtered at merge), kind 1 reasons only in a scratchpad, kind 9 gets a
    tool error; every other prompt searches and answers with native reasoning.
    """
    i = _index_of(request)
    step = sum(isinstance(m, AssistantMessage) for m in request.messages)
    kind = i % 10
    if kind == 3:
        return raise_error(ModelError("upstream exploded", provider="test"))
    if kind == 5:
        return reply(f"plain answer {i}")
    if kind == 7:
        if step == 0:
            return tool_calls(call("summon_dragon", {"size": i}), reasoning="I need a dragon")
        return reply(f"no dragon for {i}", reasoning="the tool does not exist")
    if step == 0:
        thought = None if kind == 1 else f"search for {i}"
        return tool_calls(call("web_search", {"query": f"q{i}"}), reasoning=thought)
    if kind == 1:
        return reply(f"<REASONING_SCRATCHPAD>weigh {i}</REASONING_SCRATCHPAD>answer {i}")
    return reply(f"answer {i}", reasoning=f"found {i}")


def factory(fn: Callable[[ModelRequest], Any] = respond) -> Callable[[], FunctionModel]:
    return lambda: FunctionModel(fn, model_name=MODEL)


async def write_dataset(path: Path, n: int = N_PROMPTS, *, junk: bool = True) -> None:
    lines: list[str] = []
    for i in range(n):
        lines.append(json.dumps({"prompt": prompt(i), "id": i}, ensure_ascii=False))
        if junk and i == 10:
            lines.append("{not json")
        if junk and i == 20:
            lines.append(json.dumps({"text": "a row without a prompt"}))
        if junk and i == 30:
            lines.append("")
        if junk and i == 40:
            lines.extend(['["a", "list"]', "also not json"])
    await anyio.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def runner(tmp_path: Path, **kw: Any) -> BatchRunner:
    options: dict[str, Any] = {
        "dataset_file": tmp_path / "dataset.jsonl",
        "batch_size": 5,
        "run_name": RUN,
        "model": MODEL,
        "num_workers": 4,
        "output_root": tmp_path / "data",
        "chat_model_factory": factory(),
        "tools": [SEARCH],
    }
    options.update(kw)
    return BatchRunner(**options)


def zero_stats(extra: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    stats = {t: {"count": 0, "success": 0, "failure": 0} for t in ALL_POSSIBLE_TOOLS}
    stats.update(extra)
    return stats


def zero_errors(extra: dict[str, int]) -> dict[str, int]:
    errors = dict.fromkeys(ALL_POSSIBLE_TOOLS, 0)
    errors.update(extra)
    return errors


def expected_row(i: int) -> dict[str, Any]:
    """The shard row of prompt ``i`` with the timestamp left as ``None``."""
    kind = i % 10
    if kind == 7:
        gpt_call = (
            "<think>\nI need a dragon\n</think>\n<tool_call>\n"
            f'{{"name": "summon_dragon", "arguments": {{"size": {i}}}}}\n</tool_call>'
        )
        error = "Tool 'summon_dragon' does not exist. Available tools: web_search"
        tool = (
            '<tool_response>\n{"tool_call_id": "call_summon_dragon", "name": "summon_dragon", '
            f'"content": {{"error": "{error}"}}}}\n</tool_response>'
        )
        answer = f"<think>\nthe tool does not exist\n</think>\nno dragon for {i}"
        stats = {"summon_dragon": {"count": 1, "success": 0, "failure": 1}}
    else:
        think = "<think>\n</think>\n" if kind == 1 else f"<think>\nsearch for {i}\n</think>\n"
        gpt_call = (
            f"{think}<tool_call>\n"
            f'{{"name": "web_search", "arguments": {{"query": "q{i}"}}}}\n</tool_call>'
        )
        content = '{"error": "rate limited"}' if kind == 9 else f'{{"results": ["r-q{i}"]}}'
        tool = (
            '<tool_response>\n{"tool_call_id": "call_web_search", "name": "web_search", '
            f'"content": {content}}}\n</tool_response>'
        )
        if kind == 1:
            answer = f"<think>weigh {i}</think>answer {i}"
        else:
            answer = f"<think>\nfound {i}\n</think>\nanswer {i}"
        failed = kind == 9
        stats = {"web_search": {"count": 1, "success": int(not failed), "failure": int(failed)}}
    return {
        "prompt_index": i,
        "conversations": [
            {"from": "system", "value": SYSTEM},
            {"from": "human", "value": prompt(i)},
            {"from": "gpt", "value": gpt_call},
            {"from": "tool", "value": tool},
            {"from": "gpt", "value": answer},
        ],
        "metadata": {"batch_num": i // 5, "timestamp": None, "model": MODEL},
        "completed": True,
        "partial": False,
        "api_calls": 2,
        "toolsets_used": DEFAULT_TOOLSETS,
        "tool_stats": zero_stats(stats),
        "tool_error_counts": zero_errors({k: v["failure"] for k, v in stats.items()}),
    }


def is_iso(value: object) -> bool:
    assert isinstance(value, str)
    datetime.fromisoformat(value)
    return True


async def read_rows(path: Path) -> list[dict[str, Any]]:
    text = await anyio.Path(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def key_of(row: dict[str, Any]) -> tuple[int, str]:
    return row["prompt_index"], json.dumps(row["conversations"], ensure_ascii=False)


async def all_shard_rows(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    shards = sorted([Path(p) async for p in anyio.Path(out).glob("batch_*.jsonl")])
    for shard in shards:
        rows.extend(await read_rows(shard))
    return rows


# -- the golden run ----------------------------------------------------------------------


async def test_full_run_writes_every_file_exactly(tmp_path: Path) -> None:
    await write_dataset(tmp_path / "dataset.jsonl")
    batch = runner(tmp_path)
    stats = await batch.run()
    out = tmp_path / "data" / RUN

    # dataset accounting
    assert batch.report.dataset_rows == N_PROMPTS
    assert batch.report.invalid_json_rows == 2
    assert batch.report.missing_prompt_rows == 2
    assert batch.report.processed == N_PROMPTS
    assert batch.report.failed == 5
    assert batch.report.discarded_no_reasoning == 5
    assert batch.report.written == 40

    # shards: one per batch, rows in prompt order, failed and discarded prompts absent
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        *(f"batch_{k}.jsonl" for k in range(10)),
        "checkpoint.json",
        "statistics.json",
        "trajectories.jsonl",
    ]
    shard_lines: dict[int, list[str]] = {}
    for k in range(10):
        text = await anyio.Path(out / f"batch_{k}.jsonl").read_text(encoding="utf-8")
        assert text.endswith("\n")
        lines = text.splitlines()
        shard_lines[k] = lines
        rows = [json.loads(line) for line in lines]
        wanted = [i for i in range(5 * k, 5 * k + 5) if i % 10 not in (3, 5)]
        assert [r["prompt_index"] for r in rows] == wanted
        for line, row in zip(lines, rows, strict=True):
            assert is_iso(row["metadata"]["timestamp"])
            expected = expected_row(row["prompt_index"])
            expected["metadata"]["timestamp"] = row["metadata"]["timestamp"]
            assert row == expected
            # byte-exact: key order, default separators, non-ASCII kept
            assert line == json.dumps(expected, ensure_ascii=False)
            assert "café" in line

    # checkpoint
    checkpoint = json.loads((out / "checkpoint.json").read_text(encoding="utf-8"))
    assert list(checkpoint) == ["run_name", "completed_prompts", "batch_stats", "last_updated"]
    assert checkpoint["run_name"] == RUN
    assert checkpoint["completed_prompts"] == [i for i in range(N_PROMPTS) if i % 10 != 3]
    assert checkpoint["batch_stats"] == {
        str(k): {"processed": 5, "skipped": 0, "discarded_no_reasoning": k % 2} for k in range(10)
    }
    assert is_iso(checkpoint["last_updated"])

    # statistics
    on_disk = json.loads((out / "statistics.json").read_text(encoding="utf-8"))
    assert on_disk == stats
    assert list(stats) == [
        "run_name",
        "distribution",
        "total_prompts",
        "total_batches",
        "batch_size",
        "model",
        "completed_at",
        "duration_seconds",
        "tool_statistics",
        "reasoning_statistics",
    ]
    assert is_iso(stats.pop("completed_at"))
    duration = stats.pop("duration_seconds")
    assert isinstance(duration, float) and duration >= 0
    assert stats == {
        "run_name": RUN,
        "distribution": "default",
        "total_prompts": 50,
        "total_batches": 10,
        "batch_size": 5,
        "model": MODEL,
        "tool_statistics": {
            "summon_dragon": {
                "count": 5,
                "success": 0,
                "failure": 5,
                "success_rate": 0.0,
                "failure_rate": 100.0,
            },
            "web_search": {
                "count": 35,
                "success": 30,
                "failure": 5,
                "success_rate": 85.71,
                "failure_rate": 14.29,
            },
        },
        "reasoning_statistics": {
            "total_assistant_turns": 80,
            "turns_with_reasoning": 75,
            "turns_without_reasoning": 5,
        },
    }

    # merged: shards concatenated in name order, hallucinated-tool rows dropped, bytes kept
    merged = (out / "trajectories.jsonl").read_text(encoding="utf-8")
    kept = [
        line
        for k in range(10)
        for line in shard_lines[k]
        if json.loads(line)["prompt_index"] % 10 != 7
    ]
    assert merged == "".join(line + "\n" for line in kept)
    assert len(kept) == 35
    assert batch.report.merge is not None
    assert batch.report.merge.total_rows == 40
    assert batch.report.merge.kept == 35
    assert batch.report.merge.hallucinated_tools == 5
    assert batch.report.merge.invalid_json == 0


async def test_rerun_without_resume_skips_checkpointed_prompts(tmp_path: Path) -> None:
    await write_dataset(tmp_path / "dataset.jsonl", 10, junk=False)
    await runner(tmp_path).run()
    before = await all_shard_rows(tmp_path / "data" / RUN)
    again = runner(tmp_path)
    stats = await again.run()
    after = await all_shard_rows(tmp_path / "data" / RUN)
    assert [key_of(r) for r in after] == [key_of(r) for r in before]
    assert again.report.skipped_by_checkpoint == 9  # all but the failing prompt 3
    assert again.report.failed == 1  # retried, fails again
    checkpoint = json.loads((tmp_path / "data" / RUN / "checkpoint.json").read_text())
    assert checkpoint["batch_stats"] == {
        "0": {"processed": 1, "skipped": 4, "discarded_no_reasoning": 0},
        "1": {"processed": 0, "skipped": 5, "discarded_no_reasoning": 0},
    }
    assert stats["tool_statistics"] == {}
    assert stats["reasoning_statistics"]["total_assistant_turns"] == 0


# -- cancellation and resume ---------------------------------------------------------------


async def test_cancelled_run_resumes_to_the_uninterrupted_output(tmp_path: Path) -> None:
    clean_dir, broken_dir = tmp_path / "clean", tmp_path / "broken"
    for directory in (clean_dir, broken_dir):
        directory.mkdir()
        await write_dataset(directory / "dataset.jsonl")

    reference = await runner(clean_dir).run()

    finished = 0
    enough = anyio.Event()

    async def stalls_after_twelve(request: ModelRequest) -> ModelStep:
        nonlocal finished
        if enough.is_set():
            await anyio.sleep_forever()
        step = respond(request)
        answered = step.response is not None and not step.response.message.tool_calls
        if answered:
            finished += 1
            if finished == 12:
                enough.set()
        return step

    interrupted = runner(broken_dir, chat_model_factory=factory(stalls_after_twelve))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupted.run)
            await enough.wait()
            tg.cancel_scope.cancel()

    out = broken_dir / "data" / RUN
    checkpoint = json.loads((out / "checkpoint.json").read_text(encoding="utf-8"))
    partial_rows = await all_shard_rows(out)
    assert 0 < len(partial_rows) < 40
    written = {r["prompt_index"] for r in partial_rows}
    assert written <= set(checkpoint["completed_prompts"])  # every written row is recorded
    assert not (out / "trajectories.jsonl").exists()

    resumed = runner(broken_dir)
    stats = await resumed.run(resume=True)
    rows = await all_shard_rows(out)
    indices = [r["prompt_index"] for r in rows]
    assert len(indices) == len(set(indices)) == 40  # nothing redone, nothing lost
    assert resumed.report.resumed_by_content == len(partial_rows)

    clean_merged = await read_rows(clean_dir / "data" / RUN / "trajectories.jsonl")
    broken_merged = await read_rows(out / "trajectories.jsonl")
    assert {key_of(r) for r in broken_merged} == {key_of(r) for r in clean_merged}
    assert len(broken_merged) == len(clean_merged) == 35
    final = json.loads((out / "checkpoint.json").read_text(encoding="utf-8"))
    assert final["completed_prompts"] == [i for i in range(N_PROMPTS) if i % 10 != 3]
    assert stats["total_prompts"] == reference["total_prompts"] == 50

    # a second resume finds nothing left but the failing prompts, and writes nothing
    again = runner(broken_dir)
    await again.run(resume=True)
    assert [r["prompt_index"] for r in await all_shard_rows(out)] == indices
    assert again.report.written == 0
    assert again.report.failed == 5


async def test_foreign_checkpoint_is_reset_and_torn_shard_repaired(tmp_path: Path) -> None:
    await write_dataset(tmp_path / "dataset.jsonl", 3, junk=False)
    out = tmp_path / "data" / RUN
    out.mkdir(parents=True)
    foreign = {"run_name": "other", "completed_prompts": [0, 1, 2], "batch_stats": {}}
    (out / "checkpoint.json").write_text(json.dumps(foreign))
    (out / "batch_0.jsonl").write_text('{"prompt_index": 99, "conversa')  # torn, no newline

    batch = runner(tmp_path, batch_size=3)
    await batch.run()
    assert batch.report.skipped_by_checkpoint == 0
    lines = (out / "batch_0.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[0] == '{"prompt_index": 99, "conversa'
    assert [json.loads(line)["prompt_index"] for line in lines[1:]] == [0, 1, 2]
    assert batch.report.merge is not None
    assert batch.report.merge.invalid_json == 1
    merged = await read_rows(out / "trajectories.jsonl")
    assert [r["prompt_index"] for r in merged] == [0, 1, 2]
    checkpoint = json.loads((out / "checkpoint.json").read_text(encoding="utf-8"))
    assert checkpoint["run_name"] == RUN
    assert checkpoint["completed_prompts"] == [0, 1, 2]


# -- toolsets, custom tools, progress ------------------------------------------------------


async def test_custom_tool_names_are_known_and_zero_filled(tmp_path: Path) -> None:
    await write_dataset(tmp_path / "dataset.jsonl", 2, junk=False)

    async def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
        return "Error: nothing found"

    tool = FunctionTool(ToolSpec("lookup", "Look something up"), lookup)

    def script(request: ModelRequest) -> ModelStep:
        if any(isinstance(m, AssistantMessage) for m in request.messages):
            return reply("done", reasoning="it failed")
        return tool_calls(call("lookup"), reasoning="look it up")

    batch = runner(tmp_path, tools=[tool], chat_model_factory=factory(script))
    stats = await batch.run()
    merged = await read_rows(tmp_path / "data" / RUN / "trajectories.jsonl")
    assert len(merged) == 2
    for row in merged:
        assert list(row["tool_stats"]) == [*ALL_POSSIBLE_TOOLS, "lookup"]
        assert row["tool_stats"]["lookup"] == {"count": 1, "success": 0, "failure": 1}
        assert row["tool_error_counts"]["lookup"] == 1
        assert row["tool_stats"]["web_search"] == {"count": 0, "success": 0, "failure": 0}
    assert stats["tool_statistics"]["lookup"]["failure_rate"] == 100.0


async def test_sampled_toolsets_decide_which_tools_are_offered(tmp_path: Path) -> None:
    await write_dataset(tmp_path / "dataset.jsonl", 4, junk=False)
    offered: list[tuple[str, ...]] = []

    def script(request: ModelRequest) -> ModelStep:
        offered.append(tuple(s.name for s in request.tools))
        return reply("ok", reasoning="fine")

    batch = runner(
        tmp_path,
        distribution="terminal_only",
        chat_model_factory=factory(script),
        num_workers=1,
    )
    await batch.run()
    assert offered == [()] * 4  # web_search is not granted by terminal/file
    rows = await read_rows(tmp_path / "data" / RUN / "trajectories.jsonl")
    assert {tuple(r["toolsets_used"]) for r in rows} == {("terminal", "file")}


async def test_progress_callback_sees_every_prompt(tmp_path: Path) -> None:
    await write_dataset(tmp_path / "dataset.jsonl", 10, junk=False)
    seen: list[BatchProgress] = []
    await runner(tmp_path, progress=seen.append, num_workers=2).run()
    assert [p.done for p in seen] == list(range(1, 11))
    assert {p.total for p in seen} == {10}
    assert seen[-1].failed == 1 and seen[-1].discarded == 1
    assert seen[-1].eta == 0.0


async def test_scripted_provider_runs_the_offline_demo_model(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "dataset.jsonl").write_text('{"prompt": "hello"}\n')
    batch = BatchRunner(
        tmp_path / "dataset.jsonl",
        1,
        "demo",
        distribution="minimal",
        provider="scripted",
        output_root=tmp_path / "data",
        workspace=tmp_path,
    )
    stats = await batch.run()
    # the demo model shows its reasoning, so its sample is kept
    assert batch.report.discarded_no_reasoning == 0
    assert stats["model"] == "hermes-demo"
    checkpoint = json.loads((tmp_path / "data" / "demo" / "checkpoint.json").read_text())
    assert checkpoint["completed_prompts"] == [0]
    rows = (tmp_path / "data" / "demo" / "trajectories.jsonl").read_text().splitlines()
    assert len(rows) == 1
    gpt = [t["value"] for t in json.loads(rows[0])["conversations"] if t["from"] == "gpt"]
    assert gpt and all(v.startswith("<think>\n") and v != "<think>\n</think>" for v in gpt)


# -- configuration errors ------------------------------------------------------------------


async def test_unknown_distribution_and_unwired_provider_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown toolset distribution 'nope'"):
        BatchRunner(tmp_path / "d.jsonl", 1, "r", distribution="nope")
    with pytest.raises(ConfigError, match="cannot open provider 'openrouter'"):
        BatchRunner(tmp_path / "d.jsonl", 1, "r", provider="openrouter")
    with pytest.raises(ConfigError, match="batch_size must be at least 1"):
        BatchRunner(tmp_path / "d.jsonl", 0, "r")
    with pytest.raises(ConfigError, match="plain directory name"):
        BatchRunner(tmp_path / "d.jsonl", 1, "../escape")


async def test_missing_or_empty_dataset_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dataset file not found"):
        await runner(tmp_path).run()
    await anyio.Path(tmp_path / "dataset.jsonl").write_text('{"text": 1}\nnot json\n')
    with pytest.raises(ConfigError, match="no row with a 'prompt'"):
        await runner(tmp_path).run()


# -- pure helpers --------------------------------------------------------------------------


async def test_sampling_is_seeded_and_never_empty() -> None:
    import random

    dist = DISTRIBUTIONS["balanced"]
    first = [sample_toolsets(dist, random.Random(f"run:{i}")) for i in range(20)]
    again = [sample_toolsets(dist, random.Random(f"run:{i}")) for i in range(20)]
    assert first == again
    assert len({tuple(s) for s in first}) > 1
    assert sample_toolsets(DISTRIBUTIONS["default"], random.Random(0)) == DEFAULT_TOOLSETS
    never = Distribution("nothing fires", {"file": 0, "web": 0, "terminal": 0})
    assert sample_toolsets(never, random.Random(1)) == ["file"]
    unlikely = Distribution("low", {"file": 0, "web": 1e-9, "terminal": 1e-9})
    assert sample_toolsets(unlikely, random.Random(1)) == ["web"]
    for dist in DISTRIBUTIONS.values():
        assert set(dist.toolsets) <= set(STATIC_TOOLSETS)


@pytest.mark.parametrize(
    ("content", "failed"),
    [
        ('{"output": "ok", "exit_code": 1, "error": null}', False),
        ('{"output": "", "exit_code": 0, "error": "boom"}', True),
        ('{"content": {"error": "inner"}}', True),
        ('{"content": {"error": null}}', False),
        ('{"success": false}', True),
        ('{"success": true, "error": null}', False),
        ("[1, 2]", False),
        ("", True),
        ("Error: nope", True),
        ("  ERROR: shouting", True),
        ("an error: in the middle", False),
        ("plain text", False),
    ],
)
async def test_tool_failure_rules(content: str, failed: bool) -> None:
    assert tool_result_failed(content) is failed


async def test_all_possible_tools_is_every_static_tool_sorted() -> None:
    every = {t for ts in STATIC_TOOLSETS.values() for t in ts.tools}
    assert list(ALL_POSSIBLE_TOOLS) == sorted(every)


class _CountingModel(FunctionModel):
    """A FunctionModel that records how often it is closed."""

    closes = 0

    async def aclose(self) -> None:
        self.closes += 1
        await super().aclose()


async def test_a_shared_model_serves_every_prompt_and_stays_open(tmp_path: Path) -> None:
    await write_dataset(tmp_path / "dataset.jsonl", 12, junk=False)
    shared = _CountingModel(respond, model_name=MODEL)
    batch = runner(tmp_path, chat_model_factory=None, chat_model=shared)
    await batch.run()
    await anyio.Path(tmp_path / "per-prompt").mkdir()
    await write_dataset(tmp_path / "per-prompt" / "dataset.jsonl", 12, junk=False)
    per_prompt = runner(tmp_path / "per-prompt")
    await per_prompt.run()
    assert (batch.report.processed, batch.report.failed) == (
        per_prompt.report.processed,
        per_prompt.report.failed,
    )
    asked = {r.messages[1].content for r in shared.requests if len(r.messages) > 1}
    assert asked >= {prompt(i) for i in range(12)}  # every prompt's agent used the one model
    assert shared.closes == 0  # borrowed: the caller closes it


async def test_shared_model_and_factory_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not both"):
        runner(tmp_path, chat_model=FunctionModel(respond, model_name=MODEL))
