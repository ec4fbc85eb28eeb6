"""What a transcript and artifact store must do; SQLite and PostgreSQL implement it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class StoreError(Exception):
    """The store is missing a node it must have, or cannot be reached."""


class Store(Protocol):
    async def put_nodes(self, nodes: Sequence[tuple[str, str]]) -> None:
        """Insert `(key, json)` nodes; a key already present is left as it is."""

    async def get_node(self, key: str) -> str | None: ...

    async def close(self) -> None: ...
