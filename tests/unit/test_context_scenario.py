"""A scripted multi-session scenario with memory, skills and session_search enabled.

Session 1 saves a memory, writes a skill and mentions a fact; session 2 (a new agent on
the same HERMES_HOME) sees the memory and the skill in its system prompt, finds the fact
with session_search, and its own prompt stays byte-stable while it writes more memory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_bootstrap import AIAgent
from hermes_core.messages import ToolMessage

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

TOOLSETS = ["memory", "skills", "session_search"]
SKILL = "---\nname: release\ndescription: Cut a release.\ncategory: ops\n---\n1. Tag.\n"


async def test_memory_skills_and_session_search_across_sessions(
    isolated_hermes_home: Path,
) -> None:
    first = ScriptedModel(
        [
            tool_calls(
                call(
                    "memory",
                    {"action": "add", "target": "user", "content": "Prefers tabs."},
                    id="m1",
                ),
                call(
                    "skill_manage",
                    {"action": "create", "name": "release", "content": SKILL},
                    id="s1",
                ),
            ),
            reply("Noted. The deploy codename is BLUEFIN."),
        ]
    )
    async with AIAgent(chat_model=first, enabled_toolsets=TOOLSETS) as agent:
        one = await agent.run_conversation("Remember I prefer tabs; codename is BLUEFIN.")
    assert one["completed"], one["error"]
    results = [json.loads(m["content"]) for m in one["messages"] if m["role"] == "tool"]
    assert results[0]["success"] is True and "error" not in results[1]
    assert "Prefers tabs." not in str(first.calls[0].messages[0].content)  # frozen snapshot

    second = ScriptedModel(
        [
            tool_calls(call("session_search", {"query": "BLUEFIN"}, id="q1")),
            tool_calls(
                call(
                    "memory",
                    {"action": "add", "target": "memory", "content": "Codename BLUEFIN."},
                    id="m2",
                )
            ),
            reply("The codename was BLUEFIN."),
        ]
    )
    async with AIAgent(chat_model=second, enabled_toolsets=TOOLSETS) as agent:
        two = await agent.run_conversation("What was the deploy codename?")
    assert two["final_response"] == "The codename was BLUEFIN."
    system = str(second.calls[0].messages[0].content)
    assert "Prefers tabs." in system  # the memory written in session 1
    assert "release: Cut a release." in system  # the skill written in session 1
    found = next(m for m in second.calls[1].messages if isinstance(m, ToolMessage))
    assert "BLUEFIN" in str(found.content) and one["session_id"] in str(found.content)
    prompts = {str(request.messages[0].content) for request in second.calls}
    assert len(prompts) == 1  # the memory write did not change this conversation's prompt
    assert (isolated_hermes_home / "memories" / "MEMORY.md").read_text().strip() == (
        "Codename BLUEFIN."
    )
