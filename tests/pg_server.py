"""A throwaway PostgreSQL server for tests, on loopback, started and stopped by the caller.

``running_postgres()`` runs ``initdb`` and ``pg_ctl`` from the installed PostgreSQL
(``PATH`` first, then ``/usr/lib/postgresql/*/bin``) in a fresh temporary directory and
yields a ``postgresql+asyncpg://`` URL to the database ``hermes_test``. It is plain
synchronous code so a session-scoped fixture can own it without an event loop.

PostgreSQL refuses to run as root and the test machines run as root (DESIGN.md §6), so
as root the server runs as an unprivileged system user, ``hermes-pg`` by default
(``HERMES_PG_USER`` overrides it). When that user does not exist it is created once with
``useradd --system --no-create-home --shell /usr/sbin/nologin``: a home-less account that
cannot log in and owns nothing outside the temporary directories, which is why a
dedicated account is used rather than ``nobody`` (``nobody`` must own no files).
Started by a non-root user, the server simply runs as that user.

Speed over durability: ``fsync``, ``synchronous_commit`` and ``full_page_writes`` are off,
``initdb --no-sync``; the data directory is deleted afterwards. Authentication is
``trust`` on 127.0.0.1 only, the Unix socket lives in the temporary directory, and the
port is a free one found by binding port 0.

Overlapping ``running_postgres()`` uses share one server (reference-counted), so test
modules that each own a session-scoped fixture start PostgreSQL once per test session.
Isolation per test is the caller's choice: :func:`fresh_database` (one ``CREATE
DATABASE``, about 0.1 s) for a test that needs a database nobody touched, or emptying the
tables between tests (what the contract suite does: one statement).

A missing PostgreSQL is an error, never a skip: a suite that silently skips its
PostgreSQL tests proves nothing about PostgreSQL.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

__all__ = [
    "PostgresNotInstalled",
    "PostgresServer",
    "database_url",
    "drop_database",
    "fresh_database",
    "running_postgres",
    "server",
]

DATABASE = "hermes_test"
DEFAULT_USER = "hermes-pg"
_START_ATTEMPTS = 3
"""A free port can be taken between finding it and the server binding it: retry."""
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "32MB",
    "max_wal_size": "1GB",
    "logging_collector": "off",
}


class PostgresNotInstalled(RuntimeError):
    """``initdb``/``pg_ctl`` were not found on this machine."""


@dataclass(frozen=True, slots=True)
class PostgresServer:
    """A running server: where it listens and who its superuser is."""

    host: str
    port: int
    user: str
    directory: Path

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the ``hermes_test`` database."""
        return database_url(self.user, self.host, self.port, DATABASE)


def database_url(user: str, host: str, port: int, database: str) -> str:
    return f"postgresql+asyncpg://{user}@{host}:{port}/{database}"


def _bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl`` (they must come from one install)."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    for candidate in reversed(candidates):
        if (Path(candidate).parent / "pg_ctl").exists():
            return Path(candidate).parent
    raise PostgresNotInstalled(
        "PostgreSQL is not installed: initdb/pg_ctl are neither on PATH nor in "
        "/usr/lib/postgresql/*/bin. Install the postgresql package "
        "(apt-get install postgresql) to run the PostgreSQL tests."
    )


