"""The loop as a pure state machine: `decide(state, now) -> NextStep`.

This is DESIGN.md §3 "The loop, one turn" written as code with no Temporal in it, so every rule
is unit-tested without a server and the workflow shell only carries out what is decided here.
The `record_*` functions fold what an operation returned back into the state.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from agentloop.context import chars_per_token
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    CallRecord,
    Limits,
    Phase,
    PreviousRun,
    ResolveRequest,
    RunStatus,
    Usage,
    UserMessage,
)
from agentloop.digests import args_digest
from agentloop.events import (
    ErrorClass,
    Event,
    Instruction,
    ModelOutput,
    StateUpdate,
    ToolCall,
    ToolResult,
    UserInput,
)
from agentloop.policies import approval, authorization, budgets, progress
from agentloop.policies.approval import PendingApproval
from agentloop.policies.progress import TurnFingerprint
from agentloop.policies.validation import Allowed, Refused, schema_problems, validate_call
from agentloop.store.transcript import ROOT
from agentloop.tools.contract import BUILTIN_TOOLS, DELEGATE, Outcome, ToolSpec, bounded

FEATURES = (
    "stall-detection",
    "tool-error-classes",
    "local-reads",
    "run-deadline-timer",
    "phase-when-waiting",
)
"""Patch ids of behaviours that change what an existing run would do (see `features`); a run
started before `FEATURE_SET` asks `workflow.patched` for each."""

LOCAL_DESCRIBE = "local-describe-tools"
"""The tool specs are read by a local activity, inside the run's first workflow task."""

FEATURE_SET = "features-2026-11"
"""One patch id for every behaviour in `FEATURES_OF_SET` (and each built-in tool's patch): a
run started from it on records one patch marker, and one `TemporalChangeVersion` upsert,
instead of one of each per behaviour (14 of a 2-turn run's 39 events before). A behaviour added
later gets a new set whose id is asked for first; runs of this set replay with this one."""

BUILTIN_TOOL_PATCHES = (("read_artifact", "builtin-tools"), ("ask_user", "ask-user"))
"""Each built-in tool and the patch that introduced it: older runs replay without it."""

FEATURES_OF_SET = (*(patch for _, patch in BUILTIN_TOOL_PATCHES), *FEATURES, LOCAL_DESCRIBE)


def runs_locally(state: LoopState, specs: Iterable[ToolSpec]) -> bool:
    """A batch made only of reads their tools declare `local` runs as Temporal local
    activities, inside the workflow task (runs started before that existed keep running every
    tool as an activity). A mixed batch does not: its activities are only scheduled when the
    workflow task ends, which waits for the local ones, so nothing would run side by side."""
    return "local-reads" in state.features and all(
        spec.local and spec.effect == "read" for spec in specs
    )


MAX_REFUSED_CALLS = 8
"""Calls refused before running (unknown tool, bad arguments, failed precondition, a rejected
action) go back to the model as errors; past this many in a run, the run stops."""

MAX_OUTPUT_CORRECTIONS = 2
"""How many times a final answer that breaks `output_schema` goes back to the model."""

SUMMARY_CHARS = 200


MAX_WRITE_ATTEMPTS = 2
"""A write the system of record says definitely did not happen is sent again (same key) at
most this many times in all."""


class Reconciliation(BaseModel):
    call_id: str
    tool: str
    idempotency_key: str
    known: str
    """What the runner knows: why the outcome is still unknown."""
    since: datetime


class Delegation(BaseModel):
    """A sub-task handed to a child run: what it was given, and what it reported."""

    child_workflow_id: str
    limits: Limits
    """The child's slice of this run's budget."""
    status: str = "running"
    stop_reason: str = ""
    usage: Usage = Field(default_factory=Usage)
    """What the child used, charged to this run (its whole slice when it did not say)."""
    tools_used: dict[str, int] = Field(default_factory=dict)
    side_effects: list[dict[str, Any]] = Field(default_factory=list)

    def whole_slice(self) -> Usage:
        """The child's slice spent to the last unit: what it may still use while it runs,
        and what it is charged when it ends without saying what it used."""
        return Usage(
            model_calls=self.limits.max_model_calls,
            tool_calls=self.limits.max_tool_calls,
            input_tokens=self.limits.max_total_tokens or 0,
            cost_usd=self.limits.max_cost_usd or 0.0,
        )


def started_per_tool(calls: Iterable[CallRecord]) -> Counter[str]:
    return Counter(r.tool for r in calls if r.attempts > 0)


def _add(total: Usage, more: Usage) -> None:
    for field in Usage.model_fields:
        setattr(total, field, getattr(total, field) + getattr(more, field))


class Batch(BaseModel):
    """One model output's tool calls, from validation to the last result.

    The pipeline: validation (whitelist, schema, scope, rejected actions) when the output
    arrives; then business preconditions; then the reads (in parallel); then the approvals of
    the writes; then the writes, one at a time in the model's order. Every call id ends with
    exactly one result."""

    order: list[str]
    """Call ids in the model's order."""
    results: dict[str, ToolResult] = Field(default_factory=dict)
    unchecked: list[str] = Field(default_factory=list)
    """Allowed calls whose business precondition has not been checked yet."""
    reads: list[str] = Field(default_factory=list)
    """Allowed reads not run yet."""
    writes: list[str] = Field(default_factory=list)
    """Allowed writes not run yet, in the model's order."""
    approvals: dict[str, PendingApproval] = Field(default_factory=dict)
    decisions: dict[str, ApprovalDecision] = Field(default_factory=dict)
    questions: list[str] = Field(default_factory=list)
    """`ask_user` calls waiting for the user's `message`."""
    asked_at: datetime | None = None
    unknown: list[str] = Field(default_factory=list)
    """Writes whose outcome is unknown: the system of record is asked before anything else."""
    reconciling: dict[str, Reconciliation] = Field(default_factory=dict)
    """Writes the lookup could not settle: they wait for an operator's `resolve`."""
    denied: str | None = None
    """Set when authorization refused a call: the whole batch is answered and the run stops."""

    def undecided(self) -> list[str]:
        return [call_id for call_id in self.approvals if call_id not in self.decisions]


