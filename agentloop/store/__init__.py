"""Content-addressed transcript store (DESIGN.md §2, "How the transcript travels")."""

from __future__ import annotations

from agentloop.events import Event
from agentloop.store.base import Store, StoreError
from agentloop.store.sqlite import SqliteStore
from agentloop.store.transcript import ROOT, parse_node


def open_store(url: str) -> Store:
    """`sqlite:///relative/path.db`, `sqlite:////abs/path.db` or a bare file path."""
    if url.startswith("sqlite:///"):
        return SqliteStore(url.removeprefix("sqlite:///"))
    if "://" in url:
        raise StoreError(f"unsupported store URL {url!r}: use sqlite:///PATH")
    return SqliteStore(url)


async def load_transcript(store: Store, head: str) -> list[Event]:
    """Walk the chain from `head` back to the root; oldest event first."""
    events: list[Event] = []
    key = head
    while key != ROOT:
        text = await store.get_node(key)
        if text is None:
            raise StoreError(f"transcript node {key} is missing from the store")
        event, key = parse_node(text)
        events.append(event)
    events.reverse()
    return events


__all__ = ["ROOT", "SqliteStore", "Store", "StoreError", "load_transcript", "open_store"]
