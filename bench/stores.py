"""Session store figures: append throughput, full-text search latency, resume time.

These price what an agent host does with a store besides the model calls: every round
appends its new messages (single appends and batched ones), a user searches past
sessions, and ``--resume`` loads a long session back. All figures go through the stores'
public API (``append_message``, ``append_messages``, ``search_messages``,
``get_conversation``/``get_resume_conversations``), on a fresh database in a temporary
directory, so they include the aiosqlite thread hop or the asyncpg round trip.

Building the search corpus is *setup*, not a measurement. For SQLite it goes through
the store's own row encoding and ``INSERT`` statement on a plain ``sqlite3`` connection
(same rows, ~10x faster than 1M awaited appends), then indexes them with the store's own
catch-up SQL (``_sqlite_fts.CATCH_UP``), so the corpus is fully indexed as a store would
leave it; for PostgreSQL it uses ``append_messages`` in batches of 1,000. The 1M-message
corpus takes minutes to build (both FTS5 indexes, unicode61 and trigram), which is why it
is only built with ``--full``.

SQLite appends do not index (the store indexes in batches later: after writes go quiet,
before a search, or on ``index_pending()``), so the append rates leave that cost out. The
``fts_catch_up_msgs_per_s`` figure puts it back: the time ``index_pending()`` takes to
index the rows of the batched-append phase, right after it.

The corpus is synthetic but shaped like chat: a Zipf-distributed vocabulary of 20,000
made-up words, user / assistant-with-tool-call / tool-result / assistant rows in turn, 100
messages a session. Queries come in four classes, so a figure cannot hide a cliff:
``frequent`` (one word of rank 20-200: tens of thousands of matches at 1M), ``mid`` (rank
200-2,000), ``rare`` (rank 2,000-20,000) and ``two_words`` (two mid words). p50/p95 are
over the mix, and per class in the JSON.
"""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hermes_core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ["CACHE_DIR", "Corpus", "StoreConfig", "postgres_figures", "sqlite_figures"]

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "ba",
    "de",
    "fi",
    "gu",
    "ha",
    "je",
    "ko",
    "lu",
    "ma",
    "no",
    "pe",
    "qui",
    "ra",
    "se",
    "to",
    "ve",
    "wa",
    "xo",
    "ya",
    "zu",
    "an",
    "el",
    "in",
    "or",
]
_SESSION_SIZE = 100
_CORPUS_VERSION = "1"
"""Bump when :class:`Corpus` changes, so cached corpora are rebuilt."""
CACHE_DIR = Path(__file__).resolve().parent / "results" / "cache"
_QUERY_CLASSES: dict[str, tuple[int, int, int]] = {
    # name: (lowest rank, highest rank, words per query)
    "frequent": (20, 200, 1),
    "mid": (200, 2_000, 1),
    "rare": (2_000, 20_000, 1),
    "two_words": (200, 2_000, 2),
}