class LoopState(BaseModel):
    """Run state (DESIGN.md §1): everything the runner decides from, nothing the model reads."""

    run_input: AgentRunInput
    workflow_id: str = ""
    """Stable across retries, restarts and continue-as-new: write idempotency keys derive
    from it and the call id."""
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    builtin_tools: list[str] = Field(default_factory=list)
    """Tools this run may call without naming them (`read_artifact`)."""
    features: list[str] = Field(default_factory=lambda: list(FEATURES))
    """Behaviours added after runs already existed, switched on per run (the shell asks
    `workflow.patched` for each), so runs started before them replay unchanged."""
    progress: list[TurnFingerprint] = Field(default_factory=list)
    nudged: bool = False
    stalled: str | None = None
    started_at: datetime
    phase: Phase = "calling_model"
    turn: int = 0
    head: str = ROOT
    """Key of the last transcript node the store holds for this run."""
    outbox: list[Event] = Field(default_factory=list)
    """Events the model has not seen yet; they ride inline in the next model call."""
    last_output: ModelOutput | None = None
    """The model output not yet acted on; None when the next step is a model call."""
    usage: Usage = Field(default_factory=Usage)
    calls: dict[str, CallRecord] = Field(default_factory=dict)
    batch: Batch | None = None
    """The tool calls of `last_output` on their way through the pipeline."""
    refused_decisions: list[dict[str, Any]] = Field(default_factory=list)
    """Approval decisions that changed nothing, and why (shown in `status`)."""
    artifacts: list[str] = Field(default_factory=list)
    """References of the artifacts this run's tool results were cut into (`read_artifact`
    reads only these)."""
    rejected_actions: list[str] = Field(default_factory=list)
    """Digests of (action, arguments) an approver rejected: never run in this run."""
    delegations: dict[str, Delegation] = Field(default_factory=dict)
    """`delegate` calls by call id: the child runs and what they used."""
    run_chain: list[str] = Field(default_factory=list)
    """The Temporal run ids this run went through (one more per continue-as-new)."""
    paused_seconds: float = 0.0
    """Time spent waiting for humans; the run's deadline does not count it."""
    paused_since: datetime | None = None
    """Set while the run waits for a human (that wait is not counted yet)."""
    chars_per_token: float | None = None
    """Characters per token the provider's count of the last request showed (the context
    budget in tokens is turned into characters with it)."""
    tools_ref: str | None = None
    """Where a model call stored the tool specs: later calls name them instead of carrying
    them (None: not stored yet, or a run from before specs went by reference)."""
    output_corrections: int = 0
    verified_turn: int = 0
    """The turn whose final answer the completion check accepted."""
    cancel_reason: str | None = None
    failure: str | None = None
    """Set when an operation failed in a way that ends the run (its error class first)."""
    limit: str | None = None
    """Set when a batch could not be reserved in the budget: nothing of it started."""
    stop_reason: str | None = None

    @classmethod
    def start(
        cls,
        run_input: AgentRunInput,
        tools: list[ToolSpec],
        now: datetime,
        workflow_id: str = "",
        builtin_tools: list[str] | None = None,
    ) -> LoopState:
        outbox: list[Event] = []
        if run_input.instructions:
            outbox.append(Instruction(text=run_input.instructions))
        outbox.append(UserInput(text=run_input.task, sender=run_input.principal.subject))
        return cls(
            run_input=run_input,
            workflow_id=workflow_id,
            tools={spec.name: spec for spec in tools},
            builtin_tools=list(BUILTIN_TOOLS) if builtin_tools is None else builtin_tools,
            started_at=now,
            outbox=outbox,
        )

    def active_since(self, now: datetime | None = None) -> datetime:
        """The start of the run's working time: waits for humans do not count, the one still
        going on included (given `now`)."""
        waiting = 0.0
        if now is not None and self.paused_since is not None:
            waiting = (now - self.paused_since).total_seconds()
        return self.started_at + _seconds(self.paused_seconds + waiting)

    def reserved(self) -> Usage:
        """Usage so far plus the slices of the child runs still working: what `limits_left`
        shows, since those slices are spoken for."""
        total = self.usage.model_copy()
        for delegation in self.delegations.values():
            if delegation.status == "running":
                _add(total, delegation.whole_slice())
        return total

    def used_per_tool(self) -> Counter[str]:
        """Calls started per tool, the child runs' included."""
        used = started_per_tool(self.calls.values())
        for delegation in self.delegations.values():
            used.update(delegation.tools_used)
        return used


@dataclass(frozen=True)
class CallModel:
    turn: int


@dataclass(frozen=True)
class CheckPreconditions:
    """Ask the systems of record whether these calls may go ahead (in parallel)."""

    calls: list[tuple[ToolCall, ToolSpec]]


@dataclass(frozen=True)
class RunTools:
    """Reads run in parallel; a write is always alone in its step."""

    calls: list[tuple[ToolCall, ToolSpec]]


@dataclass(frozen=True)
class AwaitApproval:
    call_ids: list[str]
    deadline: datetime


@dataclass(frozen=True)
class Verify:
    """Ask the run's completion check whether the world agrees with the final answer."""

    check: str
    answer: str


