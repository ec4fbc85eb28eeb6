"""Settling a batch: each call id gets its one result, and once every call of the batch is
answered the results go to the model in the call order (then the stall check runs).
"""

from __future__ import annotations

import json

from agentloop.events import StateUpdate, ToolResult
from agentloop.policies import progress, task_state
from agentloop.policies.compensation import undo_arguments
from agentloop.workflows.loop.edits import edit_notes
from agentloop.workflows.loop.state import SUMMARY_CHARS, Batch, Compensation, LoopState, Undo
from agentloop.workflows.loop.stops import stopping_rejection
from agentloop.workflows.loop.views import compensation_lines


def settle(state: LoopState, batch: Batch, result: ToolResult) -> None:
    batch.results[result.call_id] = result
    if result.state:
        document = task_state.merged(state.task_state, result.state)
        # An update that would pass a bound is not applied: the document stays as it was.
        if not isinstance(document, str):
            state.task_state = document
    if result.artifact_ref and result.artifact_ref not in state.artifacts:
        state.artifacts.append(result.artifact_ref)
    record = state.calls[result.call_id]
    record.status = result.status
    record.result_summary = result.content[:SUMMARY_CHARS]
    keep_undo(state, result)
    record.redacted = dict(result.redacted)
    record.redacted_original = result.original_ref


def leave_batch(batch: Batch, call_id: str) -> None:
    """A call that is answered before it ran (refused) is no longer waiting for anything."""
    for queue in (batch.reads, batch.writes, batch.questions, batch.unknown):
        if call_id in queue:
            queue.remove(call_id)
    for pending in (batch.approvals, batch.asking, batch.replies):
        pending.pop(call_id, None)


def close_if_answered(state: LoopState) -> None:
    """Once every call id has its result, the results go to the model in the call order.
    Undos go to no model: once they are all answered, what they interrupted is the run's
    again; after a roll back, the `roll_back` call is answered and the batch goes on."""
    compensation = state.compensation
    if compensation is not None:
        undos = state.batch
        if undos is not None and len(undos.results) < len(undos.order):
            return
        end_compensation(state)
        if compensation.status is not None:
            return  # the run stops as it was going to
        _answer_roll_back(state, compensation)
    batch = state.batch
    if batch is None or batch.denied is not None or batch.gave_up is not None:
        return  # the run stops: nothing more goes to the model
    if len(batch.results) < len(batch.order):
        return
    if stopping_rejection(state, batch) is not None:
        return  # the run stops `rejected`; nothing more goes to the model
    state.outbox.extend(batch.results[call_id] for call_id in batch.order)
    state.outbox.extend(edit_notes(state, batch))
    _check_progress(state, batch)
    state.batch = None
    state.last_output = None


def _check_progress(state: LoopState, batch: Batch) -> None:
    """One nudge the first time the loop repeats itself; the second time, the run stops."""
    assert state.last_output is not None
    turn = progress.fingerprint(state.last_output.tool_calls, batch.results, state.tools)
    turn = turn.model_copy(update={"state": task_state.state_hash(state.task_state)})
    state.progress.append(turn)
    repeating = progress.stall(state.progress, state.tools)
    if repeating is None:
        return
    if state.nudged:
        state.stalled = repeating
        return
    state.nudged = True
    state.outbox.append(
        StateUpdate(
            kind="nudge",
            text=f"No progress: {repeating}. Do not repeat it: change your approach, or give "
            "your final answer with what you know.",
        )
    )


UNDONE_STATUSES = ("succeeded", "confirmed_after_query")


def keep_undo(state: LoopState, result: ToolResult) -> None:
    """A write that succeeded and declares an undo: its undo call, prepared now from the
    call's arguments, result and idempotency key (the result is not kept after its batch)."""
    record = state.calls[result.call_id]
    spec = state.tool_spec(record.tool)  # None: a call of an unknown tool, refused
    if spec is None or spec.compensate is None or record.undoes:
        return
    if result.status not in UNDONE_STATUSES:
        return
    undo_spec = state.tool_spec(spec.compensate)
    if undo_spec is None:  # describe_run gives every run the undos of its tools
        made: dict[str, object] | str = f"the run does not know the tool {spec.compensate}"
    else:
        arguments = state.call(result.call_id).arguments
        made = undo_arguments(
            undo_spec.parameters, arguments, result.content, record.idempotency_key
        )
    state.undos.append(
        Undo(
            call_id=result.call_id,
            tool=record.tool,
            undo_tool=spec.compensate,
            arguments=made if isinstance(made, dict) else None,
            problem=made if isinstance(made, str) else "",
        )
    )


def end_compensation(state: LoopState) -> None:
    """The undos are over (all done, or the run stops before the rest): the batch and output
    they interrupted are the run's again, for the stop to report as it would have."""
    compensation = state.compensation
    if compensation is None or compensation.closed:
        return
    state.batch = compensation.interrupted_batch
    state.last_output = compensation.interrupted_output
    compensation.interrupted_batch = None
    compensation.interrupted_output = None
    compensation.closed = True


def _answer_roll_back(state: LoopState, compensation: Compensation) -> None:
    """The model's `roll_back` call answered with what became of each write; the lines stay
    for the stop report."""
    lines = compensation_lines(state)
    state.rolled_back = [*lines, *state.rolled_back]
    state.compensation = None
    batch = state.open_batch()
    call_id = batch.roll_back
    assert call_id is not None
    said = [line.model_dump(include={"call_id", "tool", "outcome", "why"}) for line in lines]
    content = json.dumps({"rolled_back": said or "no write of this run can be undone"})
    result = ToolResult(call_id=call_id, tool=state.call(call_id).name, content=content)
    settle(state, batch, result)
