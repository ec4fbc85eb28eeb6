"""Compensation, as pure decisions (docs/concepts/compensation.md): article 001's error table,
"部分成功 — 邮件已发但数据库更新失败 — 查幂等状态、补偿或人工处置" (a partial success: look up
the idempotent state, compensate, or hand to a person).

When a run ends without delivering, the writes that succeeded and declared an undo are
offered for compensation, newest first, under the run's policy (`never | ask | always`, per
tool over per run); every other write is left as is, saying why. What an undo is called
with is decided here too, from the original call's arguments, result and idempotency key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentloop.contract import CompensatePolicy, RunStatus

DELIVERED: frozenset[RunStatus] = frozenset({"completed"})
"""The stops that deliver: nothing is undone after them."""

ORIGINAL_KEY = "original_idempotency_key"
"""The parameter of an undo tool that is given the original write's idempotency key."""

UNDO_CALL_PREFIX = "undo-"
"""An undo's call id is the original call's with this before it."""


@dataclass(frozen=True)
class Written:
    """A write of the run that happened (or may have), oldest first in a run's order."""

    call_id: str
    tool: str
    status: str
    """Its ledger status: `succeeded`, `confirmed_after_query` or `unknown`."""
    undo_tool: str | None = None
    """The tool its spec names to undo it (None: it declared none)."""
    undo_arguments: dict[str, Any] | None = None
    """What the undo is called with, prepared when the write's result came in."""
    problem: str = ""
    """Why no undo call could be prepared."""
    undo_denied: str | None = None
    """Why the run's principal may not call the undo tool (None: it may)."""


@dataclass(frozen=True)
class Offered:
    """An undo to run: with a person's approval first (`ask`) or without (`always`)."""

    call_id: str
    tool: str
    undo_tool: str
    arguments: dict[str, Any]
    ask: bool

    @property
    def undo_call_id(self) -> str:
        return UNDO_CALL_PREFIX + self.call_id


@dataclass(frozen=True)
class LeftAsIs:
    call_id: str
    tool: str
    why: str


Decided = Offered | LeftAsIs


def plan_compensation(
    status: RunStatus | None,
    written: list[Written],
    policy: CompensatePolicy,
    per_tool: dict[str, CompensatePolicy],
) -> list[Decided]:
    """What becomes of each write of a run that stops `status` (None: the model asked to roll
    back, and the run goes on), newest first: nothing after a delivery; otherwise each undo
    that can be offered is, under its tool's policy (or the run's), and every other write is
    left as is with the reason."""
    if status in DELIVERED:
        return []
    decided: list[Decided] = []
    for write in reversed(written):
        said = per_tool.get(write.tool, policy)
        if write.status == "unknown":
            why = "its outcome is unknown: an operator says whether it happened (resolve)"
        elif write.undo_tool is None:
            why = "no undo declared"
        elif write.undo_arguments is None:
            why = f"its undo could not be prepared: {write.problem}"
        elif write.undo_denied is not None:
            why = f"its undo is not allowed: {write.undo_denied}"
        elif said == "never":
            why = "compensate: never"
        else:
            undo = Offered(
                write.call_id, write.tool, write.undo_tool, write.undo_arguments, said == "ask"
            )
            decided.append(undo)
            continue
        decided.append(LeftAsIs(write.call_id, write.tool, why))
    return decided


def undo_arguments(
    parameters: dict[str, Any],
    arguments: dict[str, Any],
    result: str,
    idempotency_key: str,
) -> dict[str, Any] | str:
    """The undo tool's arguments (its JSON Schema `parameters`) from the original call: each
    parameter the result (a JSON object; a confirmed write's `record`) names, else one its
    arguments name, and `original_idempotency_key` the original key. A string says why none
    can be made (a required parameter neither names). `result` is the write's bounded result
    text (at most its tool's `max_result_chars`), so parsing it is bounded work."""
    fields = _result_fields(result)
    properties = parameters.get("properties")
    names = list(properties) if isinstance(properties, dict) else []
    made: dict[str, Any] = {}
    for name in names:
        if name == ORIGINAL_KEY:
            made[name] = idempotency_key
        elif name in fields:
            made[name] = fields[name]
        elif name in arguments:
            made[name] = arguments[name]
    required = parameters.get("required")
    missing = [n for n in required if n not in made] if isinstance(required, list) else []
    if missing:
        return f"neither the write's result nor its arguments name {', '.join(map(str, missing))}"
    return made


def _result_fields(result: str) -> dict[str, Any]:
    """The fields of a write's result: its JSON object, or the `record` a lookup confirmed."""
    try:
        value = json.loads(result)
    except ValueError:
        return {}
    if isinstance(value, dict) and "confirmed" in value and isinstance(value.get("record"), dict):
        value = value["record"]
    return value if isinstance(value, dict) else {}