@dataclass(frozen=True)
class AwaitInput:
    call_ids: list[str]
    deadline: datetime


@dataclass(frozen=True)
class LookupOutcome:
    """Ask the system of record, by idempotency key, whether an unknown write happened."""

    call: ToolCall
    spec: ToolSpec
    idempotency_key: str


@dataclass(frozen=True)
class AwaitReconciliation:
    call_ids: list[str]
    deadline: datetime


@dataclass(frozen=True)
class Finish:
    status: RunStatus
    stop_reason: str
    output: str | dict[str, Any] | list[Any] | None = None


NextStep = (
    CallModel
    | CheckPreconditions
    | RunTools
    | AwaitApproval
    | AwaitInput
    | Verify
    | LookupOutcome
    | AwaitReconciliation
    | Finish
)


def decide(state: LoopState, now: datetime) -> NextStep:
    limits = state.run_input.limits
    if state.failure is not None:
        return Finish(*_failure_status(state))
    if state.limit is not None:
        return Finish("limit_reached", state.limit)
    if state.stalled is not None:
        return Finish("stalled", f"stalled: {state.stalled}")
    refused = refused_calls(state)
    if refused > MAX_REFUSED_CALLS:
        return Finish("failed", f"invalid_calls: {refused} tool calls refused before running")
    if state.cancel_reason is not None:
        return Finish("cancelled", f"cancelled: {state.cancel_reason or 'no reason given'}")
    if budgets.deadline_passed(limits, state.active_since(), now):
        return Finish("limit_reached", f"deadline: {limits.deadline_seconds} s passed")
    if state.batch is not None:
        return _next_in_batch(state, state.batch, now)
    output = state.last_output
    if output is None:
        blocked = budgets.model_call_blocked(limits, state.usage)
        if blocked:
            return Finish("limit_reached", blocked)
        return CallModel(turn=state.turn + 1)
    match output.stop:
        case "final":
            return _checked_candidate(state, output)
        case "tool_calls":
            raise AssertionError("a tool-call output always has a batch")  # record_model_output
        case "refused":
            return Finish("refused", f"refused: {output.stop_detail or output.text}"[:500])
        case "content_filtered":
            return Finish("refused", f"content_filtered: {output.stop_detail}")
        case "truncated":
            return Finish("incomplete", f"truncated: {output.stop_detail}{_response(output)}")


def _response(output: ModelOutput) -> str:
    """Names the provider's response a protocol stop is about (its raw items are in the
    transcript store under that output)."""
    ref = output.provider_ref
    return f" (response {ref.response_id})" if ref.response_id else ""


def _final_candidate(state: LoopState, output: ModelOutput) -> Finish:
    schema = state.run_input.output_schema
    if schema is None:
        return Finish("completed", "final answer", output.text)
    parsed, problems = check_output(schema, output.text)
    if problems:
        # Only reached once the corrections are used up (see `record_model_output`).
        return Finish(
            "failed", "verification: final answer breaks output_schema: " + "; ".join(problems)
        )
    return Finish("completed", "final answer matches output_schema", parsed)


def _checked_candidate(state: LoopState, output: ModelOutput) -> NextStep:
    """Output schema first, then the completion check: only then is a final answer done."""
    finish = _final_candidate(state, output)
    check = state.run_input.completion_check
    if finish.status != "completed" or check is None:
        return finish
    if state.verified_turn != state.turn:
        return Verify(check, output.text)
    return Finish(
        finish.status, f"{finish.stop_reason}; completion_check {check} passed", finish.output
    )


