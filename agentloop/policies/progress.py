"""No-progress detection: iteration count is not progress (seed 001).

A turn's fingerprint is what it asked for and what came back: for each call the tool, the
digest of its exact arguments and a digest of its result. The loop is stalling when a turn
repeats an earlier turn's fingerprint (the same calls got the same answers again), or when
the same error keeps coming back. Pure: the loop keeps the fingerprints in run state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from agentloop.digests import sha256_hex
from agentloop.events import ToolCall, ToolResult
from agentloop.tool_spec import ToolSpec

REPEATED_ERROR_LIMIT = 3
"""The same error signature this many turns in a row is a stall."""


class TurnFingerprint(BaseModel):
    calls: list[str] = Field(default_factory=list)
    """`tool|args digest|result digest`, sorted: the order of parallel calls does not matter."""
    errors: list[str] = Field(default_factory=list)
    """`tool|error class|message digest` of the calls that failed."""
    polling: bool = False
    """Every call went to a tool that declares a polling policy."""


def fingerprint(
    calls: Sequence[ToolCall], results: Mapping[str, ToolResult], specs: Mapping[str, ToolSpec]
) -> TurnFingerprint:
    lines, errors = [], []
    for call in calls:
        result = results[call.call_id]
        lines.append(f"{call.name}|{call.args_digest}|{sha256_hex(result.content)[:16]}")
        if result.status not in ("succeeded", "confirmed_after_query"):
            errors.append(f"{call.name}|{result.error_class}|{sha256_hex(result.content)[:16]}")
    polling = bool(calls) and all(
        (spec := specs.get(call.name)) is not None and spec.poll_limit is not None for call in calls
    )
    return TurnFingerprint(calls=sorted(lines), errors=sorted(errors), polling=polling)


def stall(history: Sequence[TurnFingerprint], specs: Mapping[str, ToolSpec]) -> str | None:
    """What repeats, if the last turn shows no progress; None otherwise."""
    if not history:
        return None
    last = history[-1]
    earlier = history[:-1]
    repeats = sum(1 for turn in earlier if turn.calls == last.calls)
    if repeats and not (last.polling and repeats < _poll_limit(last, specs)):
        tools = sorted({line.split("|", 1)[0] for line in last.calls})
        return (
            f"the same call(s) to {', '.join(tools)} with the same arguments got the same "
            f"result as before ({repeats + 1} times)"
        )
    recent = history[-REPEATED_ERROR_LIMIT:]
    if (
        len(recent) == REPEATED_ERROR_LIMIT
        and recent[0].errors
        and all(turn.errors == recent[0].errors for turn in recent)
    ):
        return f"the same error came back {REPEATED_ERROR_LIMIT} turns in a row"
    return None


def _poll_limit(turn: TurnFingerprint, specs: Mapping[str, ToolSpec]) -> int:
    tools = {line.split("|", 1)[0] for line in turn.calls}
    return min((specs[t].poll_limit or 0) for t in tools if t in specs)
