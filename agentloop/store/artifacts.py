"""Artifacts: large tool outputs kept in the store, content-addressed by their bytes.

The model sees a bounded preview and the key; it pages through the rest as text. Paging is by
characters of the UTF-8 text (never splitting a character), and `total_chars` tells how far
it goes.
"""

from __future__ import annotations

import hashlib

from agentloop.events import Event, Instruction, ToolResult, UserInput
from agentloop.store.base import Store, StoreError

BY_REFERENCE_MIN_CHARS = 256
"""Tool-result content this long travels to the next model call by reference (shorter
content is not worth a store round trip)."""


def artifact_key(data: bytes) -> str:
    """The key every store gives `data`: `sha256:` + the hex digest of the bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_artifact_text(data: bytes, offset: int = 0, limit: int | None = None) -> tuple[str, int]:
    """Characters `[offset, offset + limit)` of `data` read as UTF-8, and the total number of
    characters. Bytes that are not UTF-8 read as U+FFFD. Pure."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, not {offset}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    text = data.decode("utf-8", errors="replace")
    end = None if limit is None else offset + limit
    return text[offset:end], len(text)


async def load_artifact_text(
    store: Store, key: str, offset: int = 0, limit: int | None = None
) -> tuple[str, int]:
    """`read_artifact_text` over the artifact `key` of `store`; `StoreError` if it is missing."""
    found = await store.get_artifact(key)
    if found is None:
        raise StoreError(f"artifact {key} is missing from the store")
    return read_artifact_text(found[0], offset, limit)


async def stored_by_reference(store: Store, result: ToolResult) -> ToolResult:
    """`result` with its content also in the store, named by `content_ref`: the workflow then
    sends the next model call the reference instead of the content (see `with_contents`)."""
    if len(result.content) < BY_REFERENCE_MIN_CHARS:
        return result
    ref = await store.put_artifact(result.content.encode("utf-8"), "text/plain")
    return result.model_copy(update={"content_ref": ref})


async def with_contents(store: Store, events: list[Event]) -> list[Event]:
    """Events as a model call received them, the texts and tool-result contents sent by
    reference put back from the store; `StoreError` when one is missing."""
    restored: list[Event] = []
    for event in events:
        if isinstance(event, ToolResult) and event.content_ref and not event.content:
            text, _ = await load_artifact_text(store, event.content_ref)
            event = event.model_copy(update={"content": text})
        elif isinstance(event, Instruction | UserInput) and event.text_ref and not event.text:
            text, _ = await load_artifact_text(store, event.text_ref)
            event = event.model_copy(update={"text": text})
        restored.append(event)
    return restored