def check_output(schema: dict[str, Any], text: str) -> tuple[Any, list[str]]:
    """A final answer is only a candidate: it must be JSON satisfying `output_schema`."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None, ["the answer is not valid JSON"]
    return parsed, schema_problems(schema, parsed)


def _next_in_batch(state: LoopState, batch: Batch, now: datetime) -> NextStep:
    if batch.denied is not None:
        return Finish("denied", f"denied: {batch.denied}")
    if batch.unchecked:
        return CheckPreconditions(_with_specs(state, batch.unchecked))
    if batch.reads:
        return RunTools(_with_specs(state, batch.reads))
    if batch.questions:
        assert batch.asked_at is not None
        deadline = batch.asked_at + _seconds(state.run_input.input_timeout_seconds)
        if now >= deadline:
            return Finish("input_timeout", f"input_timeout: no answer to {batch.questions}")
        return AwaitInput(list(batch.questions), deadline)
    undecided = batch.undecided()
    if undecided:
        deadline = min(batch.approvals[c].requested_at for c in undecided) + _seconds(
            state.run_input.approval_timeout_seconds
        )
        if now >= deadline:
            return Finish("approval_timeout", f"approval_timeout: no decision on {undecided}")
        return AwaitApproval(undecided, deadline)
    for call_id, decision in batch.decisions.items():
        if not decision.approved and _spec(state, call_id).on_reject == "stop":
            return Finish(
                "rejected",
                f"rejected: {call_id} by {decision.approver}"
                + (f": {decision.reason}" if decision.reason else ""),
            )
    if batch.unknown:
        call_id = batch.unknown[0]
        call, spec = _with_specs(state, [call_id])[0]
        return LookupOutcome(call, spec, state.calls[call_id].idempotency_key)
    if batch.reconciling:
        waiting = list(batch.reconciling)
        deadline = min(r.since for r in batch.reconciling.values()) + _seconds(
            state.run_input.reconciliation_timeout_seconds
        )
        if now >= deadline:
            return Finish("unresolved", f"unresolved: outcome of {', '.join(waiting)} unknown")
        return AwaitReconciliation(waiting, deadline)
    if batch.writes:
        # After a human decided, authorization and budget are checked again before anything runs.
        call_id = batch.writes[0]
        denied = authorization.denial(_spec(state, call_id), state.run_input.principal)
        if denied:
            return Finish("denied", f"denied: {denied}")
        return RunTools(_with_specs(state, [call_id]))
    raise AssertionError(f"batch without a next step: {batch}")  # closed by record_results


def _spec(state: LoopState, call_id: str) -> ToolSpec:
    return state.tools[state.calls[call_id].tool]


def _with_specs(state: LoopState, call_ids: list[str]) -> list[tuple[ToolCall, ToolSpec]]:
    assert state.last_output is not None
    calls = {call.call_id: call for call in state.last_output.tool_calls}
    return [(calls[call_id], _spec(state, call_id)) for call_id in call_ids]


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def plan_batch(state: LoopState, output: ModelOutput, now: datetime) -> Batch | str:
    """Validate every proposed call before anything runs; a string is a protocol failure."""
    ids = [call.call_id for call in output.tool_calls]
    # Results pair with calls by id alone, and a write's idempotency key derives from it: an
    # id that is empty, repeated, or reused from an earlier turn cannot be trusted.
    if "" in ids or len(set(ids)) != len(ids):
        return f"protocol: tool calls without unique call ids: {ids}"
    reused = sorted(set(ids) & state.calls.keys())
    if reused:
        return f"protocol: call ids reused from an earlier turn: {reused}"
    batch = Batch(order=ids)
    allowed: list[tuple[ToolCall, ToolSpec]] = []
    principal = state.run_input.principal
    whitelist = {*state.run_input.tools, *state.builtin_tools}
    for call in output.tool_calls:
        verdict = validate_call(call, state.tools, whitelist)
        if isinstance(verdict, Allowed) and call.name == "read_artifact":
            verdict = _own_artifact(state, call) or verdict
        if not isinstance(verdict, Allowed):
            batch.results[call.call_id] = refusal(call, verdict.error_class, verdict.message)
            continue
        spec = verdict.spec
        denied = authorization.denial(spec, principal)
        if denied:
            return _deny_all(batch, output, call, denied)
        if call.name == DELEGATE:
            problem = _delegation_problem(state, call)
            if problem:
                batch.results[call.call_id] = refusal(call, "invalid_arguments", problem)
                continue
        if action_digest(spec, call) in state.rejected_actions:
            batch.results[call.call_id] = refusal(
                call,
                "rejected_action",
                "an approver rejected this exact action in this run; "
                "it will not run, under this tool or another",
            )
            continue
        allowed.append((call, spec))
    questions = [call for call, _ in allowed if call.name == "ask_user"]
    allowed = [(call, spec) for call, spec in allowed if call.name != "ask_user"]
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
    if blocked:
        return f"{LIMIT_PREFIX}{blocked}"
    batch.questions = [call.call_id for call in questions]
    batch.asked_at = now if questions else None
    for call, spec in allowed:
        if spec.has_precondition:
            batch.unchecked.append(call.call_id)
        (batch.reads if spec.effect == "read" else batch.writes).append(call.call_id)
        if spec.effect == "write" and approval.needs_approval(spec, call.arguments, principal):
            batch.approvals[call.call_id] = approval.PendingApproval(
                call_id=call.call_id,
                tool=call.name,
                arguments=call.arguments,
                args_digest=call.args_digest,
                approvers=spec.approvers,
                requested_at=now,
            )
    return batch


LIMIT_PREFIX = "limit: "


def _delegation_problem(state: LoopState, call: ToolCall) -> str | None:
    """A child run gets a subset of this run's tools, never `delegate` itself: no escalation,
    no unbounded nesting."""
    own = [name for name in state.run_input.tools if name != DELEGATE]
    extra = sorted(set(call.arguments.get("tools", [])) - set(own))
    if extra:
        return f"tools {extra} cannot be delegated; choose from {own}"
    return None


def child_run_id(workflow_id: str, call_id: str) -> str:
    return f"{workflow_id}/delegate/{call_id}"


def record_delegations_started(
    state: LoopState, step: RunTools, now: datetime
) -> dict[str, AgentRunInput]:
    """The child runs this step starts, by call id, each with its slice of the budget.

    Called once the step's calls are reserved (`record_calls_started`): the slices share what
    is left after them and after the batch's writes still to come."""
    calls = [call for call, _ in step.calls if call.name == DELEGATE]
    if not calls:
        return {}
    batch = _open(state)
    parent = state.run_input
    left = budgets.limits_left(parent.limits, state.usage, state.active_since(), now)
    children: dict[str, AgentRunInput] = {}
    for call in calls:
        tools = list(dict.fromkeys(call.arguments.get("tools", [])))
        limits = budgets.child_limits(
            left,
            children=len(calls),
            unstarted_calls=len(batch.writes),
            tools_left=_tools_left(state, tools, batch),
            requested_model_calls=call.arguments.get("max_model_calls"),
            requested_tool_calls=call.arguments.get("max_tool_calls"),
        )
        children[call.call_id] = parent.model_copy(
            update={
                "task": call.arguments["task"],
                "instructions": call.arguments.get("instructions", ""),
                "model": parent.delegate_model or parent.model,
                "tools": tools,
                "limits": limits,
                "output_schema": None,
                "completion_check": None,
                "continue_from": None,
                "delegate_model": None,
            }
        )
        state.delegations[call.call_id] = Delegation(
            child_workflow_id=child_run_id(state.workflow_id, call.call_id), limits=limits
        )
        state.calls[call.call_id].child_run = state.delegations[call.call_id].child_workflow_id
    return children


