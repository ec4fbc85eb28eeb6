"""Run state (docs/concepts/design.md §1): everything the runner decides from, nothing the
model reads.

`LoopState` is what the workflow keeps and hands over on continue-as-new; `Batch` is one model
output's tool calls on their way from validation to the last result. Fields are only ever
added, with defaults: a run carried over from an older deploy still parses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field

from agentloop.activity_io import InputReply
from agentloop.contract import (
    AgentRunInput,
    ApprovalDecision,
    CallRecord,
    CancelRequest,
    CompensationLine,
    Limits,
    ModelSwitch,
    NoticeSent,
    PendingApproval,
    Phase,
    Provider,
    Reconciliation,
    RefusedDecision,
    ResolveRequest,
    RunStatus,
    SideEffect,
    StopCause,
    UnresolvedWrite,
    Usage,
    UserMessage,
)
from agentloop.events import (
    Event,
    InputRequest,
    Instruction,
    ModelOutput,
    ToolCall,
    ToolResult,
    UserInput,
)
from agentloop.notice_timers import NoticeTimers
from agentloop.policies.progress import TurnFingerprint
from agentloop.tool_spec import BUILTIN_TOOLS, ROLL_BACK, ToolSpec
from agentloop.transcript import ROOT

MAX_REFUSED_CALLS = 8
"""Calls refused before running (unknown tool, bad arguments, failed precondition, a rejected
action) go back to the model as errors; past this many in a run, the run stops."""

MAX_RUN_CHAIN_IDS = 20
"""How many run ids `run_chain` keeps: the first (it keys the
run's writes and signed decisions) and the latest."""

MAX_OUTPUT_CORRECTIONS = 2
"""How many times a final answer that breaks `output_schema` goes back to the model."""

MAX_INPUT_ROUNDS = 3
"""How many times one call's tool may ask a person; asked once more, the
call goes to the model as a refusal saying what the tool asked."""

MAX_WRITE_ATTEMPTS = 2
"""A write the system of record says definitely did not happen is sent again (same key) at
most this many times in all."""

SUMMARY_CHARS = 200
"""How much of a result the call ledger keeps."""


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
    side_effects: list[SideEffect] = Field(default_factory=list)

    def whole_slice(self) -> Usage:
        """The child's slice spent to the last unit: what it may still use while it runs,
        and what it is charged when it ends without saying what it used."""
        return Usage(
            model_calls=self.limits.max_model_calls,
            tool_calls=self.limits.max_tool_calls,
            input_tokens=self.limits.max_total_tokens or 0,
            cost_usd=self.limits.max_cost_usd or 0.0,
        )


class CheckedAnswer(BaseModel):
    """A final answer checked against `output_schema`: its JSON value, and what is wrong with
    it (nothing: it is accepted)."""

    value: Any = None
    problems: list[str] = Field(default_factory=list)


class DecisionToCheck(BaseModel):
    """An approval decision (or an operator's `resolve`, or in signed mode an answer or a
    cancel) that passed the workflow's own checks, waiting for the worker's word
    (`check_approval`, `check_resolution`, `check_word`); `ticket` tells the update waiting
    on it (`decide_approval`, `deliver`)."""

    ticket: int
    decision: ApprovalDecision | ResolveRequest | UserMessage | CancelRequest


class Batch(BaseModel):
    """One model output's tool calls, from validation to the last result.

    The pipeline: validation (whitelist, schema, scope, rejected actions) when the output
    arrives; then business preconditions; then the reads before the first write (in
    parallel); then the approvals of the writes; then the writes, one at a time in the model's
    order, each followed by the reads up to the next write. Every call id ends with exactly
    one result."""

    order: list[str]
    """Call ids in the model's order."""
    results: dict[str, ToolResult] = Field(default_factory=dict)
    unchecked: list[str] = Field(default_factory=list)
    """Allowed calls whose business precondition (or approval rule) has not been checked yet."""
    recheck: list[str] = Field(default_factory=list)
    """Calls whose precondition was checked before a wait for people: it is checked again
    just before each runs."""
    assessing: dict[str, str] = Field(default_factory=dict)
    """Writes whose tool names an approval rule -> the rule: the worker evaluates it with the
    precondition check, and the verdict says whether the call waits for approval."""
    reads: list[str] = Field(default_factory=list)
    """Allowed reads not run yet."""
    writes: list[str] = Field(default_factory=list)
    """Allowed writes not run yet, in the model's order."""
    approvals: dict[str, PendingApproval] = Field(default_factory=dict)
    decisions: dict[str, ApprovalDecision] = Field(default_factory=dict)
    timeout_escalated: bool = False
    """The approval timeout escalated the undecided calls (`on_approval_timeout`): they wait
    one more `approval_timeout_seconds`."""
    to_check: list[DecisionToCheck] = Field(default_factory=list)
    """Decisions the worker has not checked yet."""
    questions: list[str] = Field(default_factory=list)
    """`ask_user` calls, and calls whose tool asked (`asking`), waiting for the user's
    `message`, in the order asked."""
    answer_chars: int = 0
    """The text of the answers this batch's questions got."""
    asked_at: datetime | None = None
    asking: dict[str, InputRequest] = Field(default_factory=dict)
    """Calls whose tool asked a person before it could go on -> what it asked (a write among
    them stays first in `writes`, so nothing the model put after it runs before it)."""
    replies: dict[str, InputReply] = Field(default_factory=dict)
    """Calls a person answered, waiting to run again with the reply."""
    input_rounds: dict[str, int] = Field(default_factory=dict)
    """How many times each call's tool asked."""
    unknown: list[str] = Field(default_factory=list)
    """Writes whose outcome is unknown: the system of record is asked before anything else."""
    reconciling: dict[str, Reconciliation] = Field(default_factory=dict)
    """Writes the lookup could not settle: they wait for an operator's `resolve`."""
    denied: str | None = None
    """Set when authorization refused a call: the whole batch is answered and the run stops."""
    gave_up: str | None = None
    """The model's reason when it called `give_up`: the whole
    batch is answered and the run stops `blocked`."""
    roll_back: str | None = None
    """The call id of the model's `roll_back`: the batch's other calls are answered as not
    run, and the undos of the run's writes are offered before the call is answered."""

    def undecided(self) -> list[str]:
        return [call_id for call_id in self.approvals if call_id not in self.decisions]

    def reads_ready(self) -> list[str]:
        """The reads no unfinished write comes before, in the model's order: a read the model
        put after a write may depend on it."""
        unfinished = {*self.writes, *self.unknown, *self.reconciling}
        ready: list[str] = []
        for call_id in self.order:
            if call_id in unfinished:
                break
            if call_id in self.reads:
                ready.append(call_id)
        return ready


class Undo(BaseModel):
    """A write that succeeded and declared an undo: the undo call prepared as the write's
    result came in (`policies.compensation.undo_arguments`), or why none could be."""

    call_id: str
    tool: str
    undo_tool: str
    arguments: dict[str, Any] | None = None
    problem: str = ""


class Compensation(BaseModel):
    """A run that ended without delivering, undoing what it wrote before it stops: the stop
    it was going to make, and what the undos interrupted (put back before it stops, so the
    stop reports what it would have)."""

    status: RunStatus | None = None
    """None: the model asked to roll back (`roll_back`), and the run goes on after."""
    stop_reason: str = ""
    cause: StopCause | None = None
    lines: list[CompensationLine] = Field(default_factory=list)
    """Every write of the run, newest first, with what is decided for it (an offered undo's
    line is completed from the ledger as its undo ends)."""
    interrupted_batch: Batch | None = None
    interrupted_output: ModelOutput | None = None
    closed: bool = False
    """Every undo offered has its result: the run stops."""


class LoopState(BaseModel):
    """Run state (docs/concepts/design.md §1): everything the runner decides from, nothing the
    model reads."""

    run_input: AgentRunInput
    """As the run was started; in a run continued as new, its
    task and instructions are only their start (the whole is in the transcript)."""
    workflow_id: str = ""
    """Stable across retries, restarts and continue-as-new: write idempotency keys derive
    from it and the call id."""
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    builtin_tools: list[str] = Field(default_factory=list)
    """Tools this run may call without naming them (`read_artifact`)."""
    task_state: dict[str, Any] = Field(default_factory=dict)
    """The task's state, apart from the transcript."""
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
    serving: int = 0
    """Which of the run's models its model calls go to: 0 its `model`, n its n-th fallback
    (`policies.fallback`)."""
    model_switches: list[ModelSwitch] = Field(default_factory=list)
    """Each move to the next model, at most one per fallback."""
    calls: dict[str, CallRecord] = Field(default_factory=dict)
    argument_bytes: int = 0
    """The size of the arguments `calls` holds."""
    batch: Batch | None = None
    """The tool calls of `last_output` on their way through the pipeline."""
    refused_decisions: list[RefusedDecision] = Field(default_factory=list)
    """Approval decisions that changed nothing, and why (shown in `status`)."""
    decisions_received: int = 0
    """Approval decisions sent to the worker to check so far (each one's ticket)."""
    approval_signing: str = ""
    """How the worker takes approvals, `signed` or `unsigned`: as it said at the start and the
    last time it checked a decision."""
    operators: list[str] = Field(default_factory=list)
    """Who may settle any unknown write besides its tool's approvers (`settlers`), as the
    worker said at the start (`AGENTLOOP_OPERATORS`)."""
    words_to_check: list[DecisionToCheck] = Field(default_factory=list)
    """Answers and cancels the worker has not checked yet (held only where it takes only
    signed ones; never carried: the run does not continue as new while any waits)."""
    notify: bool = False
    """The worker sends notices of runs waiting for a person (it said so at the start)."""
    notified: list[str] = Field(default_factory=list)
    """Calls a notice was started for: each is told of once."""
    notice_failures: list[str] = Field(default_factory=list)
    """Notices that could not be delivered, each saying of what and why."""
    notice_timers: list[NoticeTimers] = Field(default_factory=list)
    """The reminders and escalations of the worker's notice routes (it said so at the start)."""
    notified_at: dict[str, AwareDatetime] = Field(default_factory=dict)
    """When each call's first notice was started, while some route has timers: its reminders
    and escalations count from then."""
    notices_sent: list[NoticeSent] = Field(default_factory=list)
    """The reminders and escalations sent, each once per call and route."""
    artifacts: list[str] = Field(default_factory=list)
    """References of the artifacts this run's tool results were cut into (`read_artifact`
    reads only these)."""
    rejected_actions: list[str] = Field(default_factory=list)
    """Digests of (action, arguments) an approver rejected: never run in this run (nor in a
    run continuing it)."""
    inherited_unresolved: dict[str, UnresolvedWrite] = Field(default_factory=dict)
    """Writes of the run this one continues whose outcome stayed unknown, by action digest:
    the same action is held for an operator's word, never sent again blindly."""
    inherited_usage: Usage | None = None
    """What the runs this one continues (`continue_from`) used in all (None: it continues none)."""
    delegations: dict[str, Delegation] = Field(default_factory=dict)
    """`delegate` calls by call id: the child runs and what they used."""
    run_chain: list[str] = Field(default_factory=list)
    """The Temporal run ids this run went through (one more per continue-as-new): the first
    and the latest ones."""
    run_chain_left_out: int = 0
    """Run ids left out of `run_chain` between its first and its latest ones."""
    paused_seconds: float = 0.0
    """Time spent waiting for humans; the run's deadline does not count it."""
    paused_since: datetime | None = None
    """Set while the run waits for a human (that wait is not counted yet)."""
    context_tokens: int | None = None
    """The input plus output tokens of the last model call, as the provider counted them."""
    elided_through: int = 0
    """What the last model call said of the results it sent shortened (`CallModelResult`)."""
    chars_per_token: float | None = None
    """Characters per token the provider's count of the last request showed (the context
    budget in tokens is turned into characters with it)."""
    tools_ref: str | None = None
    """Where a model call stored the tool specs: later calls name them instead of carrying
    them (None: not stored yet)."""
    output_corrections: int = 0
    answer_check: CheckedAnswer | None = None
    """`last_output`'s final answer as checked against `output_schema` when it was recorded:
    checked once, read by `decide` (None: no schema, no final answer, or a state carried from
    before the check was kept, checked again as the run starts)."""
    verified_turn: int = 0
    """The turn whose final answer the completion check accepted."""
    verification: str = ""
    """What the completion check said when it accepted it."""
    empty_answers: int = 0
    """Empty final answers the model gave (the first is sent
    back, the second stops the run `blocked`)."""
    require_verification: bool = False
    """The run's input or its worker requires verification: a final answer no completion
    check accepted ends the run `unverified`."""
    unverified_answers: int = 0
    """Final answers of a run requiring verification and naming no completion check (the
    first is sent back, the next ends the run `unverified`)."""
    unverified: str | None = None
    """Why a run requiring verification ends `unverified` (its completion check said no once
    too often)."""
    failed_runs_complete: bool = False
    """The worker said a run ending `failed` completes its workflow (`failed_runs`)."""
    cancel_reason: str | None = None
    failure: str | None = None
    """Set when an operation failed in a way that ends the run (its error class first)."""
    failure_cause: StopCause | None = None
    """`failure` as a code (None: a failure recorded before codes were)."""
    limit: str | None = None
    """Set when a batch could not be reserved in the budget: nothing of it started."""
    stop_reason: str | None = None
    stop_cause: StopCause | None = None
    undo_tools: dict[str, ToolSpec] = Field(default_factory=dict)
    """The tools that undo this run's writes (`ToolSpec.compensate`), which the model is not
    offered."""
    undos: list[Undo] = Field(default_factory=list)
    """The writes that succeeded and declared an undo, oldest first."""
    compensation: Compensation | None = None
    """Set once the run, ending without delivering, offered its writes' undos."""
    rolled_back: list[CompensationLine] = Field(default_factory=list)
    """What the model's `roll_back` calls did to the run's writes, newest first."""
    compensation_at_stop: list[CompensationLine] = Field(default_factory=list)
    """What became of each write, as the run's result says it (`status` shows it after)."""

    def serving_model(self) -> tuple[Provider, str]:
        """The provider and model the run's model calls go to now."""
        if self.serving == 0:
            return self.run_input.provider, self.run_input.model
        fallback = self.run_input.fallbacks[self.serving - 1]
        return fallback.provider, fallback.model

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
        builtins = list(BUILTIN_TOOLS) if builtin_tools is None else builtin_tools
        if any(spec.name == ROLL_BACK for spec in tools):  # the worker offers it with undos
            builtins = [*builtins, ROLL_BACK]
        offered = {*run_input.tools, *builtins}
        return cls(
            run_input=run_input,
            workflow_id=workflow_id,
            tools={spec.name: spec for spec in tools if spec.name in offered},
            undo_tools={spec.name: spec for spec in tools if spec.name not in offered},
            builtin_tools=builtins,
            started_at=now,
            outbox=outbox,
        )

    def active_since(self, now: datetime | None = None) -> datetime:
        """The start of the run's working time: waits for humans do not count, the one still
        going on included (given `now`)."""
        waiting = 0.0
        if now is not None and self.paused_since is not None:
            waiting = (now - self.paused_since).total_seconds()
        return self.started_at + seconds(self.paused_seconds + waiting)

    def reserved(self) -> Usage:
        """Usage so far plus the slices of the child runs still working: what `limits_left`
        shows, since those slices are spoken for."""
        total = self.usage.model_copy()
        for delegation in self.delegations.values():
            if delegation.status == "running":
                add_usage(total, delegation.whole_slice())
        return total

    def chain_usage(self) -> Usage | None:
        """The usage of the whole continue chain, this run's included (None: no chain)."""
        if self.inherited_usage is None:
            return None
        total = self.inherited_usage.model_copy()
        add_usage(total, self.usage)
        return total

    def used_per_tool(self) -> Counter[str]:
        """Calls started per tool, the child runs' included."""
        used = started_per_tool(self.calls.values())
        for delegation in self.delegations.values():
            used.update(delegation.tools_used)
        return used

    def open_batch(self) -> Batch:
        """The batch a tool step works on; there is one whenever such a step was decided."""
        if self.batch is None:
            raise ValueError("no tool calls are open")
        return self.batch

    def spec_of(self, call_id: str) -> ToolSpec:
        name = self.calls[call_id].tool
        spec = self.tool_spec(name)
        if spec is None:
            raise KeyError(name)
        return spec

    def tool_spec(self, name: str) -> ToolSpec | None:
        """A tool of the run's, or an undo of one of its writes (None: neither)."""
        return self.tools.get(name) or self.undo_tools.get(name)

    def settlers(self, call_id: str) -> list[str]:
        """Who may settle `call_id`'s unknown write: its tool's approvers and the operators
        (none named: anyone who may act on the run)."""
        return list(dict.fromkeys([*self.spec_of(call_id).approvers, *self.operators]))

    def call(self, call_id: str) -> ToolCall:
        """The proposed call `call_id` of the output being acted on."""
        assert self.last_output is not None
        for call in self.last_output.tool_calls:
            if call.call_id == call_id:
                return call
        raise KeyError(call_id)

    def with_specs(self, call_ids: Iterable[str]) -> list[tuple[ToolCall, ToolSpec]]:
        assert self.last_output is not None
        calls = {call.call_id: call for call in self.last_output.tool_calls}
        return [(calls[call_id], self.spec_of(call_id)) for call_id in call_ids]


def decisions_to_check(state: LoopState) -> list[DecisionToCheck]:
    """Everything held for the worker's check: answers and cancels first (a cancel applies
    whatever the run does), then the batch's decisions."""
    held = list(state.words_to_check)
    return held + (list(state.batch.to_check) if state.batch is not None else [])


def started_per_tool(calls: Iterable[CallRecord]) -> Counter[str]:
    return Counter(r.tool for r in calls if r.attempts > 0)


def add_usage(total: Usage, more: Usage) -> None:
    for field in Usage.model_fields:
        setattr(total, field, getattr(total, field) + getattr(more, field))


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
