"""Compensation folded into the run state (docs/concepts/compensation.md): a write's undo
prepared as its result comes in, the undos offered when the run ends without delivering (a
batch of writes like any other: approval under `ask`, an idempotency key, lookup and
reconciliation), and what they interrupted put back once they are done, so that the run
stops as it was going to. What to offer, in which order and under which policy is decided
by `policies.compensation` (`decide` asks it); nothing here decides it.
"""

from __future__ import annotations

from datetime import datetime

from agentloop.contract import CallRecord
from agentloop.digests import args_digest
from agentloop.events import ModelOutput, ToolCall, ToolResult
from agentloop.policies.compensation import Offered, undo_arguments
from agentloop.workflows.loop.next_step import Compensate
from agentloop.workflows.loop.plan import pending_approval
from agentloop.workflows.loop.state import Batch, Compensation, LoopState, Undo
from agentloop.workflows.loop.views import compensation_line

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


def start_compensation(state: LoopState, step: Compensate, now: datetime) -> None:
    """The run stops as `step.finish` says once the offered undos are done: they become the
    open batch (newest first, as the writes they undo ran newest last), each an undo call in
    the ledger; under `ask` each waits for a person's approval with its exact arguments.
    A cancel that stopped the run is in its stop reason: one that comes now stops the undos
    not yet run."""
    finish = step.finish
    offered = [d for d in step.decided if isinstance(d, Offered)]
    state.compensation = Compensation(
        status=finish.status,
        stop_reason=finish.stop_reason,
        cause=finish.cause,
        lines=[compensation_line(d) for d in step.decided],
        interrupted_batch=state.batch,
        interrupted_output=state.last_output,
    )
    state.cancel_reason = None
    state.phase = "compensating"
    calls = [
        ToolCall(
            call_id=undo.undo_call_id,
            name=undo.undo_tool,
            arguments=undo.arguments,
            args_digest=args_digest(undo.undo_tool, undo.arguments),
        )
        for undo in offered
    ]
    batch = Batch(order=[c.call_id for c in calls], writes=[c.call_id for c in calls])
    for undo, call in zip(offered, calls, strict=True):
        spec = state.tool_spec(undo.undo_tool)
        assert spec is not None  # offered only with a prepared undo (`keep_undo`)
        state.calls[call.call_id] = CallRecord(
            call_id=call.call_id,
            tool=call.name,
            tool_version=spec.version,
            args_digest=call.args_digest,
            arguments=call.arguments,
            decision=f"undo of {undo.call_id}",
            status="proposed",
            turn=state.turn,
            undoes=undo.call_id,
        )
        if undo.ask:
            batch.approvals[call.call_id] = pending_approval(call, spec, now)
    state.batch = batch
    # The undos are no model's calls: this output is the runner's, never sent to a model.
    state.last_output = ModelOutput(tool_calls=calls, stop="tool_calls")


def close_compensation(state: LoopState) -> None:
    """Once every undo has its result, the run stops: what the undos interrupted is put
    back (their results go to no model)."""
    batch = state.batch
    if batch is not None and len(batch.results) < len(batch.order):
        return
    end_compensation(state)


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