def _tools_left(state: LoopState, tools: list[str], batch: Batch) -> dict[str, int]:
    """How many more calls each capped tool may take, the batch's unstarted writes aside."""
    used = state.used_per_tool()
    coming = Counter(state.calls[c].tool for c in batch.writes)
    left: dict[str, int] = {}
    for tool in tools:
        cap = budgets.tool_cap(state.run_input.limits, tool, state.tools[tool].max_calls_per_run)
        if cap is not None:
            left[tool] = cap - used[tool] - coming[tool]
    return left


def record_child_run(state: LoopState, call: ToolCall, result: AgentRunResult | None) -> ToolResult:
    """Charge a child run's usage to this run and turn its result into the delegate call's
    result. `None`: the child ended without a result (terminated, failed): its whole slice is
    charged, and what it did is unknown."""
    delegation = state.delegations[call.call_id]
    if result is None:
        delegation.status = "failed"
        delegation.stop_reason = "the child run ended without a result"
        delegation.usage = delegation.whole_slice()
    else:
        delegation.status = result.status
        delegation.stop_reason = result.stop_reason
        delegation.usage = result.usage
        delegation.tools_used = dict(started_per_tool(result.calls))
        delegation.side_effects = result.side_effects
    _add(state.usage, delegation.usage)
    report = {
        "child_run": delegation.child_workflow_id,
        "status": delegation.status,
        "stop_reason": delegation.stop_reason,
        "output": _bounded(result.output if result else None, state.tools[DELEGATE]),
        "side_effects": [
            {k: e[k] for k in ("tool", "call_id", "status", "confirmed_by")}
            for e in delegation.side_effects
        ],
        "usage": delegation.usage.model_dump(),
    }
    completed = delegation.status == "completed"
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="succeeded" if completed else "failed",
        content=json.dumps(report, ensure_ascii=False),
        error_class=None if completed else _CHILD_ERROR_CLASSES.get(delegation.status, "business"),
        side_effect=bool(delegation.side_effects) or result is None,
    )


_CHILD_ERROR_CLASSES: dict[str, ErrorClass] = {
    "denied": "permission",
    "rejected": "permission",
    "failed": "internal",
    "unresolved": "internal",
}


def _bounded(output: Any, spec: ToolSpec) -> Any:
    """A child's answer, cut to what this run's model may be sent of a tool result (the rest
    of the report takes the other 1,000 characters)."""
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    limit = spec.max_result_chars - 1_000
    return output if output is None or len(text) <= limit else bounded(text, limit)


def _own_artifact(state: LoopState, call: ToolCall) -> Refused | None:
    """A run reads only the artifacts its own tool results were cut into."""
    ref = call.arguments.get("ref")
    if ref in state.artifacts:
        return None
    return Refused("invalid_arguments", f"no artifact {ref!r} belongs to this run")


def _deny_all(batch: Batch, output: ModelOutput, denied_call: ToolCall, reason: str) -> Batch:
    """Authorization refused one call: every call id of the batch is answered, none runs."""
    for call in output.tool_calls:
        message = (
            reason
            if call is denied_call
            else (f"not run: call {denied_call.call_id} of the same batch was denied")
        )
        batch.results[call.call_id] = ToolResult(
            call_id=call.call_id,
            tool=call.name,
            status="denied",
            error_class="permission",
            content=json.dumps({"error": {"class": "permission", "message": message}}),
        )
    batch.denied = reason
    return batch


def action_digest(spec: ToolSpec, call: ToolCall) -> str:
    """What a rejection is remembered by: the action in the world and its exact arguments."""
    return args_digest(spec.action_name, call.arguments)


def refusal(call: ToolCall, error_class: str, message: str) -> ToolResult:
    classes: dict[str, ErrorClass] = {
        "unknown_tool": "unknown_tool",
        "invalid_arguments": "invalid_arguments",
        "rejected_action": "permission",
        "precondition_failed": "business",
    }
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="rejected",
        content=json.dumps({"error": {"class": error_class, "message": message}}),
        error_class=classes.get(error_class, "business"),
    )


def _failure_status(state: LoopState) -> tuple[RunStatus, str]:
    unknown = [r.call_id for r in state.calls.values() if r.status == "unknown"]
    if unknown:
        return "unresolved", f"{state.failure}; outcome unknown for {', '.join(unknown)}"
    return "failed", state.failure or ""


def failed_result(
    state: LoopState, call: ToolCall, spec: ToolSpec, message: str, error_class: ErrorClass
) -> ToolResult:
    """The result of a call whose activity failed for good: `transient` (timeouts, an outage
    outlasting the retries) may be worth another try; `internal` (the tool itself broke) is
    not. A write's outcome is unknown either way."""
    write = spec.effect == "write"
    if "tool-error-classes" not in state.features:
        error_class = "transient"  # runs started before the classes were told apart
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="unknown" if write else "failed",
        content=json.dumps({"error": {"class": error_class, "message": message}}),
        error_class=error_class,
        retryable=not write and error_class == "transient",
        side_effect=write,
    )


# --- folding results back into the state -------------------------------------------------


REFUSAL_DECISIONS = frozenset(
    {"unknown_tool", "invalid_arguments", "precondition_failed", "rejected_action"}
)


def refused_calls(state: LoopState) -> int:
    """Calls the runner refused before running them (not those a human rejected)."""
    return sum(1 for r in state.calls.values() if r.decision in REFUSAL_DECISIONS)


def pending_approvals(state: LoopState) -> list[dict[str, Any]]:
    """What an approver is shown: each call waiting for a decision with its exact arguments."""
    batch = state.batch
    if batch is None:
        return []
    return [batch.approvals[c].model_dump(mode="json") for c in batch.undecided()]


