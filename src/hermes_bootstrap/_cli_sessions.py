"""``hermes sessions``: list, read, search, export and delete stored conversations.

Works on any store the ``SessionDB`` switch opens (SQLite path, ``sqlite:///`` or
``postgresql+asyncpg://`` URL), by default the one ``hermes chat`` writes to. Ids accept a
unique prefix because full ids are long timestamps a person would rather not type. Reading
commands open the store read-only, so inspecting a live agent's database cannot disturb it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from hermes_bootstrap._cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    HermesArgumentParser,
    StoreTarget,
    Subcommands,
    comma_list,
    format_time,
    home_option,
    open_store,
    plain,
    positive_int,
    print_json,
    store_target,
)
from hermes_core.messages import AssistantMessage, ToolMessage, message_to_dict, text_of
from hermes_core.ports.sessions import SessionInfo, SessionStore, StoredMessage

__all__ = ["register"]

PREVIEW_CHARS = 400
ROLES = ("user", "assistant", "tool", "system")


def session_dict(info: SessionInfo, *, with_prompt: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = plain(info)
    if not with_prompt:
        data.pop("system_prompt", None)
    return data


async def _resolve(store: SessionStore | None, wanted: str) -> str:
    found = await store.resolve_session_id(wanted) if store is not None else None
    if found is None:
        raise CliError(f"no single session matches {wanted!r} (unknown id, or a prefix of several)")
    return found


# -- list --------------------------------------------------------------------------------


async def _list(target: StoreTarget, args: argparse.Namespace) -> list[SessionInfo]:
    async with open_store(target, read_only=True) as store:
        if store is None:
            return []
        return await store.search_sessions(source=args.source, limit=args.limit)


def _run_list(args: argparse.Namespace) -> int:
    target = store_target(args.db, args.home)
    infos = anyio.run(_list, target, args)
    if args.json:
        print_json([session_dict(i, with_prompt=False) for i in infos])
        return EXIT_OK
    if not infos:
        print(f"no sessions in {target.display}", file=sys.stderr)
        return EXIT_OK
    print(f"{'ID':<24} {'SOURCE':<10} {'MODEL':<20} {'MSGS':>5}  {'LAST ACTIVE':<16}  TITLE")
    for info in infos:
        print(
            f"{info.id:<24} {info.source:<10} {(info.model or '-')[:20]:<20} "
            f"{info.message_count:>5}  {format_time(info.last_active or info.started_at):<16}  "
            f"{info.title or ''}"
        )
    return EXIT_OK


# -- show --------------------------------------------------------------------------------


async def _fetch(target: StoreTarget, wanted: str) -> tuple[SessionInfo, list[StoredMessage]]:
    async with open_store(target, read_only=True) as store:
        session_id = await _resolve(store, wanted)
        assert store is not None
        info = await store.get_session(session_id)
        if info is None:  # deleted between the two calls
            raise CliError(f"session {session_id} no longer exists")
        return info, await store.get_messages(session_id)


def _clip(text: str, full: bool) -> str:
    if full or len(text) <= PREVIEW_CHARS:
        return text
    return text[:PREVIEW_CHARS] + f"... [{len(text) - PREVIEW_CHARS} more characters]"


def _print_transcript(messages: list[StoredMessage], full: bool) -> None:
    for stored in messages:
        message = stored.message
        if isinstance(message, AssistantMessage):
            if message.content:
                print(f"[assistant] {message.content}")
            for call in message.tool_calls:
                print(f"  -> {call.name} {_clip(call.arguments, full)}")
        elif isinstance(message, ToolMessage):
            status = " (error)" if message.is_error else ""
            label = message.name or message.tool_call_id
            print(f"  <- {label}{status} {_clip(text_of(message.content), full)}")
        else:
            print(f"[{message.role}] {_clip(text_of(message.content), full)}")


def _run_show(args: argparse.Namespace) -> int:
    target = store_target(args.db, args.home)
    info, messages = anyio.run(_fetch, target, args.id)
    if args.json:
        print_json(
            {
                "session": session_dict(info),
                "messages": [message_to_dict(m.message) for m in messages],
            }
        )
        return EXIT_OK
    usage = info.usage
    print(f"session   {info.id}")
    print(f"source    {info.source}    model {info.model or '-'}")
    print(f"started   {format_time(info.started_at)}    ended {format_time(info.ended_at)}")
    if info.title:
        print(f"title     {info.title}")
    if info.parent_session_id:
        print(f"parent    {info.parent_session_id}")
    print(
        f"counts    {info.message_count} messages, {info.tool_call_count} tool calls, "
        f"{info.api_call_count} model calls, {usage.total_tokens} tokens "
        f"({usage.prompt_tokens} in, {usage.output_tokens} out)"
    )
    print()
    _print_transcript(messages, args.full)
    return EXIT_OK


# -- search ------------------------------------------------------------------------------


async def _search(target: StoreTarget, args: argparse.Namespace) -> list[Any]:
    async with open_store(target, read_only=True) as store:
        if store is None:
            return []
        return await store.search_messages(
            args.query,
            role_filter=args.role,
            source_filter=[args.source] if args.source else None,
            limit=args.limit,
        )


def _run_search(args: argparse.Namespace) -> int:
    unknown = [r for r in args.role or () if r not in ROLES]
    if unknown:
        raise CliError(f"unknown role(s) {', '.join(unknown)}; use {', '.join(ROLES)}", EXIT_USAGE)
    target = store_target(args.db, args.home)
    hits = anyio.run(_search, target, args)
    if args.json:
        print_json(plain(hits))
        return EXIT_OK
    if not hits:
        print(f"no message matches {args.query!r}", file=sys.stderr)
        return EXIT_OK
    for hit in hits:
        snippet = " ".join(hit.snippet.split())
        print(f"{hit.session_id}  {format_time(hit.timestamp)}  [{hit.role}] {snippet}")
    return EXIT_OK


# -- export ------------------------------------------------------------------------------


def _run_export(args: argparse.Namespace) -> int:
    target = store_target(args.db, args.home)
    info, messages = anyio.run(_fetch, target, args.id)
    record = {**session_dict(info), "messages": [message_to_dict(m.message) for m in messages]}
    if args.format == "json":
        text = json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n"
    else:
        text = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(
            f"exported session {info.id} ({len(messages)} messages) to {args.output}",
            file=sys.stderr,
        )
    return EXIT_OK


# -- delete ------------------------------------------------------------------------------


async def _delete(target: StoreTarget, session_id: str) -> bool:
    async with open_store(target, read_only=False) as store:
        return store is not None and await store.delete_session(session_id)


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise CliError("refusing to delete without confirmation; pass --yes", EXIT_USAGE)
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in {"y", "yes"}


def _run_delete(args: argparse.Namespace) -> int:
    target = store_target(args.db, args.home)
    info, messages = anyio.run(_fetch, target, args.id)
    if not args.yes and not _confirm(
        f"Delete session {info.id} ({len(messages)} messages, {format_time(info.started_at)})?"
    ):
        print("not deleted", file=sys.stderr)
        return EXIT_FAILED
    if not anyio.run(_delete, target, info.id):
        raise CliError(f"session {info.id} no longer exists")
    print(f"deleted session {info.id}")
    return EXIT_OK


# -- parser ------------------------------------------------------------------------------


def _store_options() -> HermesArgumentParser:
    parent = HermesArgumentParser(add_help=False)
    parent.add_argument(
        "--db",
        metavar="URL",
        help="store path or URL (default: config database.url, else $HERMES_HOME/state.db)",
    )
    home_option(parent)
    return parent


def register(commands: Subcommands) -> None:
    sessions = commands.add_parser(
        "sessions",
        help="list, show, search, export or delete stored sessions",
        description="Inspect the session store hermes chat writes to. IDs accept a unique prefix.",
    )
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = [_store_options()]

    listing = actions.add_parser(
        "list", parents=common, help="recent sessions, most recently active first"
    )
    listing.add_argument("--limit", type=positive_int, default=20, help="at most N (20)")
    listing.add_argument("--source", help="only sessions from this source (cli, batch, ...)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_run_list)

    show = actions.add_parser("show", parents=common, help="a session's details and transcript")
    show.add_argument("id", metavar="ID", help="session id or unique prefix")
    show.add_argument("--json", action="store_true", help="print JSON (session and messages)")
    show.add_argument("--full", action="store_true", help="do not shorten long tool output")
    show.set_defaults(handler=_run_show)

    search = actions.add_parser("search", parents=common, help="full-text search of messages")
    search.add_argument("query", metavar="QUERY", help="words to find")
    search.add_argument("--limit", type=positive_int, default=20, help="at most N hits (20)")
    search.add_argument(
        "--role", type=comma_list, metavar="R,S", help=f"only these roles ({', '.join(ROLES)})"
    )
    search.add_argument("--source", help="only sessions from this source")
    search.add_argument("--json", action="store_true", help="print JSON")
    search.set_defaults(handler=_run_search)

    export = actions.add_parser(
        "export", parents=common, help="a session and its messages as JSON or one JSONL line"
    )
    export.add_argument("id", metavar="ID", help="session id or unique prefix")
    export.add_argument(
        "--format",
        choices=("jsonl", "json"),
        default="jsonl",
        help="jsonl: one line per session, appendable (default); json: indented",
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    export.set_defaults(handler=_run_export)

    delete = actions.add_parser(
        "delete", parents=common, help="delete a session (and its delegate children)"
    )
    delete.add_argument("id", metavar="ID", help="session id or unique prefix")
    delete.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(handler=_run_delete)
