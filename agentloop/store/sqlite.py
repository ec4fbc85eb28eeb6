"""SQLite backend: the embedded default for one worker machine.

sqlite3 is synchronous; calls go through a single worker thread so the event loop never blocks
and the connection is only ever used from one thread. Several processes may share the file
(WAL, busy timeout).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentloop.store.artifacts import artifact_key
from agentloop.store.base import node_rows, order_chain

# `parent` comes last: files written before it existed get it by ALTER TABLE (see _migrate).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    key TEXT PRIMARY KEY, body TEXT NOT NULL, parent TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS artifacts (
    key TEXT PRIMARY KEY, media_type TEXT NOT NULL, data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS start_nonces (
    nonce TEXT PRIMARY KEY, run TEXT NOT NULL, keep_until REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS start_nonces_keep_until ON start_nonces (keep_until);
"""

# The chain from a head back to the root in one query; UNION (not UNION ALL) ends even on a
# corrupt cycle. order_chain puts the rows in order and names a missing node.
_CHAIN = """
WITH RECURSIVE chain(key, parent, body) AS (
    SELECT key, parent, body FROM nodes WHERE key = ?
    UNION
    SELECT n.key, n.parent, n.body FROM nodes AS n JOIN chain AS c ON n.key = c.parent
)
SELECT key, parent, body FROM chain
"""

_RESEAL_ARTIFACT = (
    " ON CONFLICT (key) DO UPDATE SET data = excluded.data, media_type = excluded.media_type"
    " WHERE artifacts.media_type <> excluded.media_type"
)


class SqliteStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._conn = self._executor.submit(self._connect).result()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # Several worker processes may share the file: wait for a writer instead of failing.
        conn.execute("PRAGMA busy_timeout=10000")
        conn.executescript(_SCHEMA)
        _migrate(conn)
        return conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def put_nodes(self, nodes: Sequence[tuple[str, str]]) -> None:
        await self.put_node_rows(node_rows(nodes))

    async def put_node_rows(
        self, rows: Sequence[tuple[str, str | None, str]], reseal: str | None = None
    ) -> None:
        if rows:
            await self._run(self._put_nodes, rows, reseal)

    def _put_nodes(self, rows: Sequence[tuple[str, str | None, str]], reseal: str | None) -> None:
        with _write(self._conn):
            if reseal is None:
                self._conn.executemany(
                    "INSERT INTO nodes (key, parent, body) VALUES (?, ?, ?)"
                    " ON CONFLICT (key) DO NOTHING",
                    rows,
                )
                return
            self._conn.executemany(
                "INSERT INTO nodes (key, parent, body) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET body = excluded.body"
                " WHERE substr(nodes.body, 1, length(?)) <> ?",
                [(*row, reseal, reseal) for row in rows],
            )

    async def get_node(self, key: str) -> str | None:
        result: str | None = await self._run(self._get_node, key)
        return result

    def _get_node(self, key: str) -> str | None:
        row = self._conn.execute("SELECT body FROM nodes WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    async def load_chain(self, head: str) -> list[tuple[str, str]]:
        if not head:
            return []
        rows: list[tuple[str, str | None, str]] = await self._run(self._chain_rows, head)
        return order_chain(head, rows)

    def _chain_rows(self, head: str) -> list[tuple[str, str | None, str]]:
        return [(str(k), p, str(b)) for k, p, b in self._conn.execute(_CHAIN, (head,))]

    async def put_artifact(self, data: bytes, media_type: str) -> str:
        key = artifact_key(data)
        await self.put_artifact_row(key, data, media_type)
        return key

    async def put_artifact_row(
        self, key: str, data: bytes, media_type: str, reseal: bool = False
    ) -> None:
        await self._run(self._put_artifact, key, bytes(data), media_type, reseal)

    def _put_artifact(self, key: str, data: bytes, media_type: str, reseal: bool) -> None:
        with _write(self._conn):
            self._conn.execute(
                "INSERT INTO artifacts (key, media_type, data) VALUES (?, ?, ?)"
                + (_RESEAL_ARTIFACT if reseal else " ON CONFLICT (key) DO NOTHING"),
                (key, media_type, data),
            )

    async def get_artifact(self, key: str) -> tuple[bytes, str] | None:
        result: tuple[bytes, str] | None = await self._run(self._get_artifact, key)
        return result

    def _get_artifact(self, key: str) -> tuple[bytes, str] | None:
        row = self._conn.execute(
            "SELECT data, media_type FROM artifacts WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else (_blob(row[0]), str(row[1]))

    async def unsealed_nodes(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, str | None, str]]:
        query = (
            "SELECT key, parent, body FROM nodes WHERE key > ?"
            " AND substr(body, 1, length(?)) <> ? ORDER BY key LIMIT ?"
        )
        rows = await self._run(self._select, query, (after, marker, marker, limit))
        return [(str(k), p, str(b)) for k, p, b in rows]

    async def unsealed_artifacts(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, bytes, str]]:
        query = (
            "SELECT key, data, media_type FROM artifacts WHERE key > ?"
            " AND substr(media_type, 1, length(?)) <> ? ORDER BY key LIMIT ?"
        )
        rows = await self._run(self._select, query, (after, marker, marker, limit))
        return [(str(k), _blob(d), str(m)) for k, d, m in rows]

    def _select(self, query: str, parameters: tuple[object, ...]) -> list[tuple[Any, ...]]:
        return self._conn.execute(query, parameters).fetchall()

    async def claim_nonce(self, nonce: str, run: str, keep_until: datetime) -> bool:
        holder: str = await self._run(self._claim_nonce, nonce, run, keep_until.timestamp())
        return holder == run

    def _claim_nonce(self, nonce: str, run: str, keep_until: float) -> str:
        with _write(self._conn):
            now = datetime.now(UTC).timestamp()
            self._conn.execute("DELETE FROM start_nonces WHERE keep_until < ?", (now,))
            self._conn.execute(
                "INSERT INTO start_nonces (nonce, run, keep_until) VALUES (?, ?, ?)"
                " ON CONFLICT (nonce) DO NOTHING",
                (nonce, run, keep_until),
            )
            row = self._conn.execute(
                "SELECT run FROM start_nonces WHERE nonce = ?", (nonce,)
            ).fetchone()
        return str(row[0])

    async def close(self) -> None:
        await self._run(self._conn.close)
        self._executor.shutdown(wait=True)


def _blob(value: bytes | str) -> bytes:
    """An artifact's data as bytes: SQLite keeps whatever type was written to a column, and
    whoever writes the file behind the store's back may have written text."""
    return value.encode() if isinstance(value, str) else bytes(value)


@contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taking the write lock up front (`BEGIN IMMEDIATE`) so that
    waiting for another writer happens in busy_timeout, not in a failed lock upgrade."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _migrate(conn: sqlite3.Connection) -> None:
    """Give a file from before the `parent` column that column, filled from the bodies."""
    if _has_parent_column(conn):
        return
    with _write(conn):
        if not _has_parent_column(conn):  # another process may have done it meanwhile
            conn.execute("ALTER TABLE nodes ADD COLUMN parent TEXT")
            conn.execute("UPDATE nodes SET parent = json_extract(body, '$.parent')")


def _has_parent_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "parent" for row in conn.execute("PRAGMA table_info(nodes)"))