def side_effects(state: LoopState) -> list[dict[str, Any]]:
    """Writes that happened (or may have), and how we know; the child runs' included."""
    delegated = [
        {**effect, "via": f"{d.child_workflow_id} (delegate {call_id})"}
        for call_id, d in state.delegations.items()
        for effect in d.side_effects
    ]
    return [
        {
            "call_id": r.call_id,
            "tool": r.tool,
            "idempotency_key": r.idempotency_key,
            "status": r.status,
            "confirmed_by": _confirmation(r),
        }
        for r in state.calls.values()
        if r.tool in state.tools
        and state.tools[r.tool].effect == "write"
        and r.status in ("succeeded", "confirmed_after_query", "unknown")
    ] + delegated


def unresolved(state: LoopState) -> list[dict[str, Any]]:
    """Writes waiting for an operator's `resolve`, with what is known about each."""
    batch = state.batch
    if batch is None:
        return []
    return [
        {**r.model_dump(mode="json"), "arguments": state.calls[c].arguments}
        for c, r in batch.reconciling.items()
    ]


def _confirmation(record: CallRecord) -> str:
    if record.status == "succeeded":
        return "the system's response"
    if record.status == "unknown":
        return "not confirmed: outcome unknown"
    if "resolved:" in record.decision:
        return "operator (" + record.decision.split("resolved:", 1)[1].strip() + ")"
    return "lookup by idempotency key"


def unsent_events(state: LoopState, stop_reason: str) -> list[Event]:
    """What the model has not seen at the stop, so that a continuing run can send it first:
    every call of the last tool-call output answered (calls that never ran say so)."""
    events = list(state.outbox)
    output = state.last_output
    if output is None or not output.offers_calls:
        return events
    results = state.batch.results if state.batch else {}
    for call in output.tool_calls:
        result = results.get(call.call_id)
        if result is None:
            status = state.calls[call.call_id].status if call.call_id in state.calls else ""
            result = ToolResult(
                call_id=call.call_id,
                tool=call.name,
                status="unknown" if status == "unknown" else "rejected",
                content=json.dumps(
                    {
                        "error": {
                            "class": "not_run" if status != "unknown" else "outcome_unknown",
                            "message": f"the run stopped before this call finished ({stop_reason})",
                        }
                    }
                ),
            )
        events.append(result)
    return events


def pending_at_stop(state: LoopState) -> list[dict[str, Any]]:
    """What was left undone when the run stopped."""
    waiting = {c["call_id"] for c in pending_approvals(state)}
    return [
        {
            "call_id": r.call_id,
            "tool": r.tool,
            "status": "awaiting_approval" if r.call_id in waiting else r.status,
        }
        for r in state.calls.values()
        if r.status in ("proposed", "running", "unknown")
    ]


def continue_transcript(state: LoopState, previous: PreviousRun) -> None:
    """This run goes on from `previous`'s transcript: its unsent results first, then a note
    saying where it stopped, then this run's task."""
    state.head = previous.head
    note = StateUpdate(
        kind="continued",
        text=f"This run continues run {previous.workflow_id}, which stopped: "
        f"{previous.status} ({previous.stop_reason}).",
    )
    state.outbox = [*previous.unsent, note, *state.outbox]


def record_failure(state: LoopState, reason: str) -> None:
    state.failure = reason


def by_reference(events: list[Event]) -> list[Event]:
    """What a model call's input carries: the contents `run_tool` stored travel as their
    references (`content_ref`), so each rides in workflow history once."""
    return [
        event.model_copy(update={"content": ""})
        if isinstance(event, ToolResult) and event.content_ref
        else event
        for event in events
    ]


def record_model_call_started(state: LoopState, step: CallModel) -> None:
    state.turn = step.turn
    state.phase = "calling_model"
    state.usage.model_calls += 1


def record_model_output(
    state: LoopState,
    output: ModelOutput,
    head: str,
    now: datetime,
    cost_usd: float = 0.0,
    request_chars: int = 0,
) -> None:
    state.head = head
    state.chars_per_token = (
        chars_per_token(request_chars, output.usage.input_tokens) or state.chars_per_token
    )
    state.outbox = []
    state.usage.input_tokens += output.usage.input_tokens
    state.usage.output_tokens += output.usage.output_tokens
    state.usage.cost_usd += cost_usd
    state.last_output = output
    state.phase = "validating"
    if output.stop == "tool_calls":
        _open_batch(state, output, now)
    elif output.stop == "final" and state.run_input.output_schema is not None:
        _send_back_if_rejected(state, output, state.run_input.output_schema)


def _open_batch(state: LoopState, output: ModelOutput, now: datetime) -> None:
    planned = plan_batch(state, output, now)
    if isinstance(planned, str):
        if planned.startswith(LIMIT_PREFIX):
            state.limit = planned.removeprefix(LIMIT_PREFIX)
        else:
            record_failure(state, planned + _response(output))
        return
    for call in output.tool_calls:
        spec = state.tools.get(call.name)
        state.calls[call.call_id] = CallRecord(
            call_id=call.call_id,
            tool=call.name,
            tool_version=spec.version if spec else "",
            args_digest=call.args_digest,
            arguments=call.arguments,
            decision="allowed",
            status="proposed",
            turn=state.turn,
        )
    state.batch = planned
    for result in list(planned.results.values()):
        state.calls[result.call_id].decision = _decision_of(result)
        _settle(state, planned, result)
    _close_if_answered(state)


def _decision_of(result: ToolResult) -> str:
    error = json.loads(result.content).get("error", {}) if result.content else {}
    return str(error.get("class") or result.status)