def _server_user() -> str | None:
    """The account to run the server as, creating it if needed; ``None``: as ourselves."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("HERMES_PG_USER", DEFAULT_USER)
    try:
        pwd.getpwnam(name)
    except KeyError:
        created = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL refuses to run as root and the user {name!r} could not be "
                f"created ({created.stderr.strip()}); create it, or set HERMES_PG_USER to an "
                "existing unprivileged account"
            ) from None
    return name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _run(command: list[str], user: str | None, *, timeout: float = 60) -> None:
    """Run a PostgreSQL tool as ``user``; its output goes into the error when it fails."""
    full = ["runuser", "-u", user, "--", *command] if user is not None else command
    done = subprocess.run(full, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(full)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )


def _log_tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-4000:]
    except OSError:
        return "(no server log)"


@contextlib.contextmanager
def server() -> Iterator[PostgresServer]:
    """Start a throwaway server with a ``hermes_test`` database; stop and delete it after.

    Raises:
        PostgresNotInstalled: no PostgreSQL binaries on this machine.
        RuntimeError: initdb or the server start failed (the server log is included).
    """
    bin_dir = _bin_dir()
    user = _server_user()
    # Not pytest's tmp_path: that lives under a root-only directory the server user
    # could not enter. mkdtemp makes it 0700; the chown gives it to the server user.
    root = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
    try:
        data, log = root / "data", root / "server.log"
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        superuser = user or pwd.getpwuid(os.geteuid()).pw_name
        _run(
            [
                str(bin_dir / "initdb"),
                "--pgdata",
                str(data),
                "--username",
                superuser,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C.UTF-8",
                "--no-sync",
            ],
            user,
        )
        try:
            port = _start(bin_dir, data, log, root, user)
            _run(
                [
                    str(bin_dir / "createdb"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--username",
                    superuser,
                    DATABASE,
                ],
                user,
            )
            yield PostgresServer("127.0.0.1", port, superuser, root)
        finally:
            _stop(bin_dir, data, user)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _stop(bin_dir: Path, data: Path, user: str | None) -> None:
    """Stop the server at once if it runs; never raises, so a test's own error shows."""
    command = [str(bin_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w"]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    subprocess.run(command, capture_output=True, timeout=60, check=False)


def _start(bin_dir: Path, data: Path, log: Path, socket_dir: Path, user: str | None) -> int:
    """Start the server on a free port; return the port."""
    conf = data / "postgresql.conf"
    base = conf.read_text()
    error: RuntimeError | None = None
    for _ in range(_START_ATTEMPTS):
        port = _free_port()
        settings = {**_SETTINGS, "port": str(port), "unix_socket_directories": f"'{socket_dir}'"}
        conf.write_text(base + "".join(f"\n{k} = {v}" for k, v in settings.items()) + "\n")
        try:
            _run(
                [
                    str(bin_dir / "pg_ctl"),
                    "start",
                    "-D",
                    str(data),
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    "60",
                ],
                user,
                timeout=90,
            )
            return port
        except RuntimeError as exc:
            error = RuntimeError(f"{exc}\nserver log:\n{_log_tail(log)}")
    assert error is not None
    raise error


_shared: PostgresServer | None = None
_shared_stack: contextlib.ExitStack | None = None
_shared_users = 0
_shared_lock = threading.Lock()


@contextlib.contextmanager
def running_postgres() -> Iterator[str]:
    """A throwaway server; yields the ``postgresql+asyncpg://`` URL of ``hermes_test``.

    Overlapping uses share one server, stopped when the last one exits: two test modules
    with their own session-scoped fixture pay for one ``initdb`` between them. Tests that
    need a database to themselves take one from :func:`fresh_database`.
    """
    global _shared, _shared_stack, _shared_users
    with _shared_lock:
        if _shared is None:
            stack = contextlib.ExitStack()
            _shared = stack.enter_context(server())
            _shared_stack = stack
        _shared_users += 1
        url = _shared.url
    try:
        yield url
    finally:
        with _shared_lock:
            _shared_users -= 1
            if not _shared_users and _shared_stack is not None:
                stack, _shared, _shared_stack = _shared_stack, None, None
                stack.close()


def _plain_dsn(url: str) -> str:
    """The asyncpg DSN of a SQLAlchemy ``postgresql+asyncpg://`` URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def _with_database(url: str, database: str) -> str:
    head, _, _ = url.rpartition("/")
    return f"{head}/{database}"


async def fresh_database(url: str, *, template: str | None = None) -> str:
    """Create a new, uniquely named database on ``url``'s server; return its URL.

    For a test that needs a database nobody else touched (schema creation, read-only
    refusal). It is left in place: the whole server is deleted at the end of the session.
    ``template`` copies an existing database (it must have no connections).
    """
    name = f"hermes_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(_plain_dsn(_with_database(url, "postgres")))
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await conn.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await conn.close()
    return _with_database(url, name)


async def drop_database(url: str) -> None:
    """Drop the database of ``url``, disconnecting whoever is still on it."""
    name = url.rpartition("/")[2]
    conn = await asyncpg.connect(_plain_dsn(_with_database(url, "postgres")))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
