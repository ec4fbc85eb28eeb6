"""PostgreSQL backend: one store shared by several workers.

psycopg 3 (async) with a small connection pool. Nothing connects until the first call; that
call creates the tables if needed (under an advisory lock, so workers starting at once do not
trip over each other) and opens the pool. Writes are insert-or-ignore on content-addressed
keys (`ON CONFLICT DO NOTHING`), in key order, so concurrent writers of the same nodes neither
fail nor deadlock.

Connection failures raise `StoreUnavailable` (retryable), never `StoreError`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from agentloop.runtime.audit import mask_url
from agentloop.store.artifacts import artifact_key
from agentloop.store.base import StoreError, StoreUnavailable, node_rows, order_chain

# Table names are unqualified: they land in the first schema of the connection's search_path
# (`schema=` below, or `?options=-csearch_path%3D...` in the URL).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    key TEXT PRIMARY KEY, body TEXT NOT NULL, parent TEXT
);
CREATE TABLE IF NOT EXISTS artifacts (
    key TEXT PRIMARY KEY, media_type TEXT NOT NULL, data BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS start_nonces (
    nonce TEXT PRIMARY KEY, run TEXT NOT NULL, keep_until TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS start_nonces_keep_until ON start_nonces (keep_until);
"""
_SCHEMA_LOCK = 0x6167656E746C6F6F  # "agentloo": serializes CREATE TABLE IF NOT EXISTS

_CHAIN = """
WITH RECURSIVE chain(key, parent, body) AS (
    SELECT key, parent, body FROM nodes WHERE key = %s
    UNION
    SELECT n.key, n.parent, n.body FROM nodes AS n JOIN chain AS c ON n.key = c.parent
)
SELECT key, parent, body FROM chain
"""

_RESEAL_ARTIFACT = (
    " ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data, media_type = EXCLUDED.media_type"
    " WHERE artifacts.media_type <> EXCLUDED.media_type"
)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def with_search_path(url: str, schema: str) -> str:
    """`url` putting the tables in `schema` (an existing one): `schema=` as a store URL
    carries it, for a worker configured by `AGENTLOOP_STORE_URL`."""
    if not _IDENTIFIER.match(schema):
        raise ValueError(f"not a plain schema name: {schema!r}")
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


