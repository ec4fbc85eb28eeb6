"""The store's contents encrypted at rest with the codec's keys: one layer above the backends,
so SQLite and PostgreSQL hold the same sealed blobs.

With `AGENTLOOP_CODEC_KEYS` set, every transcript node body and every artifact is sealed with
AES-256-GCM under the ring's active key (the ring of `agentloop.runtime.codec`: the same
configuration, the same rotation). A sealed blob is an envelope

    b"ALS1" || len(key id) (1 byte) || key id || nonce (12 bytes) || ciphertext || tag (16 bytes)

its additional data binding what it is and where it lives (`node` or `artifact`, and the
address), so a blob copied to another address, or a node put where an artifact belongs, fails
authentication. A node body is kept as text (`agentloop-sealed:KEYID:` + the envelope in
base64); an artifact keeps the envelope as its bytes, `SEALED_MEDIA_TYPE; key=KEYID` as its
media type, and its real media type inside the sealed plaintext. The key id in the clear lets
a write of content already stored in plaintext, or under an older key, seal it anew under the
active key in the same statement (`reseal`): after a rotation, what is written again moves to
the new key, and content stored in plaintext before the keys were set is sealed when written
again.

Addresses stay what they are (the workflow computes a node's key itself, a SHA-256 of the
plaintext node, and an artifact's is the SHA-256 of its bytes), so writing the same content
twice still stores it once. What an address reveals: someone who can read the store and
guesses a node or an artifact exactly can confirm the guess.

With keys, the store fails closed: a blob that is not sealed is refused (`SealedBlobError`),
never served, for whoever can write the database without the keys could put any plaintext
there. A store written before the keys were set is sealed once by `agentloop store seal`
(`agentloop.store.sealing`). A sealed blob read without the key it names fails naming the key
id: ciphertext is never returned as content.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Protocol, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agentloop.runtime.codec import CODEC_KEYS_VARIABLE, NONCE_BYTES, TAG_BYTES, KeyRing
from agentloop.store.artifacts import artifact_key
from agentloop.store.base import StartNonces, Store, StoreError, node_rows

MAGIC = b"ALS1"
"""The first bytes of a sealed envelope (agentloop store, version 1)."""
NODE_PREFIX = "agentloop-sealed:"
"""How a sealed node body begins (then the key id, `:` and the envelope in base64); a
plaintext body is a JSON object, so it begins with `{`."""
SEALED_MEDIA_TYPE = "application/vnd.agentloop.sealed"
"""How the media type column of a sealed artifact begins (then `; key=` and the key id);
refused as a media type to store."""

Kind = Literal["node", "artifact"]
T = TypeVar("T")


class SealedBlobError(StoreError):
    """A sealed blob that cannot be opened: its key is not in the ring (or there is no ring),
    or it was altered, cut or moved. Retrying does not help."""


class Backend(Store, StartNonces, Protocol):
    """What the backends do below the sealing layer: nodes are written as rows whose parent
    the layer read from the plaintext body."""

    async def put_node_rows(
        self, rows: Sequence[tuple[str, str | None, str]], reseal: str | None = None
    ) -> None:
        """Insert `(key, parent, body)` rows (from `node_rows`). A key present is left as it
        is, unless `reseal` is given and its body does not start with it: then the new body
        replaces it (the same content, now sealed under the active key)."""

    async def put_artifact_row(
        self, key: str, data: bytes, media_type: str, reseal: bool = False
    ) -> None:
        """Insert an artifact under `key`. A key present is left as it is, unless `reseal` and
        its media type is another: then the new row replaces it."""

    async def unsealed_nodes(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, str | None, str]]:
        """Up to `limit` `(key, parent, body)` rows whose body does not start with `marker`
        (`NODE_PREFIX`: not sealed), their keys after `after`, in key order."""

    async def unsealed_artifacts(
        self, marker: str, after: str, limit: int
    ) -> list[tuple[str, bytes, str]]:
        """Up to `limit` `(key, data, media_type)` artifacts whose media type does not start
        with `marker` (`SEALED_MEDIA_TYPE`: not sealed), their keys after `after`, in key
        order."""


class Sealer:
    """Seals and opens blobs with a key ring (the active key for new ones)."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring
        self._ciphers = {key_id: AESGCM(key) for key_id, key in ring.keys.items()}

    def seal(self, kind: Kind, address: str, plain: bytes) -> bytes:
        key_id = self.ring.active.encode()
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.ring.active].encrypt(nonce, plain, _bound(kind, address))
        return MAGIC + bytes([len(key_id)]) + key_id + nonce + sealed

    def open(self, kind: Kind, address: str, envelope: bytes) -> bytes:
        key_id, nonce, sealed = _parts(kind, address, envelope)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SealedBlobError(
                f"{kind} {address} is encrypted with key id {key_id!r}, which is not in the"
                f" key ring ({', '.join(self.ring.ids)}): add {key_id}:KEY to"
                f" {CODEC_KEYS_VARIABLE} (after the active key) to read it"
            )
        try:
            return cipher.decrypt(nonce, sealed, _bound(kind, address))
        except InvalidTag:
            raise SealedBlobError(
                f"{kind} {address} (key id {key_id!r}) failed authentication: it was altered or"
                f" moved from another address, or the key named {key_id!r} in"
                f" {CODEC_KEYS_VARIABLE} is not the one it was encrypted with"
            ) from None


