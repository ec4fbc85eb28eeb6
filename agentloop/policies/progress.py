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
from agentloop.tool_spec import ASK_USER, READ_ARTIFACT, ToolSpec

REPEATED_ERROR_LIMIT = 3
"""The same error signature this many turns in a row is a stall."""
STATE_STALL_TURNS = 3
"""Tool turns in a row that leave a run's task state as it was: a stall (seed 001, "the
state hash does not change"), once tools have set any state."""
FLIP_TURNS = 4
"""Turns alternating between the same two sets of actions (A, B, A, B): a stall (seed 001,
"the plan keeps switching")."""


class TurnFingerprint(BaseModel):
    calls: list[str] = Field(default_factory=list)
    """`tool|args digest|result digest`, sorted: the order of parallel calls does not matter."""
    errors: list[str] = Field(default_factory=list)
    """`tool|error class|message digest` of the calls that failed."""
    polling: bool = False
    """Every call went to a tool that declares a polling policy."""
    actions: list[str] = Field(default_factory=list)
    """`tool|args digest`, sorted: what the turn asked for, whatever came back."""
    state: str = ""
    """The hash of the task state after the turn (`task_state.state_hash`; "" for none)."""


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
    actions = sorted(f"{call.name}|{call.args_digest}" for call in calls)
    return TurnFingerprint(
        calls=sorted(lines), errors=sorted(errors), polling=polling, actions=actions
    )


def stall(
    history: Sequence[TurnFingerprint],
    specs: Mapping[str, ToolSpec],
) -> str | None:
    """What repeats, if the last turn shows no progress; None otherwise: the same calls with
    the same results, the same error, the task state unchanged for `STATE_STALL_TURNS` tool
    turns (a turn that only asked the person does not count), the plan's flips."""
    if not history:
        return None
    found = _state_stall(history)
    if found is not None:
        return found
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


def _state_stall(history: Sequence[TurnFingerprint]) -> str | None:
    # Paging through an artifact or polling is progress of its own kind, and a person's
    # answers are new input the state need not show: such turns are not counted.
    quiet = {READ_ARTIFACT, ASK_USER}
    acting = [t for t in history if not t.polling and not _only_calls_to(t, quiet)]
    recent = acting[-STATE_STALL_TURNS - 1 :]
    # The turn before the window shows the state they all left unchanged.
    unchanged = len(recent) == STATE_STALL_TURNS + 1 and bool(recent[0].state)
    if unchanged and all(turn.state == recent[0].state for turn in recent):
        return f"the task state did not change in {STATE_STALL_TURNS} tool turns"
    flips = history[-FLIP_TURNS:]
    if len(flips) == FLIP_TURNS:
        a, b = flips[0].actions, flips[1].actions
        if a != b and all(turn.actions == (a, b)[i % 2] for i, turn in enumerate(flips)):
            return "the plan flips between the same two actions"
    return None


def _only_calls_to(turn: TurnFingerprint, tools: set[str]) -> bool:
    return bool(turn.actions) and all(a.split("|", 1)[0] in tools for a in turn.actions)


def _poll_limit(turn: TurnFingerprint, specs: Mapping[str, ToolSpec]) -> int:
    tools = {line.split("|", 1)[0] for line in turn.calls}
    return min((specs[t].poll_limit or 0) for t in tools if t in specs)
