"""What a transcript and artifact store must do; SQLite and PostgreSQL implement it.

Both backends hold two kinds of immutable, content-addressed blobs:

- transcript nodes: `(key, canonical json of {event, parent})`, the key being the hash of the
  json (`agentloop.transcript`); a node's parent is kept in a column of its own as well,
  so a whole chain comes back in one query (`load_chain`);
- artifacts: bytes with a media type, the key being `sha256:` + the hex digest of the bytes.

One more kind of node shares the node table, written once and never changed: the handle of a
write an MCP server made a task, under `mcp-task:` + the hash of the write's idempotency key
(`agentloop.mcp.tasks`), so that its outcome can be asked of the server after a crash.

Beside the blobs, the nonces of signed starts (`agentloop.runtime.start_signing`): which run
chain used each, until it may be forgotten (`StartNonces`), so that every worker sharing the
store refuses a signed start input started a second time.

Writing the same key twice is harmless (insert-or-ignore), so retried activities and several
workers writing the same nodes at once need no coordination.

What a backend holds may be sealed with the codec's keys: `agentloop.store.sealed` sits above
the backends (`open_store` puts it there), so the bodies and bytes they store are then
ciphertext under plaintext addresses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol


class StoreError(Exception):
    """The store lacks something it must have (a transcript node), or was asked something it
    cannot do (an unsupported URL). Retrying does not help."""


class StoreUnavailable(Exception):
    """The store cannot be reached right now (connection refused, server restarting, pool
    exhausted). Deliberately *not* a `StoreError`: an activity that lets it propagate is
    retried by Temporal, while a `StoreError` is turned into a non-retryable failure."""


class Store(Protocol):
    async def put_nodes(self, nodes: Sequence[tuple[str, str]]) -> None:
        """Insert `(key, json)` nodes; a key already present is left as it is."""

    async def get_node(self, key: str) -> str | None:
        """The node's json, or None when the store does not have it."""

    async def load_chain(self, head: str) -> list[tuple[str, str]]:
        """The `(key, json)` nodes from the root to `head`, oldest first, fetched in one query;
        `[]` for the empty head. Raises `StoreError` naming the first node that is missing."""

    async def put_artifact(self, data: bytes, media_type: str) -> str:
        """Store `data`; returns its key `sha256:<hex of the bytes>`. Storing the same bytes
        again is harmless and keeps the first media type."""

    async def get_artifact(self, key: str) -> tuple[bytes, str] | None:
        """`(data, media_type)`, or None when the store does not have the key."""

    async def close(self) -> None: ...


class StartNonces(Protocol):
    async def claim_nonce(self, nonce: str, run: str, keep_until: datetime) -> bool:
        """Record that run chain `run` (its first run id) used `nonce`, remembered until
        `keep_until`: True when no other run had, the first claim or the same run's again (a
        retried activity); False when another run holds it. Forgets every nonce whose
        `keep_until` has passed."""
        ...


def node_rows(nodes: Iterable[tuple[str, str]]) -> list[tuple[str, str | None, str]]:
    """`(key, parent, json)` rows to insert: one per key, sorted by key.

    The sort matters for PostgreSQL: two transactions inserting overlapping keys in the same
    order cannot deadlock on each other's uncommitted rows.
    """
    rows: dict[str, tuple[str, str | None, str]] = {}
    for key, body in nodes:
        parent = json.loads(body).get("parent") or None
        rows[key] = (key, parent, body)
    return [rows[key] for key in sorted(rows)]


def order_chain(head: str, rows: Iterable[tuple[str, str | None, str]]) -> list[tuple[str, str]]:
    """Follow parent links from `head` through `(key, parent, json)` rows: oldest first."""
    by_key = {key: (parent, body) for key, parent, body in rows}
    chain: list[tuple[str, str]] = []
    key: str | None = head or None
    while key is not None:
        found = by_key.pop(key, None)  # popped: a (corrupt) cycle cannot loop forever
        if found is None:
            raise StoreError(f"transcript node {key} is missing from the store")
        parent, body = found
        chain.append((key, body))
        key = parent
    chain.reverse()
    return chain