def _bound(kind: Kind, address: str) -> bytes:
    """The additional data: a blob opens only as the kind and at the address it was sealed
    for."""
    return f"agentloop-store:v1:{kind}:{address}".encode()


def _parts(kind: Kind, address: str, envelope: bytes) -> tuple[str, bytes, bytes]:
    """The key id, nonce and sealed bytes of an envelope; `SealedBlobError` if it is cut."""
    size = len(MAGIC) + 1
    id_length = envelope[size - 1] if len(envelope) >= size else 0
    if len(envelope) < size + id_length + NONCE_BYTES + TAG_BYTES or not id_length:
        raise SealedBlobError(
            f"{kind} {address} is a sealed blob of {len(envelope)} bytes: too short to hold"
            " a key id, a nonce and a tag, it was cut or altered"
        )
    key_id = envelope[size : size + id_length].decode("utf-8", errors="replace")
    start = size + id_length
    return key_id, envelope[start : start + NONCE_BYTES], envelope[start + NONCE_BYTES :]


def _unreadable(kind: Kind, address: str, envelope: bytes) -> SealedBlobError:
    key_id, _, _ = _parts(kind, address, envelope)
    return SealedBlobError(
        f"{kind} {address} is encrypted with key id {key_id!r}, and {CODEC_KEYS_VARIABLE} is"
        f" not set: set it to the keys the workers use (including {key_id}) to read it"
    )


def _node_prefix(key_id: str) -> str:
    return f"{NODE_PREFIX}{key_id}:"


