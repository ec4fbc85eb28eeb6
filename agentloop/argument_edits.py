"""An approver's edit of a pending call's arguments, as people write it: `NAME=VALUE` pairs
(`agentloop approve --set amount=450`, the inbox's fields) and a JSON merge patch (RFC 7386:
`{"amount": 450, "note": null}` sets `amount`, removes `note`). Client-side and pure: the run
validates the result again like a model's call (`ApprovalDecision.edited_arguments`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


class EditError(ValueError):
    """An edit that cannot be read; the message says which part and why."""


def edited_arguments(
    proposed: Mapping[str, Any], settings: Iterable[str] = (), patch: str | None = None
) -> dict[str, Any]:
    """`proposed` with the merge `patch` applied, then each `NAME=VALUE` of `settings` (a
    VALUE that reads as JSON is that value: `450`, `true`, `"450"`; anything else is text)."""
    edited: dict[str, Any] = dict(proposed)
    if patch is not None:
        edited = merged(edited, json_object(patch, "the patch (a merge patch, RFC 7386)"))
    for setting in settings:
        name, equals, text = setting.partition("=")
        if not equals or not name:
            raise EditError(f"expected NAME=VALUE, got {setting!r}")
        edited[name] = json_or_text(text)
    return edited


def json_object(text: str, what: str = "the arguments") -> dict[str, Any]:
    """`text` read as a JSON object (a whole call's arguments, or a patch)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EditError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise EditError(f"{what} must be a JSON object")
    return value


def merged(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386: `null` removes a member, an object merges into an object, anything else
    replaces."""
    result = dict(target)
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        elif isinstance(value, dict) and isinstance(result.get(name), dict):
            result[name] = merged(result[name], value)
        else:
            result[name] = value
    return result


def json_or_text(text: str) -> Any:
    """`450` -> 450, `true` -> True, `"x"` -> "x", `hello` -> "hello"."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
