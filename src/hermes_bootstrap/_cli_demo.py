"""``hermes demo``: the offline run behind ``make demo``.

A fresh clone must show the real loop (planned tool calls, real file and terminal tools,
SQLite persistence, a trajectory) with no network and no key; the output format is what
the README shows, so it changes only on purpose.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import anyio

from hermes_adapters.sessions.sqlite import SQLiteSessionStore
from hermes_adapters.trajectories.jsonl import JsonlTrajectorySink
from hermes_bootstrap._cli_common import Subcommands
from hermes_bootstrap.demo import DEMO_PROMPT
from hermes_bootstrap.facade import AIAgent
from hermes_core.events import ToolFinished, ToolStarted, TurnEvent

__all__ = ["register"]


def _print_event(event: TurnEvent) -> None:
    if isinstance(event, ToolStarted):
        print(f"  -> {event.name} ({event.call_id})")
    elif isinstance(event, ToolFinished):
        status = "error" if event.is_error else "ok"
        print(f"  <- {event.name} {status} in {event.duration * 1000:.1f} ms")


async def _demo(args: argparse.Namespace) -> int:
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="hermes-demo-"))
    workspace = home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    db_path = home / "state.db"
    print(f"HERMES_HOME: {home}")
    print(f"You: {DEMO_PROMPT}\n")
    async with SQLiteSessionStore(db_path) as store:
        agent = AIAgent(
            provider="scripted",
            enabled_toolsets=["file", "terminal"],
            session_db=store,
            save_trajectories=True,
            trajectories=JsonlTrajectorySink(home),
            workspace=workspace,
            on_event=_print_event,
            home=home,
        )
        async with agent:
            result = await agent.run_conversation(DEMO_PROMPT)
        messages = await store.get_messages(str(result["session_id"]))
    print(f"\nHermes: {result['final_response']}\n")
    print(f"turn: {result['turn_exit_reason']}, {result['api_calls']} model calls")
    print(f"transcript: {len(messages)} messages in {db_path} (session {result['session_id']})")
    print(f"trajectory: {home / 'trajectory_samples.jsonl'}")
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "messages"}, default=str))
    return 0 if result["completed"] else 1


def _run(args: argparse.Namespace) -> int:
    return int(anyio.run(_demo, args))


def register(commands: Subcommands) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the offline scripted demo end to end",
        description="Run the offline scripted demo: a planner model writes and runs a script "
        "with the real file and terminal tools, persisted to SQLite.",
    )
    demo.add_argument("--home", help="HERMES_HOME to use (default: a new temporary folder)")
    demo.add_argument("--json", action="store_true", help="also print the result as JSON")
    demo.set_defaults(handler=_run)