class SealedStore:
    """A `Store` over a backend: seals what it writes when it has a key ring, opens what it
    reads (refusing sealed blobs it has no key for); with keys it refuses plaintext, without
    it passes it."""

    def __init__(self, backend: Backend, ring: KeyRing | None = None) -> None:
        self.backend = backend
        self._sealer = None if ring is None else Sealer(ring)

    def __repr__(self) -> str:
        sealed = "sealed" if self._sealer is not None else "plaintext"
        return f"{self.backend!r} ({sealed})"

    @property
    def active_key(self) -> str | None:
        """The id of the key new blobs are sealed under; None without keys."""
        return None if self._sealer is None else self._sealer.ring.active

    async def put_nodes(self, nodes: Sequence[tuple[str, str]]) -> None:
        rows = node_rows(nodes)  # the parent column, read from the plaintext
        if self._sealer is None:
            await self.backend.put_node_rows(rows)
            return
        sealed = [(key, parent, self.sealed_node(key, body)) for key, parent, body in rows]
        # A node already there in plaintext or under an older key is sealed anew: content
        # written again is then under the active key (the same address, the same plaintext).
        await self.backend.put_node_rows(sealed, reseal=_node_prefix(self._sealer.ring.active))

    async def get_node(self, key: str) -> str | None:
        body = await self.backend.get_node(key)
        return None if body is None else self._open_node(key, body)

    async def load_chain(self, head: str) -> list[tuple[str, str]]:
        chain = await self.backend.load_chain(head)
        return [(key, self._open_node(key, body)) for key, body in chain]

    async def put_artifact(self, data: bytes, media_type: str) -> str:
        if media_type.startswith(SEALED_MEDIA_TYPE):
            raise StoreError(f"{SEALED_MEDIA_TYPE} is the store's own media type: use another")
        if self._sealer is None:
            return await self.backend.put_artifact(data, media_type)
        key = artifact_key(data)
        sealed, marked = self.sealed_artifact(key, data, media_type)
        # An artifact already there in plaintext or under an older key is sealed anew.
        await self.backend.put_artifact_row(key, sealed, marked, reseal=True)
        return key

    def sealed_node(self, key: str, body: str) -> str:
        """The body to store for the node `(key, body)`, sealed under the active key."""
        assert self._sealer is not None, "sealing needs keys"
        envelope = self._sealer.seal("node", key, body.encode())
        return _node_prefix(self._sealer.ring.active) + base64.b64encode(envelope).decode()

    def sealed_artifact(self, key: str, data: bytes, media_type: str) -> tuple[bytes, str]:
        """What to store for the artifact `(data, media_type)` at `key`, sealed under the
        active key: its bytes and its media type column."""
        assert self._sealer is not None, "sealing needs keys"
        named = media_type.encode()
        if len(named) > 0xFFFF:  # its length is kept in two bytes
            raise StoreError(f"a media type of {len(named)} bytes is not one")
        plain = struct.pack(">H", len(named)) + named + bytes(data)
        marked = f"{SEALED_MEDIA_TYPE}; key={self._sealer.ring.active}"
        return self._sealer.seal("artifact", key, plain), marked

    async def get_artifact(self, key: str) -> tuple[bytes, str] | None:
        found = await self.backend.get_artifact(key)
        if found is None:
            return None
        if not found[1].startswith(SEALED_MEDIA_TYPE):
            return self._plaintext("artifact", key, found)
        plain = self._open("artifact", key, found[0])
        (length,) = struct.unpack(">H", plain[:2])
        return plain[2 + length :], plain[2 : 2 + length].decode()

    async def claim_nonce(self, nonce: str, run: str, keep_until: datetime) -> bool:
        # Not sealed: a nonce is no secret (it is in the signature, in the run's history).
        return await self.backend.claim_nonce(nonce, run, keep_until)

    async def close(self) -> None:
        await self.backend.close()

    def _open_node(self, key: str, body: str) -> str:
        if not body.startswith(NODE_PREFIX):
            return self._plaintext("node", key, body)
        _, _, encoded = body.removeprefix(NODE_PREFIX).partition(":")
        try:
            envelope = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise SealedBlobError(f"node {key} is a sealed blob that is not base64") from None
        return self._open("node", key, envelope).decode()

    def _plaintext(self, kind: Kind, address: str, found: T) -> T:
        """A blob stored in plaintext: as it is without keys; with keys, refused (fail
        closed), whoever can write the database without the keys could have put it there."""
        if self._sealer is None:
            return found
        raise SealedBlobError(
            f"{kind} {address} is stored in plaintext in a sealed store ({CODEC_KEYS_VARIABLE}"
            " is set): refused. If the store was written before the keys were set, run"
            " `agentloop store seal` once to seal it; otherwise someone without the keys wrote"
            " it there"
        )

    def _open(self, kind: Kind, address: str, envelope: bytes) -> bytes:
        if not envelope.startswith(MAGIC):
            raise SealedBlobError(f"{kind} {address} is marked sealed but is no sealed blob")
        if self._sealer is None:
            raise _unreadable(kind, address, envelope)
        return self._sealer.open(kind, address, envelope)