def _send_back_if_rejected(state: LoopState, output: ModelOutput, schema: dict[str, Any]) -> None:
    _, problems = check_output(schema, output.text)
    if not problems or state.output_corrections >= MAX_OUTPUT_CORRECTIONS:
        return
    # Not done: the verdict goes back to the model as an observation, on the same budget.
    state.output_corrections += 1
    state.outbox = [
        StateUpdate(
            kind="verification",
            text="Your final answer was rejected (" + "; ".join(problems) + "). Answer again with "
            f"only JSON matching this schema: {json.dumps(schema, sort_keys=True)}",
        )
    ]
    state.last_output = None


def record_preconditions(state: LoopState, failures: dict[str, str | None]) -> None:
    """`failures`: call id -> why its precondition failed (None: it holds)."""
    batch = _open(state)
    for call_id in batch.unchecked:
        problem = failures[call_id]
        if problem is not None:
            call = _with_specs(state, [call_id])[0][0]
            result = refusal(call, "precondition_failed", problem)
            state.calls[call_id].decision = "precondition_failed"
            _settle(state, batch, result)
    batch.unchecked = []
    _close_if_answered(state)


def record_calls_started(state: LoopState, step: RunTools) -> None:
    """The calls are reserved in the budget the moment they start."""
    batch = _open(state)
    state.phase = "executing_tools"
    for call, spec in step.calls:
        record = state.calls[call.call_id]
        record.status = "running"
        record.attempts += 1
        if spec.effect == "write":
            record.idempotency_key = f"{state.workflow_id}/{call.call_id}"
        for queue in (batch.reads, batch.writes):
            if call.call_id in queue:
                queue.remove(call.call_id)
    state.usage.tool_calls += len(step.calls)


def record_tool_results(state: LoopState, results: list[ToolResult]) -> None:
    """Record each result under its call id; an answered batch goes to the model."""
    batch = _open(state)
    for result in results:
        if result.call_id not in batch.order or result.call_id in batch.results:
            raise ValueError(f"result for {result.call_id!r} does not answer an open call")
        if result.status == "unknown":
            # Never retried blindly: the system of record is asked first (DESIGN.md §3 step 7).
            state.calls[result.call_id].status = "unknown"
            state.calls[result.call_id].result_summary = result.content[:SUMMARY_CHARS]
            batch.unknown.append(result.call_id)
        else:
            _settle(state, batch, result)
    _close_if_answered(state)


def record_outcome(state: LoopState, call_id: str, outcome: Outcome, now: datetime) -> None:
    """What the system of record said about an unknown write."""
    batch = _open(state)
    batch.unknown.remove(call_id)
    call, spec = _with_specs(state, [call_id])[0]
    record = state.calls[call_id]
    if outcome.state == "applied":
        _settle(state, batch, _confirmed(call, outcome.record, "the system of record has it"))
    elif outcome.state == "not_applied" and outcome.record is not None:
        # Refused before commit, and the refusal is on record under the key.
        _settle(state, batch, refusal(call, "business", json.dumps(outcome.record)))
    elif outcome.state == "not_applied" and record.attempts < MAX_WRITE_ATTEMPTS:
        batch.writes.insert(0, call_id)  # definitely absent: send again, same key
    else:
        known = (
            f"still absent after {record.attempts} attempts"
            if outcome.state == "not_applied"
            else f"lookup inconclusive: {outcome.record or 'no answer'}"
        )
        batch.reconciling[call_id] = Reconciliation(
            call_id=call_id,
            tool=spec.name,
            idempotency_key=record.idempotency_key,
            known=known,
            since=now,
        )
        state.phase = "awaiting_reconciliation"
    _close_if_answered(state)


def record_resolution(state: LoopState, request: ResolveRequest, now: datetime) -> str | None:
    """An operator's word on an unresolved write; returns why it was refused, if it was."""
    batch = state.batch
    if batch is None or request.call_id not in batch.reconciling:
        reason = f"no write {request.call_id!r} is awaiting reconciliation"
        state.refused_decisions.append(
            {**request.model_dump(), "refused_because": reason, "at": now.isoformat()}
        )
        return reason
    del batch.reconciling[request.call_id]
    call = _with_specs(state, [request.call_id])[0][0]
    said = f"{request.operator} says {request.outcome}" + (
        f": {request.note}" if request.note else ""
    )
    state.calls[request.call_id].decision += f"; resolved: {said}"
    if request.outcome == "applied":
        result = _confirmed(call, None, said)
    else:
        result = ToolResult(
            call_id=call.call_id,
            tool=call.name,
            status="failed",
            error_class="business",
            content=json.dumps({"error": {"class": "not_applied", "message": said}}),
        )
    _settle(state, batch, result)
    _close_if_answered(state)
    return None


def _confirmed(call: ToolCall, record: Any, how: str) -> ToolResult:
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="confirmed_after_query",
        content=json.dumps({"confirmed": how, "record": record}),
        side_effect=True,
    )


def record_decision(state: LoopState, decision: ApprovalDecision, now: datetime) -> ApprovalVerdict:
    """Apply a human's decision if it counts; otherwise record why it changed nothing."""
    batch = state.batch
    pending = batch.approvals if batch else {}
    refused = approval.judge(decision, pending, batch.decisions if batch else {})
    if refused is not None:
        state.refused_decisions.append(
            {**decision.model_dump(), "refused_because": refused, "at": now.isoformat()}
        )
        return ApprovalVerdict(accepted=False, reason=refused)
    assert batch is not None
    batch.decisions[decision.call_id] = decision
    record = state.calls[decision.call_id]
    record.decision = f"{'approved' if decision.approved else 'rejected'} by {decision.approver}"
    if not decision.approved:
        call, spec = _with_specs(state, [decision.call_id])[0]
        state.rejected_actions.append(action_digest(spec, call))
        batch.writes.remove(decision.call_id)
        message = f"rejected by {decision.approver}" + (
            f": {decision.reason}" if decision.reason else ""
        )
        _settle(state, batch, refusal(call, "rejected_action", message))
        if spec.on_reject == "tell_model":
            _close_if_answered(state)
    return ApprovalVerdict(accepted=True)


