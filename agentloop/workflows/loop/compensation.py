"""Compensation folded into the run state (docs/concepts/compensation.md): the undos offered
when the run ends without delivering or the model asks to roll back (a batch of writes like
any other: approval under `ask`, an idempotency key, lookup and reconciliation). What they
interrupted is put back once they are done (`settle.close_if_answered`), so that the run
stops as it was going to, or goes on after a roll back. What to offer, in which order and
under which policy is decided by `policies.compensation` (`decide` asks it); nothing here
decides it.
"""

from __future__ import annotations

from datetime import datetime

from agentloop.contract import CallRecord
from agentloop.digests import args_digest
from agentloop.events import ModelOutput, ToolCall
from agentloop.policies.compensation import Offered
from agentloop.workflows.loop.next_step import Compensate
from agentloop.workflows.loop.plan import pending_approval
from agentloop.workflows.loop.settle import close_if_answered
from agentloop.workflows.loop.state import Batch, Compensation, LoopState
from agentloop.workflows.loop.views import compensation_line


def start_compensation(state: LoopState, step: Compensate, now: datetime) -> None:
    """The run stops as `step.finish` says (or, after a roll back, goes on) once the offered
    undos are done: they become the open batch (newest first, as the writes they undo ran
    newest last), each an undo call in the ledger; under `ask` each waits for a person's
    approval with its exact arguments. A cancel that stopped the run is in its stop reason:
    one that comes now stops the undos not yet run."""
    finish = step.finish
    offered = [d for d in step.decided if isinstance(d, Offered)]
    state.compensation = Compensation(
        status=finish.status if finish else None,
        stop_reason=finish.stop_reason if finish else "",
        cause=finish.cause if finish else None,
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
    close_if_answered(state)  # nothing offered (a roll back with nothing to undo): done
