"""A model output's tool calls become a batch: validation, authorization, budget reservation
and approvals, before anything runs (docs/concepts/design.md §3, steps 5 and 6).

`plan_batch` answers with a typed outcome: the planned batch (with the runner's decision on
each call), a protocol violation that ends the run, or a budget the batch does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentloop.contract import PendingApproval, Reconciliation, UnresolvedWrite
from agentloop.digests import args_digest, canonical_json
from agentloop.events import ModelOutput, ToolCall, ToolResult
from agentloop.policies import approval, authorization, budgets
from agentloop.policies.bounds import MAX_LEDGER_ARGUMENT_BYTES
from agentloop.policies.validation import MAX_CHECK_STEPS, Allowed, Refused, validate_call
from agentloop.tool_spec import ASK_USER, DELEGATE, GIVE_UP, READ_ARTIFACT, ROLL_BACK, ToolSpec
from agentloop.workflows.loop import results
from agentloop.workflows.loop.state import Batch, LoopState


@dataclass
class Planned:
    batch: Batch
    decisions: dict[str, str] = field(default_factory=dict)
    """Call id -> why the runner refused it (`unknown_tool`, `permission`, ...); a call not
    named here is `allowed`."""
    argument_bytes: int = 0
    """What the output's calls add to the ledger's arguments (0 without it)."""

    def refuse(self, call: ToolCall, result: ToolResult, decision: str) -> None:
        self.batch.results[call.call_id] = result
        self.decisions[call.call_id] = decision


@dataclass(frozen=True)
class ProtocolViolation:
    """The provider's calls cannot be trusted (empty, repeated or reused call ids)."""

    reason: str


@dataclass(frozen=True)
class OverBudget:
    """The batch does not fit what is left of the run's budget: nothing of it starts."""

    reason: str


PlanOutcome = Planned | ProtocolViolation | OverBudget


def argument_bytes(output: ModelOutput) -> int:
    """The size of the arguments of `output`'s calls, as the ledger will hold them."""
    return sum(
        len(canonical_json(call.arguments).encode("utf-8", "replace")) for call in output.tool_calls
    )


def plan_batch(state: LoopState, output: ModelOutput, now: datetime) -> PlanOutcome:
    """Validate every proposed call before anything runs."""
    ids = [call.call_id for call in output.tool_calls]
    # Results pair with calls by id alone, and a write's idempotency key derives from it: an
    # id that is empty, repeated, or reused from an earlier turn cannot be trusted.
    if "" in ids or len(set(ids)) != len(ids):
        return ProtocolViolation(f"protocol: tool calls without unique call ids: {ids}")
    reused = sorted(set(ids) & state.calls.keys())
    if reused:
        return ProtocolViolation(f"protocol: call ids reused from an earlier turn: {reused}")
    size = argument_bytes(output)
    ledger = state.argument_bytes + size
    if size and ledger > MAX_LEDGER_ARGUMENT_BYTES:
        return OverBudget(
            f"ledger: with this output's calls the run would hold {ledger} bytes of tool-call"
            f" arguments, over the {MAX_LEDGER_ARGUMENT_BYTES} a run may hold"
        )
    planned = Planned(Batch(order=ids), argument_bytes=size)
    allowed: list[tuple[ToolCall, ToolSpec]] = []
    principal = state.run_input.principal
    whitelist = {*state.run_input.tools, *state.builtin_tools}
    # One workflow task checks all of an output's calls: each gets an even share of the steps
    # (what one call may cost does not depend on the calls beside it).
    steps = MAX_CHECK_STEPS // max(len(output.tool_calls), 1)
    for call in output.tool_calls:
        verdict = validate_call(call, state.tools, whitelist, steps=steps)
        if isinstance(verdict, Allowed) and call.name == READ_ARTIFACT:
            verdict = _own_artifact(state, call) or verdict
        if not isinstance(verdict, Allowed):
            planned.refuse(
                call,
                results.refusal(call, verdict.error_class, verdict.message),
                verdict.error_class,
            )
            continue
        spec = verdict.spec
        denied = authorization.denial(spec, principal)
        if denied:
            return _deny_all(planned, output, call, denied)
        if call.name == DELEGATE:
            problem = _delegation_problem(state, call)
            if problem:
                planned.refuse(
                    call, results.refusal(call, "invalid_arguments", problem), "invalid_arguments"
                )
                continue
        if action_digest(spec, call.arguments) in state.rejected_actions:
            message = (
                "an approver rejected this exact action in this run; "
                "it will not run, under this tool or another"
            )
            planned.refuse(
                call, results.refusal(call, "rejected_action", message), "rejected_action"
            )
            continue
        allowed.append((call, spec))
    gave_up = next((call for call, _ in allowed if call.name == GIVE_UP), None)
    if gave_up is not None:
        return _give_up(planned, output, gave_up)
    rolling_back = next((call for call, _ in allowed if call.name == ROLL_BACK), None)
    if rolling_back is not None:
        return _roll_back(planned, output, rolling_back)
    questions = [call for call, _ in allowed if call.name == ASK_USER]
    allowed = [(call, spec) for call, spec in allowed if call.name != ASK_USER]
    blocked = budgets.tool_batch_blocked(
        state.run_input.limits,
        state.usage,
        state.used_per_tool(),
        [c.name for c, _ in allowed],
        {spec.name: spec.max_calls_per_run for _, spec in allowed},
    )
    blocked = blocked or budgets.children_blocked(
        state.run_input.limits, state.usage, sum(1 for c, _ in allowed if c.name == DELEGATE)
    )
    if blocked is not None:
        return OverBudget(blocked.sentence)
    batch = planned.batch
    batch.questions = [call.call_id for call in questions]
    batch.asked_at = now if questions else None
    for call, spec in allowed:
        write = spec.effect == "write"
        held = (
            state.inherited_unresolved.get(action_digest(spec, call.arguments)) if write else None
        )
        if held is not None:
            batch.reconciling[call.call_id] = _held(call, held, now)
            continue
        rule = spec.needs_approval if write and isinstance(spec.needs_approval, str) else None
        if rule is not None:
            # The rule is the team's code: the worker evaluates it, the verdict is recorded.
            batch.assessing[call.call_id] = rule
        if spec.has_precondition or call.call_id in batch.assessing:
            batch.unchecked.append(call.call_id)
        (batch.reads if spec.effect == "read" else batch.writes).append(call.call_id)
        if (
            write
            and call.call_id not in batch.assessing
            and approval.needs_approval(spec, call.arguments, principal)
        ):
            batch.approvals[call.call_id] = pending_approval(call, spec, now)
    return planned


