"""A store in a dict, for one process's tests: what `agentloop.testing.tool_context` gives a
tool's artifacts when the team calls its code directly. Same contract as the real backends;
nothing survives the process."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agentloop.store.artifacts import artifact_key
from agentloop.store.base import node_rows, order_chain


@dataclass
class MemoryContents:
    """What memory stores hold; stores given the same contents see each other's writes."""

    nodes: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    artifacts: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    nonces: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    """nonce -> (the run that claimed it, until when it is remembered)"""


class MemoryStore:
    def __init__(self, contents: MemoryContents | None = None) -> None:
        contents = contents or MemoryContents()
        self._nodes = contents.nodes
        self._artifacts = contents.artifacts
        self._nonces = contents.nonces

    async def put_nodes(self, nodes: Sequence[tuple[str, str]]) -> None:
        await self.put_node_rows(node_rows(nodes))

    async def put_node_rows(
        self, rows: Sequence[tuple[str, str | None, str]], reseal: str | None = None
    ) -> None:
        for key, parent, body in rows:
            found = self._nodes.get(key)
            if found is None or (reseal is not None and not found[1].startswith(reseal)):
                self._nodes[key] = (parent, body)

    async def get_node(self, key: str) -> str | None:
        found = self._nodes.get(key)
        return None if found is None else found[1]

    async def load_chain(self, head: str) -> list[tuple[str, str]]:
        if not head:
            return []
        return order_chain(head, ((k, p, b) for k, (p, b) in self._nodes.items()))

    async def put_artifact(self, data: bytes, media_type: str) -> str:
        key = artifact_key(data)
        await self.put_artifact_row(key, data, media_type)
        return key

    async def put_artifact_row(
        self, key: str, data: bytes, media_type: str, reseal: bool = False
    ) -> None:
        found = self._artifacts.get(key)
        if found is None or (reseal and found[1] != media_type):
            self._artifacts[key] = (bytes(data), media_type)

    async def get_artifact(self, key: str) -> tuple[bytes, str] | None:
        return self._artifacts.get(key)

    async def unsealed_nodes(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, str | None, str]]:
        found = (
            (key, parent, body)
            for key, (parent, body) in sorted(self._nodes.items())
            if key > after and not body.startswith(marker)
        )
        return list(itertools.islice(found, limit))

    async def unsealed_artifacts(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, bytes, str]]:
        found = (
            (key, data, media_type)
            for key, (data, media_type) in sorted(self._artifacts.items())
            if key > after and not media_type.startswith(marker)
        )
        return list(itertools.islice(found, limit))

    async def claim_nonce(self, nonce: str, run: str, keep_until: datetime) -> bool:
        now = datetime.now(UTC)
        for forgotten in [n for n, (_, until) in self._nonces.items() if until < now]:
            del self._nonces[forgotten]
        holder, _ = self._nonces.setdefault(nonce, (run, keep_until))
        return holder == run

    async def close(self) -> None:
        return None
