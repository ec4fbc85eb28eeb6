"""SQLite access for the example service: one connection, WAL, every call serialized.

Handlers call this synchronously from the event loop. The statements are tiny (a primary-key
lookup or a single-row write on a local file), so a thread hop per query would cost more than
it saves, and running them on the loop makes each call atomic with respect to other requests.
The lock is only for in-process helpers that may be called from another thread.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

Params = Sequence[Any] | Mapping[str, Any]


class Database:
    """A serialized SQLite connection with just enough helpers for the domain modules."""

    def __init__(self, path: str | Path) -> None:
        # Autocommit (isolation_level=None): each statement commits on its own, and multi-step
        # work says so explicitly with `transaction()` instead of relying on implicit BEGINs.
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        # WAL + synchronous=NORMAL keeps a commit per request cheap, and lets a test open the
        # same file read-only while the service is running.
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.execute("PRAGMA foreign_keys=ON")

    def apply_schema(self, ddl: str) -> None:
        """Create tables idempotently; `ddl` must use `IF NOT EXISTS`."""
        with self._lock:
            self._conn.executescript(ddl)

    def execute(self, sql: str, params: Params = ()) -> int:
        """Run one write statement; returns the number of rows it changed."""
        with self._lock:
            return self._conn.execute(sql, params).rowcount

    def fetch_one(self, sql: str, params: Params = ()) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(sql, params).fetchone()
        return None if row is None else dict(row)

    def fetch_all(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [dict(row) for row in rows]

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Several statements as one atomic unit (e.g. check-then-write with an idempotency key).

        BEGIN IMMEDIATE takes the write lock up front so two writers cannot both read
        "absent" and then both insert."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def open_database(path: str | Path, schemas: Iterable[str]) -> Database:
    """Open (creating if needed) the database and every domain's tables."""
    db = Database(path)
    try:
        for ddl in schemas:
            db.apply_schema(ddl)
    except BaseException:
        db.close()
        raise
    return db


DB_KEY = web.AppKey("example_service.db", Database)
