"""What a run's watchers are told (docs/concepts/design.md §8): the stream items the workflow
publishes, read off the run state after each step, each change once.

Pure: the shell hands in the state, the step `decide` chose and the time, and publishes what
comes back. Nothing here decides anything; the stream is display.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from agentloop.digests import canonical_json
from agentloop.run_events import MAX_PREVIEW_CHARS, RunEvent, WaitReason
from agentloop.workflows.loop.next_step import (
    AwaitApproval,
    AwaitInput,
    AwaitReconciliation,
    Finish,
    NextStep,
)
from agentloop.workflows.loop.state import LoopState

NOT_AN_OUTCOME = frozenset({"pending", "running", "proposed"})
"""Call statuses that are no result yet."""


@dataclass
class Told:
    """What the watchers were told so far, kept by the shell (display state: never carried
    in `LoopState`, never decides)."""

    statuses: dict[str, str] = field(default_factory=dict)
    """Call id -> the last status published for it ("" once its `call` item went out)."""
    waiting: tuple[WaitReason, tuple[str, ...]] | None = None
    switches: int = 0
    """How many of the run's `model_switches` were published."""

    @classmethod
    def of(cls, state: LoopState) -> Told:
        """Everything `state` already holds counts as told: a run continued as new does not
        publish its predecessor's calls again."""
        return cls(
            statuses={call_id: call.status for call_id, call in state.calls.items()},
            switches=len(state.model_switches),
        )


def streaming(state: LoopState) -> bool:
    """Whether the run publishes on its stream."""
    return state.run_input.publish_events


def changes(state: LoopState, step: NextStep | None, told: Told, now: datetime) -> list[RunEvent]:
    """The items for what changed since `told` (which it updates): new calls, new outcomes,
    a wait beginning or ending, a move to the next model (first: it served the calls), the
    end. `step` None (the run continues as new): the calls
    and outcomes only, a wait going on in the next run."""
    events = [
        RunEvent(
            kind="fallback",
            turn=switch.turn,
            at=now,
            provider=switch.to_provider,
            model=switch.to_model,
            stop_reason=switch.said(),
        )
        for switch in state.model_switches[told.switches :]
    ]
    told.switches = len(state.model_switches)
    for call_id, call in state.calls.items():
        if call_id not in told.statuses:
            told.statuses[call_id] = ""
            events.append(
                RunEvent(
                    kind="call",
                    turn=call.turn or state.turn,
                    at=now,
                    call_id=call_id,
                    tool=call.tool,
                    arguments=preview_arguments(call.arguments),
                )
            )
        if call.status not in NOT_AN_OUTCOME and call.status != told.statuses[call_id]:
            told.statuses[call_id] = call.status
            events.append(
                RunEvent(
                    kind="result",
                    turn=call.turn or state.turn,
                    at=now,
                    call_id=call_id,
                    tool=call.tool,
                    status=call.status,
                    preview=call.result_summary[:MAX_PREVIEW_CHARS],
                )
            )
    waiting = _waiting_for(step) if step is not None else told.waiting
    if waiting != told.waiting:
        if told.waiting is not None:
            reason, call_ids = told.waiting
            events.append(_wait_event("resumed", state, now, reason, call_ids))
        if waiting is not None:
            reason, call_ids = waiting
            events.append(_wait_event("waiting", state, now, reason, call_ids))
        told.waiting = waiting
    if isinstance(step, Finish):
        events.append(
            RunEvent(
                kind="done",
                turn=state.turn,
                at=now,
                status=step.status,
                stop_reason=step.stop_reason,
            )
        )
    return events


def continued(state: LoopState, told: Told, now: datetime) -> list[RunEvent]:
    """What the watchers are told as the run continues as new: what changed, then that."""
    return [*changes(state, None, told, now), RunEvent(kind="continued", turn=state.turn, at=now)]


def preview_arguments(arguments: dict[str, object]) -> object:
    """The arguments as they are, or, past `MAX_PREVIEW_CHARS` of JSON, their start saying
    how long the whole is (the ledger and `status` hold them whole)."""
    written = canonical_json(arguments)
    if len(written) <= MAX_PREVIEW_CHARS:
        return arguments
    return f"{written[:MAX_PREVIEW_CHARS]}... ({len(written)} characters in all)"


def _waiting_for(step: NextStep) -> tuple[WaitReason, tuple[str, ...]] | None:
    match step:
        case AwaitApproval():
            return "approval", tuple(step.call_ids)
        case AwaitInput():
            return "input", tuple(step.call_ids)
        case AwaitReconciliation():
            return "reconciliation", tuple(step.call_ids)
        case _:
            return None


def _wait_event(
    kind: str, state: LoopState, now: datetime, reason: WaitReason, call_ids: tuple[str, ...]
) -> RunEvent:
    return RunEvent.model_validate(
        {"kind": kind, "turn": state.turn, "at": now, "reason": reason, "call_ids": call_ids}
    )