class PostgresStore:
    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 4,
        connect_timeout: int = 10,
    ) -> None:
        """`url`: a libpq URL (`postgresql://` or `postgres://`). `schema`: put the tables in
        this (existing) schema instead of the URL's search_path."""
        self.url = url
        self._masked = mask_url(url)
        self._min_size = min_size
        self._max_size = max_size
        try:
            given = conninfo_to_dict(url)
        except psycopg.ProgrammingError:
            # The parser's message may quote the password: name the masked URL only.
            raise StoreError(f"invalid PostgreSQL URL {self._masked}") from None
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in given:
            self._kwargs["connect_timeout"] = connect_timeout
        if "application_name" not in given:
            self._kwargs["application_name"] = "agentloop-store"
        if schema is not None:
            if not _IDENTIFIER.match(schema):
                raise ValueError(f"not a plain schema name: {schema!r}")
            self._kwargs["options"] = f"-c search_path={schema}"
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore({self._masked!r})"

    async def _ensure_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._pool is None:
                # One plain connection first: fails fast with the server's own message when
                # PostgreSQL is down (a pool would keep retrying in the background).
                try:
                    await self._create_tables()
                except psycopg.OperationalError as exc:
                    raise self._unavailable(exc) from exc
                pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                    self.url,
                    kwargs=self._kwargs,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    open=False,
                    name="agentloop-store",
                )
                await pool.open()
                if self._closed:  # closed while this first call was connecting
                    await pool.close()
                    raise RuntimeError(f"{self!r} is closed")
                self._pool = pool
        return self._pool

    async def _create_tables(self) -> None:
        connect = psycopg.AsyncConnection.connect(self.url, **self._kwargs)
        async with await connect as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            await conn.execute(_SCHEMA)

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        reason = str(exc).strip() or type(exc).__name__
        return StoreUnavailable(f"PostgreSQL store at {self._masked} is unreachable: {reason}")

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = await self._ensure_pool()
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:  # PoolTimeout included
            raise self._unavailable(exc) from exc

    async def put_nodes(self, nodes: Sequence[tuple[str, str]]) -> None:
        await self.put_node_rows(node_rows(nodes))

    async def put_node_rows(
        self, rows: Sequence[tuple[str, str | None, str]], reseal: str | None = None
    ) -> None:
        if not rows:
            return
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            if reseal is None:
                await cur.executemany(
                    "INSERT INTO nodes (key, parent, body) VALUES (%s, %s, %s)"
                    " ON CONFLICT (key) DO NOTHING",
                    rows,
                )
                return
            await cur.executemany(
                "INSERT INTO nodes (key, parent, body) VALUES (%s, %s, %s)"
                " ON CONFLICT (key) DO UPDATE SET body = EXCLUDED.body"
                " WHERE left(nodes.body, length(%s)) <> %s",
                [(*row, reseal, reseal) for row in rows],
            )

    async def get_node(self, key: str) -> str | None:
        async with self._connection() as conn:
            cur = await conn.execute("SELECT body FROM nodes WHERE key = %s", (key,))
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def load_chain(self, head: str) -> list[tuple[str, str]]:
        if not head:
            return []
        async with self._connection() as conn:
            cur = await conn.execute(_CHAIN, (head,))
            rows = [(str(k), p, str(b)) for k, p, b in await cur.fetchall()]
        return order_chain(head, rows)

    async def put_artifact(self, data: bytes, media_type: str) -> str:
        key = artifact_key(data)
        await self.put_artifact_row(key, data, media_type)
        return key

    async def put_artifact_row(
        self, key: str, data: bytes, media_type: str, reseal: bool = False
    ) -> None:
        async with self._connection() as conn:
            await conn.execute(
                "INSERT INTO artifacts (key, media_type, data) VALUES (%s, %s, %s)"
                + (_RESEAL_ARTIFACT if reseal else " ON CONFLICT (key) DO NOTHING"),
                (key, media_type, bytes(data)),
            )

    async def get_artifact(self, key: str) -> tuple[bytes, str] | None:
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT data, media_type FROM artifacts WHERE key = %s", (key,)
            )
            row = await cur.fetchone()
        return None if row is None else (bytes(row[0]), str(row[1]))

    async def unsealed_nodes(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, str | None, str]]:
        query = (
            "SELECT key, parent, body FROM nodes WHERE key > %s"
            " AND left(body, length(%s)) <> %s ORDER BY key LIMIT %s"
        )
        rows = await self._select(query, (after, marker, marker, limit))
        return [(str(k), p, str(b)) for k, p, b in rows]

    async def unsealed_artifacts(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, bytes, str]]:
        query = (
            "SELECT key, data, media_type FROM artifacts WHERE key > %s"
            " AND left(media_type, length(%s)) <> %s ORDER BY key LIMIT %s"
        )
        rows = await self._select(query, (after, marker, marker, limit))
        return [(str(k), bytes(d), str(m)) for k, d, m in rows]

    async def claim_nonce(self, nonce: str, run: str, keep_until: datetime) -> bool:
        # Read committed: an insert racing another of the same nonce waits for it to commit,
        # then the select sees the row that won.
        async with self._connection() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM start_nonces WHERE keep_until < %s", (datetime.now(UTC),)
            )
            await conn.execute(
                "INSERT INTO start_nonces (nonce, run, keep_until) VALUES (%s, %s, %s)"
                " ON CONFLICT (nonce) DO NOTHING",
                (nonce, run, keep_until),
            )
            cur = await conn.execute("SELECT run FROM start_nonces WHERE nonce = %s", (nonce,))
            row = await cur.fetchone()
        return row is not None and str(row[0]) == run

    async def _select(self, query: str, parameters: tuple[object, ...]) -> list[tuple[Any, ...]]:
        async with self._connection() as conn:
            cur = await conn.execute(query, parameters)
            return await cur.fetchall()

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