class _Store(Protocol):
    async def create_session(self, session_id: str, source: str, **fields: Any) -> str: ...
    async def append_message(self, session_id: str, message: Message) -> int: ...
    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]: ...
    async def search_messages(self, query: str, *, limit: int = 20) -> list[Any]: ...
    async def get_conversation(self, session_id: str) -> list[Message]: ...
    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]: ...
    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Sizes of the store benchmark (``--quick`` and ``--full`` pick other ones)."""

    single_appends: int = 2_000
    batched_appends: int = 20_000
    batch_size: int = 100
    fts_sizes: tuple[int, ...] = (100_000,)
    queries: int = 200
    resume_messages: int = 10_000
    resume_repeats: int = 5
    append_seconds: float = 3.0
    cache: bool = True
    """Reuse a search corpus built by an earlier run (bench/results/cache/), same schema."""


def _word(index: int) -> str:
    """A unique made-up word for vocabulary rank ``index`` (letters only: one FTS token)."""
    base = len(_SYLLABLES)
    parts = [_SYLLABLES[index % base]]
    index //= base
    while index:
        parts.append(_SYLLABLES[index % base])
        index //= base
    if len(parts) == 1:
        parts.append("x")
    return "".join(parts)


class Corpus:
    """Deterministic chat-shaped messages over a Zipf vocabulary (see the module doc)."""

    def __init__(self, seed: int = 7, vocabulary: int = 20_000) -> None:
        self.words = [_word(i) for i in range(vocabulary)]
        self._cum = list(itertools.accumulate(1 / (rank + 1) ** 1.07 for rank in range(vocabulary)))
        self._seed = seed

    def _text(self, rng: random.Random, low: int, high: int) -> str:
        count = rng.randint(low, high)
        return " ".join(rng.choices(self.words, cum_weights=self._cum, k=count))

    def message(self, rng: random.Random, index: int) -> Message:
        """Message ``index`` of a session: user, tool call, tool result, answer, repeat."""
        kind = index % 4
        if kind == 0:
            return UserMessage(content=self._text(rng, 10, 40))
        call = f"call_{index:06d}"
        if kind == 1:
            args = json.dumps({"query": self._text(rng, 2, 5)})
            return AssistantMessage(
                content=self._text(rng, 3, 12),
                tool_calls=(
                    ToolCall(id=f"call_{index + 1:06d}", name="web_search", arguments=args),
                ),
                finish_reason="tool_calls",
            )
        if kind == 2:
            result = json.dumps({"results": self._text(rng, 20, 60)})
            return ToolMessage(tool_call_id=call, name="web_search", content=result)
        return AssistantMessage(content=self._text(rng, 20, 80), finish_reason="stop")

    def session(self, number: int, size: int = _SESSION_SIZE) -> list[Message]:
        """Session ``number`` of the corpus: always the same messages for the same number."""
        rng = random.Random(self._seed * 1_000_003 + number)
        return [self.message(rng, i) for i in range(size)]

    def queries(self, count: int, seed: int = 11) -> list[tuple[str, str]]:
        """``count`` (class, query) pairs, the classes taking turns."""
        rng = random.Random(seed)
        names = list(_QUERY_CLASSES)
        out: list[tuple[str, str]] = []
        for i in range(count):
            name = names[i % len(names)]
            low, high, words = _QUERY_CLASSES[name]
            out.append((name, " ".join(self.words[rng.randrange(low, high)] for _ in range(words))))
        return out


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    at = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[at]


async def _timed(action: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await action()
    return (time.perf_counter() - started) * 1000


async def _appends(
    store: _Store,
    corpus: Corpus,
    config: StoreConfig,
    catch_up: Callable[[], Awaitable[tuple[int, float]]] | None = None,
) -> dict[str, Any]:
    """Single appends (one transaction each), batched ones and agent-round-sized ones.

    Each is time-boxed (``config.append_seconds``) so a slow disk cannot blow the budget;
    the rate is messages appended over the time it took. ``catch_up`` (a store that defers
    full-text indexing) indexes what is pending and returns (rows, seconds): it runs
    untimed before the batched phase and timed right after it.
    """
    messages = list(_stream_messages(corpus, config.batched_appends, first_session=20_000))

    async def rate(session_id: str, size: int, limit: int) -> float:
        return await _append_rate(store, session_id, messages[:limit], size, config)

    out: dict[str, Any] = {
        "append_single_msgs_per_s": await rate("bench-single", 1, config.single_appends)
    }
    if catch_up is not None:
        await catch_up()  # the single appends' rows, so the timed catch-up is the batch's
    out["append_batched_msgs_per_s"] = await rate(
        "bench-batched", config.batch_size, config.batched_appends
    )
    out["append_batch_size"] = config.batch_size
    if catch_up is not None:
        rows, seconds = await catch_up()
        out["fts_catch_up_rows"] = rows
        out["fts_catch_up_msgs_per_s"] = rows / seconds if seconds > 0 else float("nan")
    # One agent round flushes a handful of messages (assistant + tool results).
    out["append_round_of_4_msgs_per_s"] = await rate("bench-round", 4, config.batched_appends)
    return out


async def _append_rate(
    store: _Store, session_id: str, messages: Sequence[Message], size: int, config: StoreConfig
) -> float:
    """Messages per second appended to a new session ``size`` at a time (one per call for
    1), time-boxed by ``config.append_seconds``."""
    await store.create_session(session_id, "bench")
    count = 0
    started = time.perf_counter()
    stop = started + config.append_seconds
    while count < len(messages) and time.perf_counter() < stop:
        chunk = messages[count : count + size]
        if size == 1:
            await store.append_message(session_id, chunk[0])
        else:
            await store.append_messages(session_id, chunk)
        count += len(chunk)
    return count / (time.perf_counter() - started)


def _stream_messages(corpus: Corpus, count: int, *, first_session: int = 0) -> Iterator[Message]:
    produced = 0
    for number in itertools.count(first_session):
        for message in corpus.session(number):
            if produced == count:
                return
            produced += 1
            yield message


async def _search(store: _Store, corpus: Corpus, queries: int) -> dict[str, Any]:
    pairs = corpus.queries(queries)
    for _, query in pairs[:10]:  # warm the page cache and the statement cache
        await store.search_messages(query, limit=20)
    timings: dict[str, list[float]] = {name: [] for name in _QUERY_CLASSES}
    hits: dict[str, list[int]] = {name: [] for name in _QUERY_CLASSES}
    for name, query in pairs:
        started = time.perf_counter()
        found = await store.search_messages(query, limit=20)
        timings[name].append((time.perf_counter() - started) * 1000)
        hits[name].append(len(found))
    every = [t for values in timings.values() for t in values]
    return {
        "queries": len(every),
        "p50_ms": _percentile(every, 0.5),
        "p95_ms": _percentile(every, 0.95),
        "classes": {
            name: {
                "p50_ms": _percentile(values, 0.5),
                "p95_ms": _percentile(values, 0.95),
                "mean_hits": statistics.fmean(hits[name]) if hits[name] else 0.0,
            }
            for name, values in timings.items()
        },
    }


async def _resume(
    open_store: Callable[[], _Store], session_id: str, repeats: int
) -> dict[str, Any]:
    """Resume = what a host does on ``--resume``: open the store, load the transcript."""
    from hermes_core.invariants import repair

    cold: list[float] = []
    warm: list[float] = []
    display: list[float] = []
    count = 0
    for _ in range(repeats):
        store = open_store()
        try:
            started = time.perf_counter()
            messages = repair(await store.get_conversation(session_id))
            cold.append((time.perf_counter() - started) * 1000)
            count = len(messages)
            started = time.perf_counter()
            repair(await store.get_conversation(session_id))
            warm.append((time.perf_counter() - started) * 1000)
            display.append(await _timed(lambda s=store: s.get_resume_conversations(session_id)))
        finally:
            await store.close()
    return {
        "messages": count,
        "cold_ms": statistics.median(cold),
        "warm_ms": statistics.median(warm),
        "resume_conversations_ms": statistics.median(display),
    }


# -- SQLite -------------------------------------------------------------------------------


def _schema_tag() -> str:
    """A short hash of the SQLite schema and indexing modules: a cached corpus is reused
    only as built."""
    import hashlib
    import inspect

    from hermes_adapters.sessions import _sqlite_fts, _sqlite_schema

    source = b"".join(inspect.getsource(m).encode() for m in (_sqlite_schema, _sqlite_fts))
    return hashlib.sha256(source + _CORPUS_VERSION.encode()).hexdigest()[:12]


async def _create_schema(path: Path) -> None:
    from hermes_adapters.sessions.sqlite import SQLiteSessionStore

    store = SQLiteSessionStore(path)
    try:
        await store.get_session("bench-probe")  # first use creates the schema
    finally:
        await store.close()


def _bulk_sqlite(path: Path, sessions: Iterable[tuple[str, list[Message]]]) -> None:
    """Fill ``path`` (schema already created by the store) through the store's encoding.

    Rows go in with the store's ``INSERT``; nothing indexes them on insert (the store
    defers that), so they are indexed at the end, in one transaction, by the store's own
    catch-up SQL, which also moves the watermark: the file is left exactly as a store
    that had caught up would leave it.
    """
    from hermes_adapters.sessions._sqlite_fts import CATCH_UP
    from hermes_adapters.sessions._sqlite_schema import INSERT_MESSAGE, encode_message

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = wal")
        conn.execute("PRAGMA synchronous = normal")
        now = time.time() - 10_000_000.0
        for sid, messages in sessions:
            conn.execute("BEGIN")
            conn.execute(
                "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, 'bench', ?)",
                (sid, now),
            )
            rows = [
                encode_message(message).params(sid, now + i * 1e-3)
                for i, message in enumerate(messages)
            ]
            conn.executemany(INSERT_MESSAGE, rows)
            conn.execute(
                "UPDATE sessions SET message_count = message_count + ? WHERE id = ?",
                (len(rows), sid),
            )
            conn.execute("COMMIT")
            now += 10.0
        conn.execute("BEGIN IMMEDIATE")
        low, high = _sqlite_pending(conn)
        for statement in CATCH_UP:
            conn.execute(statement, {"low": low, "high": high})
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _sqlite_pending(conn: sqlite3.Connection) -> tuple[int, int]:
    """(full-text watermark, highest message id) of an open database."""
    from hermes_adapters.sessions._sqlite_schema import FTS_WATERMARK

    (watermark,) = conn.execute(
        "SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = ?", (FTS_WATERMARK,)
    ).fetchone()
    (top,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()
    return int(watermark), int(top)


def _sqlite_backlog(path: Path) -> int:
    """Rows not indexed yet, read from the file as another process would."""
    conn = sqlite3.connect(path)
    try:
        watermark, _ = _sqlite_pending(conn)
        (rows,) = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE id > ?", (watermark,)
        ).fetchone()
        return int(rows)
    finally:
        conn.close()


async def _fts_corpus(
    root: Path, size: int, corpus: Corpus, config: StoreConfig, log: Callable[[str], None]
) -> tuple[Path, float | None]:
    """A database of ``size`` messages; from the cache when allowed. (path, build seconds)."""
    cache_dir = CACHE_DIR if config.cache else root
    path = cache_dir / f"sqlite-fts-{size}-{_schema_tag()}.db"
    if config.cache and path.exists():
        return path, None
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    for stale in cache_dir.glob(f"{partial.name}*"):
        stale.unlink()
    log(f"  sqlite: building a {size:,}-message search corpus (cached for later runs)")
    started = time.perf_counter()
    await _create_schema(partial)
    _bulk_sqlite(
        partial,
        ((f"corpus-{n:07d}", corpus.session(n)) for n in range(size // _SESSION_SIZE)),
    )
    for leftover in cache_dir.glob(f"{partial.name}-*"):
        leftover.unlink()
    partial.rename(path)
    return path, time.perf_counter() - started


async def sqlite_figures(
    config: StoreConfig, *, workdir: Path | None = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Every SQLite figure, each on its own database file."""
    from hermes_adapters.sessions.sqlite import SQLiteSessionStore

    corpus = Corpus()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="hermes-bench-", dir=workdir) as tmp:
        root = Path(tmp)
        append_path = root / "append.db"
        store = SQLiteSessionStore(append_path)

        async def catch_up() -> tuple[int, float]:
            # Counted from the file: the store's background indexer may index some of
            # these rows while index_pending() runs, and that work is in the time too.
            rows = _sqlite_backlog(append_path)
            started = time.perf_counter()
            await store.index_pending()
            return rows, time.perf_counter() - started

        try:
            out.update(await _appends(store, corpus, config, catch_up))
        finally:
            await store.close()
        # The same batched appends with synchronous=normal (opt-in: no fsync per commit).
        relaxed = SQLiteSessionStore(root / "append-normal.db", synchronous="normal")
        try:
            messages = list(_stream_messages(corpus, config.batched_appends, first_session=20_000))
            out["append_batched_normal_msgs_per_s"] = await _append_rate(
                relaxed, "bench-batched", messages, config.batch_size, config
            )
        finally:
            await relaxed.close()

        resume_path = root / "resume.db"
        await _create_schema(resume_path)
        long = corpus.session(30_000, config.resume_messages)
        _bulk_sqlite(resume_path, [("bench-resume", long)])
        out["resume"] = await _resume(
            lambda: SQLiteSessionStore(resume_path), "bench-resume", config.resume_repeats
        )

        out["fts"] = {}
        for size in sorted(config.fts_sizes):
            path, build_s = await _fts_corpus(root, size, corpus, config, log)
            store = SQLiteSessionStore(path)
            try:
                result = await _search(store, corpus, config.queries)
            finally:
                await store.close()
            result["build_s"] = build_s
            result["cached"] = build_s is None
            result["db_mb"] = path.stat().st_size / 2**20
            out["fts"][str(size)] = result
    return out


