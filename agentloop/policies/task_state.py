"""Task state, kept apart from the transcript (seed 003: which ticket, which policy was adopted,
whether a draft exists, whether sending is authorised): a small JSON document a run's tools
update with their results. Pure.

Merge rules: an update is an object; each of its keys replaces that key of the document, and a
key set to `null` removes it. Keys and sizes are bounded, so the document stays small whatever
a tool returns: an update over a bound is refused whole, and the document stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentloop.digests import canonical_json, sha256_hex
from agentloop.policies.bounds import MAX_DEPTH, is_text_value, value_depth

MAX_UPDATE_CHARS = 2_000
"""One result's state update, as JSON."""
MAX_STATE_CHARS = 8_000
"""The whole document, as JSON."""
MAX_STATE_KEYS = 32
MAX_KEY_CHARS = 64


def update_problem(update: Any) -> str | None:
    """Why a tool's state update cannot be taken (None: it can)."""
    if not isinstance(update, Mapping):
        return f"a state update is a JSON object, not {type(update).__name__}"
    if value_depth(update) > MAX_DEPTH or not is_text_value(update):
        return "a state update must be plain JSON text"
    for key in update:
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
            return f"state keys are strings of 1 to {MAX_KEY_CHARS} characters: {key!r:.80}"
    try:
        size = len(canonical_json(update))
    except (TypeError, ValueError) as exc:
        return f"a state update must be JSON: {exc}"
    if size > MAX_UPDATE_CHARS:
        return f"the state update is {size} characters of JSON, over {MAX_UPDATE_CHARS}"
    return None


def merged(state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any] | str:
    """`state` with `update` applied, or why it cannot be (the document would pass a bound)."""
    document = dict(state)
    for key, value in update.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    if len(document) > MAX_STATE_KEYS:
        return f"the task state would hold {len(document)} keys, over {MAX_STATE_KEYS}"
    size = len(canonical_json(document))
    if size > MAX_STATE_CHARS:
        return f"the task state would be {size} characters of JSON, over {MAX_STATE_CHARS}"
    return document


def state_hash(state: Mapping[str, Any]) -> str:
    """What stall detection compares turn to turn ("" for an empty document)."""
    return sha256_hex(canonical_json(dict(state)))[:16] if state else ""
