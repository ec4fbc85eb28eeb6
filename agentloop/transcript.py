"""The transcript as a content-addressed chain, like git commits.

A node is `{event, parent}` and its key is the hash of its canonical JSON, so appending the same
events to the same head always gives the same key, on the workflow side (which never reads the
store) and on the activity side (which persists). Writing a node twice is harmless.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter

from agentloop.digests import canonical_json, sha256_hex
from agentloop.events import Event, Instruction, ToolResult, UserInput

ROOT = ""
"""The head of an empty transcript."""

_EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
_NODE_ADAPTER: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
"""Built once: building a TypeAdapter costs more than the parse it does (per node, per call)."""


TRANSPORT_FIELDS = frozenset({"content_ref", "text_ref", "text_chars", "attempts", "input_request"})
"""Event fields that say how an event travels, not what it is: never part of a node."""


def by_reference(event: Event) -> Event:
    """`event` as it travels once its long text is in the store: without the text, which its
    reference names (a tool result's `content_ref`, a task's or message's `text_ref`)."""
    if isinstance(event, ToolResult) and event.content_ref:
        return event.model_copy(update={"content": ""})
    if isinstance(event, Instruction | UserInput) and event.text_ref:
        return event.model_copy(update={"text": ""})
    return event


def is_hollow(event: Event) -> bool:
    """Whether `event` lacks a text its node hashes (`by_reference`): only the store, which
    has the text, can say the node's key."""
    if isinstance(event, ToolResult):
        return bool(event.content_ref) and not event.content
    if isinstance(event, Instruction | UserInput):
        return bool(event.text_ref) and not event.text
    return False


def node_body(event: Event, parent: str) -> dict[str, Any]:
    """Fields at their default are left out, so adding a field (always with a default) to an
    event later does not change the key of any node written before: runs in flight, whose
    workflow recomputes these keys on replay, keep replaying."""
    body = event.model_dump(mode="json", exclude_defaults=True, exclude=set(TRANSPORT_FIELDS))
    body["type"] = event.type  # the discriminator, a default itself, must stay
    return {"event": body, "parent": parent or None}


def node_key(body: dict[str, Any]) -> str:
    return "sha256:" + sha256_hex(canonical_json(body))


def append(head: str, events: Sequence[Event]) -> tuple[str, list[tuple[str, str]]]:
    """Chain `events` after `head`: the new head and the `(key, canonical json)` nodes."""
    nodes: list[tuple[str, str]] = []
    for event in events:
        body = node_body(event, head)
        head = node_key(body)
        nodes.append((head, canonical_json(body)))
    return head, nodes


def parse_node(text: str) -> tuple[Event, str]:
    """A stored node back into `(event, parent key)`."""
    body = _NODE_ADAPTER.validate_json(text)
    return _EVENT_ADAPTER.validate_python(body["event"]), body.get("parent") or ROOT
