"""SQLite backend: the embedded default for one worker machine.

sqlite3 is synchronous; calls go through a single worker thread so the event loop never blocks
and the connection is only ever used from one thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (key TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;
"""


class SqliteStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._conn = self._executor.submit(self._connect).result()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # Several worker processes may share the file: wait for a writer instead of failing.
        conn.execute("PRAGMA busy_timeout=10000")
        conn.executescript(_SCHEMA)
        return conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def put_nodes(self, nodes: Sequence[tuple[str, str]]) -> None:
        if nodes:
            await self._run(self._put_nodes, list(nodes))

    def _put_nodes(self, nodes: list[tuple[str, str]]) -> None:
        with self._conn:
            self._conn.executemany(
                "INSERT INTO nodes (key, body) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", nodes
            )

    async def get_node(self, key: str) -> str | None:
        result: str | None = await self._run(self._get_node, key)
        return result

    def _get_node(self, key: str) -> str | None:
        row = self._conn.execute("SELECT body FROM nodes WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    async def close(self) -> None:
        await self._run(self._conn.close)
        self._executor.shutdown(wait=True)
