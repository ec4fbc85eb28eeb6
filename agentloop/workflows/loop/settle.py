"""Settling a batch: each call id gets its one result, and once every call of the batch is
answered the results go to the model in the call order (then the stall check runs).
"""

from __future__ import annotations

from agentloop.events import StateUpdate, ToolResult
from agentloop.policies import progress, task_state
from agentloop.workflows.loop.compensation import close_compensation, keep_undo
from agentloop.workflows.loop.state import SUMMARY_CHARS, Batch, LoopState
from agentloop.workflows.loop.stops import stopping_rejection


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


def leave_batch(batch: Batch, call_id: str) -> None:
    """A call that is answered before it ran (refused) is no longer waiting for anything."""
    for queue in (batch.reads, batch.writes, batch.questions, batch.unknown):
        if call_id in queue:
            queue.remove(call_id)
    for pending in (batch.approvals, batch.asking, batch.replies):
        pending.pop(call_id, None)


def close_if_answered(state: LoopState) -> None:
    """Once every call id has its result, the results go to the model in the call order
    (the undos of a run that stops go to no model: `close_compensation`)."""
    if state.compensation is not None:
        close_compensation(state)
        return
    batch = state.batch
    if batch is None or batch.denied is not None or batch.gave_up is not None:
        return  # the run stops: nothing more goes to the model
    if len(batch.results) < len(batch.order):
        return
    if stopping_rejection(state, batch) is not None:
        return  # the run stops `rejected`; nothing more goes to the model
    state.outbox.extend(batch.results[call_id] for call_id in batch.order)
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