def pending_approval(call: ToolCall, spec: ToolSpec, now: datetime) -> PendingApproval:
    return PendingApproval(
        call_id=call.call_id,
        tool=call.name,
        arguments=call.arguments,
        args_digest=call.args_digest,
        approvers=spec.approvers,
        requested_at=now,
    )


def _held(call: ToolCall, held: UnresolvedWrite, now: datetime) -> Reconciliation:
    """The same action as a write whose outcome stayed unknown in the run this one continues:
    it waits for an operator's word on that write, and is never sent again blindly."""
    return Reconciliation(
        call_id=call.call_id,
        tool=call.name,
        idempotency_key=held.idempotency_key,
        known=f"the same action ({held.tool} {held.call_id} of run {held.workflow_id}) has an "
        "unknown outcome: say whether it happened before anything is sent again",
        since=now,
    )


def action_digest(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    """What a rejection (or an unknown outcome) is remembered by: the action in the world
    and its exact arguments, whichever tool names it."""
    return args_digest(spec.action_name, dict(arguments))


def _delegation_problem(state: LoopState, call: ToolCall) -> str | None:
    """A child run gets a subset of this run's tools, never `delegate` itself: no escalation,
    no unbounded nesting."""
    own = [name for name in state.run_input.tools if name != DELEGATE]
    extra = sorted(set(call.arguments.get("tools", [])) - set(own))
    if extra:
        return f"tools {extra} cannot be delegated; choose from {own}"
    return None


def _own_artifact(state: LoopState, call: ToolCall) -> Refused | None:
    """A run reads only the artifacts its own tool results were cut into."""
    ref = call.arguments.get("ref")
    if ref in state.artifacts:
        return None
    return Refused("invalid_arguments", f"no artifact {ref!r} belongs to this run")


def _deny_all(planned: Planned, output: ModelOutput, denied_call: ToolCall, reason: str) -> Planned:
    """Authorization refused one call: every call id of the batch is answered, none runs."""
    for call in output.tool_calls:
        message = (
            reason
            if call is denied_call
            else f"not run: call {denied_call.call_id} of the same batch was denied"
        )
        planned.refuse(call, results.denial(call, message), "permission")
    planned.batch.denied = reason
    return planned


def _give_up(planned: Planned, output: ModelOutput, gave_up: ToolCall) -> Planned:
    """The model said it cannot finish (`give_up`): every call id of the batch is answered,
    none of the others runs, and the run stops `blocked` with the model's reason."""
    reason = str(gave_up.arguments["reason"])
    planned.batch.results[gave_up.call_id] = results.gave_up(gave_up, reason)
    planned.batch.gave_up = reason
    return _alone(planned, output, gave_up, "the model gave up")


def _roll_back(planned: Planned, output: ModelOutput, rolling_back: ToolCall) -> Planned:
    """The model asked to undo its writes (`roll_back`): none of the batch's other calls
    runs; the undos are offered, and the call's result says what became of each write."""
    planned.batch.roll_back = rolling_back.call_id
    return _alone(planned, output, rolling_back, "the model asked to roll back")


def _alone(planned: Planned, output: ModelOutput, kept: ToolCall, what: str) -> Planned:
    """Every call of the batch but `kept` is answered as not run, saying `what` happened."""
    for call in output.tool_calls:
        if call is not kept and call.call_id not in planned.batch.results:
            message = f"not run: {what} in call {kept.call_id} of the same output"
            planned.refuse(call, results.refusal(call, "not_run", message), "not_run")
    return planned
