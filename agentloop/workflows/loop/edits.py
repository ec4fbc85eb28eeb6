"""An approver's edit of a call before approving it ("yes, but 450 not 500").

The edited call is validated again like a model's before the decision counts: here, pure, the
whitelist, schema, scope, a rejected action and the ledger's bound; in the worker, the tool's
precondition (team code, `workflows/approvals.py`). Once it counts, the call runs with the
edited arguments under the same call id (and idempotency key), the ledger keeps both versions,
and the model is told, after the batch's results, that the call ran with the approver's
arguments and which changed.
"""

from __future__ import annotations

import json
from typing import Any

from agentloop.contract import ApprovalDecision, ApprovalRecord
from agentloop.digests import args_digest, canonical_json
from agentloop.events import StateUpdate, ToolCall
from agentloop.policies import authorization
from agentloop.policies.bounds import MAX_LEDGER_ARGUMENT_BYTES
from agentloop.policies.validation import Allowed, validate_call
from agentloop.workflows.loop.plan import action_digest
from agentloop.workflows.loop.state import Batch, LoopState

EDIT_NOTE = "approver_edit"
"""The `kind` of the runner note telling the model a call ran with the approver's arguments."""


def edited_call(state: LoopState, decision: ApprovalDecision) -> ToolCall | None:
    """The call `decision` approves with edited arguments (None: not an edited approval)."""
    if not decision.approved or decision.edited_arguments is None or state.last_output is None:
        return None
    proposed = next(
        (c for c in state.last_output.tool_calls if c.call_id == decision.call_id), None
    )
    if proposed is None:  # judged elsewhere: no such call waits
        return None
    arguments = decision.edited_arguments
    return ToolCall(
        call_id=proposed.call_id,
        name=proposed.name,
        arguments=arguments,
        raw_arguments=canonical_json(arguments),
        args_digest=args_digest(proposed.name, arguments),
    )


def edit_problem(state: LoopState, decision: ApprovalDecision) -> str | None:
    """Why the edited call of `decision` may not run (None: it may, or there is no edit):
    what the workflow checks of a model's call, before the worker checks its precondition."""
    call = edited_call(state, decision)
    if call is None:
        return None
    whitelist = {*state.run_input.tools, *state.builtin_tools}
    verdict = validate_call(call, state.tools, whitelist)
    if not isinstance(verdict, Allowed):
        return f"the edited call is refused: {verdict.message}"
    denied = authorization.denial(verdict.spec, state.run_input.principal)
    if denied:
        return f"the edited call is refused: {denied}"
    if action_digest(verdict.spec, call.arguments) in state.rejected_actions:
        return "the edited call is refused: an approver rejected this exact action in this run"
    held = state.argument_bytes + len(canonical_json(call.arguments).encode("utf-8", "replace"))
    if held > MAX_LEDGER_ARGUMENT_BYTES:
        return (
            f"the edited call is refused: the run would hold {held} bytes of tool-call "
            f"arguments, over the {MAX_LEDGER_ARGUMENT_BYTES} a run may hold"
        )
    return None


def apply_edit(state: LoopState, decision: ApprovalDecision, record: ApprovalRecord) -> None:
    """The call runs with the edited arguments from now on; the ledger keeps both versions."""
    call = edited_call(state, decision)
    if call is None:
        return
    assert state.last_output is not None
    ledger = state.calls[call.call_id]
    record.proposed_arguments = dict(ledger.arguments)
    record.proposed_digest = ledger.args_digest
    ledger.arguments = dict(call.arguments)
    ledger.args_digest = call.args_digest
    state.argument_bytes += len(canonical_json(call.arguments).encode("utf-8", "replace"))
    calls = [call if c.call_id == call.call_id else c for c in state.last_output.tool_calls]
    state.last_output = state.last_output.model_copy(update={"tool_calls": calls})


def edit_notes(state: LoopState, batch: Batch) -> list[StateUpdate]:
    """For each call of `batch` an approver edited: that it ran (or was answered) with the
    approver's arguments, and which changed."""
    notes: list[StateUpdate] = []
    for call_id in batch.order:
        approval = state.calls[call_id].approval
        if approval is None or approval.proposed_arguments is None:
            continue
        arguments = state.calls[call_id].arguments
        changed = changed_fields(approval.proposed_arguments, arguments)
        notes.append(
            StateUpdate(
                kind=EDIT_NOTE,
                text=(
                    f"Call {call_id} ran with the arguments its approver {approval.approver} "
                    f"set, not the ones you proposed: {json.dumps(arguments, sort_keys=True)} "
                    f"(changed: {', '.join(changed) or 'none'})."
                ),
                data={"call_id": call_id, "arguments": arguments, "changed": changed},
            )
        )
    return notes


def changed_fields(proposed: dict[str, Any], edited: dict[str, Any]) -> list[str]:
    """The top-level argument names whose value the edit changed, added or removed."""
    names = sorted({*proposed, *edited})
    return [name for name in names if proposed.get(name, _ABSENT) != edited.get(name, _ABSENT)]


_ABSENT = object()