# -- PostgreSQL ---------------------------------------------------------------------------


async def _fresh_pg_database(url: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    """A new database on ``url``'s server (dropped afterwards), so no user data is touched."""
    import uuid

    import asyncpg

    plain = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    head, _, _ = plain.rpartition("/")
    name = f"hermes_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(f"{head}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()

    async def drop() -> None:
        conn = await asyncpg.connect(f"{head}/postgres")
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    return f"{url.rpartition('/')[0]}/{name}", drop


async def postgres_figures(
    url: str, config: StoreConfig, *, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """The same figures on PostgreSQL, in a throwaway database on ``url``'s server."""
    from hermes_adapters.sessions.postgres import PostgresSessionStore

    corpus = Corpus()
    database, drop = await _fresh_pg_database(url)
    out: dict[str, Any] = {}
    try:
        store = PostgresSessionStore(database)
        try:
            out.update(await _appends(store, corpus, config))
            await store.create_session("bench-resume", "bench")
            messages = corpus.session(30_000, config.resume_messages)
            for i in range(0, len(messages), 1_000):
                await store.append_messages("bench-resume", messages[i : i + 1_000])
        finally:
            await store.close()
        out["resume"] = await _resume(
            lambda: PostgresSessionStore(database), "bench-resume", config.resume_repeats
        )
        out["fts"] = {}
        built = 0
        for size in sorted(config.fts_sizes):
            store = PostgresSessionStore(database)
            try:
                started = time.perf_counter()
                for number in range(built, size // _SESSION_SIZE):
                    sid = f"corpus-{number:07d}"
                    await store.create_session(sid, "bench")
                    await store.append_messages(sid, corpus.session(number))
                built = size // _SESSION_SIZE
                build_s = time.perf_counter() - started
                log(f"  postgres: {size:,} messages stored in {build_s:.1f} s; searching")
                result = await _search(store, corpus, config.queries)
            finally:
                await store.close()
            result["build_s"] = build_s
            out["fts"][str(size)] = result
    finally:
        await drop()
    return out
