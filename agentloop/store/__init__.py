"""Content-addressed transcript and artifact store (docs/concepts/design.md §2, "How the
transcript travels").

`open_store(url, keys)` picks the backend: SQLite (embedded default, one worker machine) or
PostgreSQL (several workers). Both implement `Store` and pass the same contract tests. Above
either, `SealedStore` encrypts what is stored with the codec's keys when there are any
(`agentloop.store.sealed`).
"""

from __future__ import annotations

import sqlite3

from agentloop.events import Event
from agentloop.runtime.audit import mask_url
from agentloop.runtime.codec import KeyRing
from agentloop.store.artifacts import (
    artifact_key,
    load_artifact_text,
    read_artifact_text,
    stored_by_reference,
    with_contents,
)
from agentloop.store.base import Store, StoreError, StoreUnavailable, order_chain
from agentloop.store.sealed import Backend, SealedBlobError, SealedStore
from agentloop.store.sqlite import SqliteStore
from agentloop.transcript import ROOT, parse_node

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


UNUSABLE = (StoreError, StoreUnavailable, OSError, sqlite3.Error)
"""What opening or first reading a store raises when it cannot be used: a bad URL, a folder
that cannot be made, a file that is not a database, a PostgreSQL that does not answer."""


def why_unusable(exc: BaseException) -> str:
    """One of `UNUSABLE` said for a person: an OS error by its reason and path."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)


def open_store(url: str, keys: KeyRing | None = None) -> SealedStore:
    """The store at `url`; nothing connects before the first call. With `keys` (the codec's
    ring, `Settings.codec_key_ring()`), what it writes is encrypted under the active key and
    what it reads is decrypted under any; without, it writes plaintext and refuses to read an
    encrypted blob (`SealedBlobError`, naming the key id).

    - `sqlite:///relative/path.db`, `sqlite:////abs/path.db`, or a bare file path: SQLite;
    - `postgresql://user:password@host:port/db` (or `postgres://`), any libpq URL parameters
      included (e.g. `?options=-csearch_path%3Dmyschema`): PostgreSQL.
    """
    return SealedStore(_open_backend(url), keys)


def _open_backend(url: str) -> Backend:
    if url.startswith("sqlite:///"):
        return SqliteStore(url.removeprefix("sqlite:///"))
    if url.startswith(_POSTGRES_SCHEMES):
        from agentloop.store.postgres import PostgresStore  # psycopg only when asked for

        return PostgresStore(url)
    if "://" in url or not url:
        raise StoreError(
            f"unsupported store URL {mask_url(url)!r}: use sqlite:///PATH, a file path,"
            " or postgresql://USER@HOST:PORT/DB"
        )
    return SqliteStore(url)


async def load_transcript(store: Store, head: str) -> list[Event]:
    """The events of the chain ending at `head`, oldest first; `StoreError` if a node is
    missing or the chain does not link up."""
    if head == ROOT:
        return []
    load_chain = getattr(store, "load_chain", None)  # a duck-typed store may lack the fast path
    chain = await load_chain(head) if load_chain is not None else await _walk_chain(store, head)
    events: list[Event] = []
    expected_parent = ROOT
    for key, text in chain:
        event, parent = parse_node(text)
        if parent != expected_parent:
            raise StoreError(f"transcript node {key} does not follow {expected_parent or 'ROOT'}")
        events.append(event)
        expected_parent = key
    if expected_parent != head:
        raise StoreError(f"the store's chain does not end at {head}")
    return events


async def _walk_chain(store: Store, head: str) -> list[tuple[str, str]]:
    """`load_chain` one node at a time, for a store without the one-query path."""
    rows: list[tuple[str, str | None, str]] = []
    key, seen = head, set[str]()
    while key != ROOT and key not in seen:
        seen.add(key)
        text = await store.get_node(key)
        if text is None:
            break  # order_chain names the missing node
        _, parent = parse_node(text)
        rows.append((key, parent or None, text))
        key = parent
    return order_chain(head, rows)


__all__ = [
    "ROOT",
    "SealedBlobError",
    "SealedStore",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "artifact_key",
    "load_artifact_text",
    "load_transcript",
    "open_store",
    "read_artifact_text",
    "stored_by_reference",
    "with_contents",
]