def awaiting_humans(state: LoopState) -> set[str]:
    """Call ids waiting for an approval decision, a user's answer or an operator's word."""
    batch = state.batch
    return set() if batch is None else {*batch.undecided(), *batch.questions, *batch.reconciling}


def facts(state: LoopState) -> list[str]:
    """What must stay true for the model however its context is shortened: human decisions
    and the writes that happened, from run state."""
    decided = [
        f"{r.tool} {r.call_id} was {r.decision}"
        for r in state.calls.values()
        if r.decision.startswith(("approved by", "rejected by"))
    ]
    written = [
        f"{e['tool']} {e['call_id']} is {e['status']} (confirmed by {e['confirmed_by']})"
        for e in side_effects(state)
    ]
    return decided + written


def details(state: LoopState, now: datetime) -> str:
    """A line for the Temporal UI's "current details": where the run is and what it waits on."""
    left = budgets.limits_left(
        state.run_input.limits, state.reserved(), state.active_since(now), now
    )
    parts = [
        f"**{state.phase}** · turn {state.turn}",
        f"calls left: model {left.model_calls}, tools {left.tool_calls}",
    ]
    waiting = [f"{a['tool']} ({a['call_id']})" for a in pending_approvals(state)]
    if waiting:
        parts.append("awaiting approval: " + ", ".join(waiting))
    asked = question(state)
    if asked:
        parts.append(f"question: {asked}")
    unsettled = [u["call_id"] for u in unresolved(state)]
    if unsettled:
        parts.append("unresolved writes: " + ", ".join(unsettled))
    children = [d.child_workflow_id for d in state.delegations.values() if d.status == "running"]
    if children:
        parts.append("waiting for sub-agents: " + ", ".join(children))
    return "\n".join(parts)


def question(state: LoopState) -> str | None:
    """The question the run is waiting on the user to answer, if any."""
    batch = state.batch
    if batch is None or not batch.questions:
        return None
    call = _with_specs(state, batch.questions[:1])[0][0]
    return str(call.arguments.get("question", ""))


def record_message(state: LoopState, message: UserMessage) -> None:
    """A user's message answers the pending question, or waits for the next model call."""
    batch = state.batch
    if batch is None or not batch.questions:
        state.outbox.append(UserInput(text=message.text, sender=message.sender))
        return
    call_id = batch.questions.pop(0)
    call = _with_specs(state, [call_id])[0][0]
    _settle(
        state,
        batch,
        ToolResult(
            call_id=call_id,
            tool=call.name,
            content=json.dumps(
                {"answer": message.text, "from": message.sender}, ensure_ascii=False
            ),
        ),
    )
    _close_if_answered(state)


def record_verdict(state: LoopState, passed: bool, reason: str) -> None:
    """A passed check accepts this turn's answer; a failed one goes back to the model with
    the reason, on the same budget, a bounded number of times."""
    if passed:
        state.verified_turn = state.turn
        return
    check = state.run_input.completion_check
    if state.output_corrections >= MAX_OUTPUT_CORRECTIONS:
        record_failure(state, f"verification: completion_check {check} failed: {reason}")
        return
    state.output_corrections += 1
    state.outbox = [
        StateUpdate(
            kind="verification",
            text=f"Not done yet: the completion check {check} says: {reason}. Finish the "
            "task (or say why you cannot), then answer again.",
        )
    ]
    state.last_output = None


def record_pause_started(state: LoopState, now: datetime) -> None:
    state.paused_since = now


def record_pause(state: LoopState, seconds: float) -> None:
    """Time spent waiting for a human is not the agent's working time."""
    state.paused_seconds += seconds
    state.paused_since = None


def _open(state: LoopState) -> Batch:
    if state.batch is None:
        raise ValueError("no tool calls are open")
    return state.batch


def _settle(state: LoopState, batch: Batch, result: ToolResult) -> None:
    batch.results[result.call_id] = result
    if result.artifact_ref and result.artifact_ref not in state.artifacts:
        state.artifacts.append(result.artifact_ref)
    record = state.calls[result.call_id]
    record.status = result.status
    record.result_summary = result.content[:SUMMARY_CHARS]


def _close_if_answered(state: LoopState) -> None:
    """Once every call id has its result, the results go to the model in the call order."""
    batch = state.batch
    if batch is None or batch.denied is not None or len(batch.results) < len(batch.order):
        return
    if any(not d.approved for d in batch.decisions.values()) and any(
        _spec(state, c).on_reject == "stop" for c, d in batch.decisions.items() if not d.approved
    ):
        return  # the run stops `rejected`; nothing more goes to the model
    state.outbox.extend(batch.results[call_id] for call_id in batch.order)
    if "stall-detection" in state.features:
        _check_progress(state, batch)
    state.batch = None
    state.last_output = None


def _check_progress(state: LoopState, batch: Batch) -> None:
    """One nudge the first time the loop repeats itself; the second time, the run stops."""
    assert state.last_output is not None
    state.progress.append(
        progress.fingerprint(state.last_output.tool_calls, batch.results, state.tools)
    )
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
