"""Sealing, once, a store written before the codec keys were set (`agentloop store seal`).

With keys, the store refuses every blob that is not sealed (`agentloop.store.sealed`): a
store that holds plaintext from before is sealed row by row under the active key, each row at
the address it has (its key is content-addressed: it never changes).

Safe to run again (a row already sealed is not touched) and while workers run: a row is
replaced only while it is still unsealed, by the same content sealed, in one statement per
batch, the backend's insert-or-reseal; a worker writing the same content meanwhile seals it
the same way. A row whose address is the hash of its content (every node but the handles of
MCP tasks, every artifact) is sealed only when its content has that hash: one that does not
was not written by agentloop, and sealing it would vouch for it. It is left unsealed (so still
refused) and named in the report.
"""

from __future__ import annotations

from pydantic import BaseModel

from agentloop.digests import sha256_hex
from agentloop.store.artifacts import artifact_key
from agentloop.store.base import StoreError
from agentloop.store.sealed import NODE_PREFIX, SEALED_MEDIA_TYPE, SealedStore

BATCH_ROWS = 500
"""Rows read and sealed per statement."""

CONTENT_ADDRESSED = "sha256:"
"""How a node's key begins when it is the hash of its body (`agentloop.transcript`)."""


class SealedRows(BaseModel):
    """What `agentloop store seal` did (its `--json` document)."""

    key_id: str
    """The key the rows were sealed under (the active one)."""
    nodes: int
    """Transcript nodes (and MCP task handles) sealed now."""
    artifacts: int
    """Artifacts sealed now."""
    mismatched: list[str]
    """Addresses whose content does not hash to them: left unsealed, so still refused."""


async def seal_plaintext_rows(store: SealedStore, batch: int = BATCH_ROWS) -> SealedRows:
    """Seal every node and artifact of `store` that is not sealed, under its active key."""
    key_id = store.active_key
    if key_id is None:
        raise StoreError("sealing a store needs AGENTLOOP_CODEC_KEYS: the key to seal it under")
    report = SealedRows(key_id=key_id, nodes=0, artifacts=0, mismatched=[])
    after = ""
    while rows := await store.backend.unsealed_nodes(NODE_PREFIX, after, batch):
        after = rows[-1][0]
        sealed: list[tuple[str, str | None, str]] = []
        for key, parent, body in rows:
            if _node_matches(key, body):
                sealed.append((key, parent, store.sealed_node(key, body)))
            else:
                report.mismatched.append(key)
        # Replaced only while still unsealed: a row a worker sealed meanwhile stays as it is.
        await store.backend.put_node_rows(sealed, reseal=NODE_PREFIX)
        report.nodes += len(sealed)
    after = ""
    while artifacts := await store.backend.unsealed_artifacts(SEALED_MEDIA_TYPE, after, batch):
        after = artifacts[-1][0]
        for key, data, media_type in artifacts:
            if key != artifact_key(data):
                report.mismatched.append(key)
                continue
            sealed_data, marked = store.sealed_artifact(key, data, media_type)
            await store.backend.put_artifact_row(key, sealed_data, marked, reseal=True)
            report.artifacts += 1
    return report


def _node_matches(key: str, body: str) -> bool:
    """Whether a node's body is what its key says: the key of a transcript node is the hash
    of its body; an MCP task handle's (`mcp-task:`) is not, and cannot be checked."""
    return not key.startswith(CONTENT_ADDRESSED) or key == CONTENT_ADDRESSED + sha256_hex(body)
