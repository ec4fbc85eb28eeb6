"""Activity inputs and outputs: made of canonical events, so the workflow never sees SDK types."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agentloop.contract import (
    ApprovalDecision,
    CallRecord,
    ModelSettings,
    Principal,
    Provider,
    ResolveRequest,
    describe_validation_error,
)
from agentloop.events import Event, ModelOutput
from agentloop.notice_timers import MAX_ROUTES, NoticeTimers
from agentloop.signed_words import SignedWord
from agentloop.tool_spec import Outcome, ToolSpec

# Activity names: each one constant, read by the activity's `@activity.defn` and by the workflow
# that calls it. Never renamed: a stored history calls activities by these names.

MODEL_CALL = "call_model"
"""The model call with the tool specs inline: a run's first one (it stores them)."""
MODEL_CALL_BY_REF = "call_model_by_ref"
"""The model call naming the specs by reference. Its own activity type, so that a worker still
on older code, which would ignore the reference and call the model without tools, never takes
it: it does not have the type."""
MODEL_CALLS = (MODEL_CALL, MODEL_CALL_BY_REF)
STORE_TEXTS = "store_texts"
"""Long texts put in the store before the model call that first sends them."""
COUNT_MODEL_INPUT = "count_model_input"
"""The provider's own count of a model call's input tokens: asked when the byte bound on them
would not let the call start."""
DESCRIBE_RUN = "describe_run"
"""What the worker tells a run as it starts (`RunDescription`)."""
CHECK_PRECONDITION = "check_precondition"
"""A tool's business check against the system of record, before the call is offered for
approval or run."""
RUN_TOOL = "run_tool"
"""One tool call: the team's code, an MCP server's tool, or a built-in."""
LOOKUP_OUTCOME = "lookup_outcome"
"""What the system of record holds under a write's idempotency key, when its outcome is
unknown."""
FRAME_TEAM_ANSWER = "frame_team_answer"
"""An activity tool's answer, undecoded, read and bounded by agentloop's worker."""
READ_TEAM_OUTCOME = "read_team_outcome"
"""An activity tool's lookup answer, undecoded, read by agentloop's worker (the same)."""
LOAD_PREVIOUS_RUN = "load_previous_run"
"""What the run a new one continues from left (`continue_from`)."""
VERIFY_COMPLETION = "verify_completion"
"""The run's `completion_check`, asked before a final answer is taken."""
CHECK_APPROVAL = "check_approval"
"""Whether an approval decision counts, by the worker's approver keys."""
CHECK_RESOLUTION = "check_resolution"
"""Whether an operator's word on an unknown write counts, the same way."""
CHECK_WORD = "check_word"
"""Whether a person's `message` or `cancel` counts, the same way (only where the worker takes
only signed ones)."""
NOTIFY_WAITING = "notify_waiting"
"""The webhooks told that a run started waiting for a person."""

OVER_BUDGET = "OverBudget"
"""The failure type of a model call that was not started: even its input may not fit what is
left of the run's token or cost cap (its message names the cap and by how much)."""
APPROVAL_RULE_FAILED = "ApprovalRuleFailed"
"""The failure type of a `check_precondition` whose approval rule (the team's code) raised."""


@dataclass(frozen=True)
class UnreadableJSON:
    """What an untyped payload decodes to when no JSON parser here can read it (nested past
    the parsers' limits, a number of thousands of digits): the workflow code that takes it
    (a run's start input, an activity tool's result) refuses it naming `reason`, where the
    decode itself would fail every workflow task (`agentloop.runtime.converter`)."""

    reason: str

    def told(self) -> str:
        """What the model is told of an answer no one can read."""
        return f"(the activity's result is not JSON agentloop can read: {self.reason})"


class ModelCallBudget(BaseModel):
    """What a model call may use, reserved before it starts: the activity bounds the request's
    input tokens, and sends the provider an output-token limit that keeps the call within both
    caps, or does not start the call (`OverBudget`)."""

    tokens_left: int | None = None
    """`max_total_tokens` minus what the run used and its child runs hold (None: no cap)."""
    cost_left: float | None = None
    """The same of `max_cost_usd`."""
    context_tokens: int | None = None
    """The input plus output tokens of the run's last model call, as the provider counted
    them: what the transcript up to now takes (None: not measured yet)."""
    elided_before: int = 0
    """The last model call's `elided_through`: the transcript's events before this index
    hold every result it sent shortened."""
    input_tokens: int | None = None
    """The call's input tokens as the provider's counter gave them (`count_model_input`):
    reserved instead of the bound on them (None: not counted, the bound is reserved)."""


class CallModelInput(BaseModel):
    run_id: str
    turn: int
    provider: Provider
    model: str
    head: str
    """The transcript so far, by reference: the activity loads it from the store."""
    new_events: list[Event] = Field(default_factory=list)
    """Events since the last model call; they travel inline once and are then persisted."""
    tools: list[ToolSpec] = Field(default_factory=list)
    """The run's tool specs, inline: on its first model call (empty when `tools_ref` is set)."""
    tools_ref: str | None = None
    """The same specs by reference, once a model call has stored them (`CallModelResult`)."""
    settings: ModelSettings = Field(default_factory=ModelSettings)
    context_budget_chars: int | None = None
    context_budget_tokens: int | None = None
    chars_per_token: float | None = None
    """What this run's last request measured (see `context.budget_chars`)."""
    facts: list[str] = Field(default_factory=list)
    """What must not be lost if older results are shortened to fit: from run state."""
    budget: ModelCallBudget = Field(default_factory=ModelCallBudget)
    """What the call is reserved against (the token and cost caps). The output comes back
    slim: the provider's raw items stay in the store, a text over `MAX_INLINE_ANSWER_CHARS`
    travels by reference (`CallModelResult.sent_head` says where the output was appended)."""
    publish_text: bool = False
    """Publish the model's visible text on the run's stream as it arrives (`run_events`)."""


class StoreTextsInput(BaseModel):
    texts: list[str] = Field(default_factory=list)
    """Each stored as a `text/plain` artifact; the answer is their keys, in this order."""


class CallModelResult(BaseModel):
    head: str
    attempt: int = 0
    """The activity attempt that answered, Temporal's retries included (0: not said)."""
    """The transcript head after `new_events` and `output` were appended."""
    output: ModelOutput
    cost_usd: float = 0.0
    """What the call cost by the worker's price table (0 for a model it does not know)."""
    request_chars: int = 0
    """The size of the events sent (as `context.fit` measures them), for the token ratio."""
    tools_ref: str | None = None
    """Where the tool specs of the call are stored: later calls send this, not the specs."""
    sent_head: str = ""
    """The transcript head after `new_events`, before `output` (what the workflow can check
    without the output's raw items)."""
    elided_through: int = 0
    """Every result the call sent shortened is among the transcript's events before this
    index (`context.Fitted.elided_through`): the next call's budget hands it back."""


class InputReply(BaseModel):
    """A person's answer to a tool's `InputRequest`, for the call's next run."""

    pending_ref: str
    """The request answered (`InputRequest.pending_ref`)."""
    text: str
    sender: str = "user"


class RunToolInput(BaseModel):
    workflow_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str = ""
    principal: Principal | None = None
    """Who the run acts for (`ToolContext.principal`); None from runs started before it
    was sent (the activity then says `anonymous`)."""
    approval_rule: str | None = None
    """`check_precondition` only: the approval rule of the call's tool, as the run's tool
    spec names it, to evaluate with the precondition (the verdict goes into history)."""
    reply: InputReply | None = None
    """`run_tool` only: a person's answer to what this call's tool asked when it last ran."""


class ActivityToolInput(BaseModel):
    """What an activity tool (`agentloop.activity_tool`) and its lookup activity are given:
    one JSON object, readable by a worker in any SDK language."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str
    idempotency_key: str = ""
    """For a write: the key to send to the system of record, and to look the write up by."""
    principal: Principal
    workflow_id: str


class ToolOutput(BaseModel):
    """`frame_team_answer`: what an activity tool returned, to be bounded like any tool's
    output (kept whole as an artifact when large) by agentloop's own worker."""

    workflow_id: str
    call_id: str
    tool: str
    output: Any = None


def outcome_from_answer(answer: Any) -> Outcome:
    """A lookup activity's answer as an outcome: `unknown`, saying why, when it is none."""
    if isinstance(answer, UnreadableJSON):
        return Outcome(state="unknown", record=f"lookup answered no outcome: {answer.reason}")
    try:
        return Outcome.model_validate(answer)
    except ValidationError as exc:
        problem = describe_validation_error(exc)[:500]
        return Outcome(state="unknown", record=f"lookup answered no outcome: {problem}")


class PreconditionResult(BaseModel):
    problem: str | None = None
    """Why the call must not go ahead; None when the precondition holds."""
    error_class: str | None = None
    """`permission` when the refusal was a `PermissionDenied` (None: a business refusal)."""
    needs_approval: bool | None = None
    """The verdict of `approval_rule` (None when none was asked)."""
    made: bool = True
    """False when the check could not be made at all (`problem` says why)."""


class VerifyInput(BaseModel):
    check: str
    workflow_id: str
    answer: str = ""
    answer_ref: str = ""
    """The store key of the whole answer when `answer` is only its start (a long answer)."""
    calls: list[CallRecord] = Field(default_factory=list)
    """The call ledger: the evidence a verifier checks against the systems of record."""
    task_state: dict[str, Any] = Field(default_factory=dict)
    """The run's task state (`agentloop.WithState`)."""
    principal: Principal | None = None


class Verdict(BaseModel):
    passed: bool
    reason: str = ""


class CheckPrincipalInput(BaseModel):
    """A fresh run's principal and the signature it came with:
    what `describe_run` is asked about it."""

    principal: Principal
    signature: str | None = None
    workflow_id: str
    """The run the signature must be for: the run's own workflow id, or for a delegated
    child its root run's (the child carries the signature its root was started with)."""
    delegated: bool = False
    """A child run (its parent started it, the server says): it carries its root run's
    signature, whose input, expiry and nonce were checked as the root started."""
    input_digest: str = ""
    """The run's own start input digest (`AgentRunInput.start_digest`; empty for a child)."""
    started_at: datetime | None = None
    """When the run started, as its history records it: what the expiry is measured against."""
    run: str = ""
    """The run chain's first run id: the run that claims the signature's nonce."""


class PrincipalCheck(BaseModel):
    """The worker's word on a run's principal: whether it may be taken."""

    problem: str = ""
    """Why not (empty: it may)."""
    signer: str | None = None
    """The starter whose key signed it (None: unsigned, or not checked)."""


class DescribeToolsInput(BaseModel):
    names: list[str] = Field(default_factory=list)
    completion_check: str | None = None
    """The run's verifier, checked to exist on the worker before anything runs."""
    indexing: bool = True
    """`describe_run`: whether to find out if the run may index itself (a run started with
    agentloop's search attributes is indexed already)."""
    output_schema: dict[str, Any] | None = None
    """`describe_run`: the run's `output_schema`, for the worker to say whether checking an
    answer against it could cost more than a check may."""
    priced_model: str | None = None
    """`describe_run`: the run's model, when its `max_cost_usd` needs the worker to have a
    price for it."""
    priced_fallbacks: list[str] = Field(default_factory=list)
    """`describe_run`: the run's fallback models, priced as `priced_model` is."""
    principal: CheckPrincipalInput | None = None
    """`describe_run`: the run's principal, for the worker to say whether it may be taken
   ."""
    task_family: str | None = None
    """`describe_run`: the run's task family, for the worker to say whether it requires
    verification of that family's runs."""


class CheckApprovalInput(BaseModel):
    decision: ApprovalDecision
    workflow_id: str
    run: str
    """The run chain's first run id: what a signed decision is bound to."""
    waited_since: datetime | None = None
    """When the call's approval was asked for (workflow time): the approval latency metric."""


class CheckResolutionInput(BaseModel):
    resolution: ResolveRequest
    workflow_id: str
    run: str
    """The run chain's first run id: what a signed word is bound to."""
    approvers: list[str] = Field(default_factory=list)
    """The tool's approvers: with keys, only they may settle its write."""


class CheckWordInput(BaseModel):
    word: SignedWord
    workflow_id: str
    run: str
    """The run chain's first run id: what a signed word is bound to."""


class ApprovalCheck(BaseModel):
    """The worker's word on one approval decision (or operator's `resolve`): whether it
    counts."""

    problem: str = ""
    """Why it does not (empty: it counts)."""
    signing: Literal["signed", "unsigned"] | None = None
    """Whether the worker checks signatures (it has approver keys) or takes names as given
    (None: the worker could not be asked)."""


class RunDescription(BaseModel):
    """What `describe_run` tells a run as it starts: its tools' specs, whether it may index
    itself, and how the worker takes approvals."""

    tools: list[ToolSpec] = Field(default_factory=list)
    indexable: bool = False
    """The namespace has every agentloop search attribute registered (as Keyword): upserting
    them cannot fail the workflow task."""
    family_indexable: bool = False
    """`AgentTaskFamily` is registered too (a run naming its `task_family` upserts it)."""
    approval_signing: Literal["signed", "unsigned"] | None = None
    """Whether the worker takes only signed approvals (None: a worker from before it said)."""
    operators: list[str] = Field(default_factory=list)
    """Who may settle any of the run's unknown writes besides its tool's approvers."""
    notify: bool = False
    """Whether the worker sends notices of runs waiting for a person (it has webhooks)."""
    notice_timers: list[NoticeTimers] = Field(default_factory=list, max_length=MAX_ROUTES)
    """The reminders and escalations of the worker's notice routes (none: a notice is sent
    once)."""
    output_schema_problem: str | None = None
    """Why the run's `output_schema` cannot be checked at a bounded cost (asked for with it)."""
    unpriced_problem: str | None = None
    """Why the run's `max_cost_usd` could never bind: the worker has no price for its model
    (asked for with `priced_model`)."""
    principal: PrincipalCheck | None = None
    """The worker's word on the run's principal (None: not asked, or a worker from before)."""
    failed_runs_complete: bool = False
    """The worker's `failed_runs` is `complete`: a run ending `failed` completes its workflow
    with the result (as earlier builds did), instead of failing it with the result in the
    failure."""
    require_verification: bool = False
    """The worker requires verification of this run (of every run, or of its task family)."""


class NoticeCall(BaseModel):
    call_id: str
    tool: str
    args_digest: str = ""
    approvers: list[str] = Field(default_factory=list)


class WaitingNotice(BaseModel):
    """What `notify_waiting` tells the webhooks: a run started waiting for a person."""

    workflow_id: str
    kind: Literal["approval", "question", "unknown_write"]
    task: str = ""
    calls: list[NoticeCall] = Field(default_factory=list)
    question: str | None = None
    tenant: str | None = None
    """The run's tenant, which notices are routed by (None: a notice from before routing,
    told only to the webhooks of every tenant)."""
    stage: Literal["notice", "reminder", "escalation"] = "notice"
    to: str | None = None
    """The one route a reminder or an escalation is sent to, told of every call in it (None:
    a first notice, routed by tool and tenant to every webhook but the `escalation_only`
    ones)."""


@dataclass(frozen=True)
class DeliveryPolicy:
    """How `notify_waiting` delivers to each webhook, each on its own: every attempt within
    `timeout_seconds`, up to `attempts`, the Nth retry after `first_backoff_seconds *
    backoff_coefficient ** (N - 1)`. The workflow sizes the activity's timeout by it."""

    timeout_seconds: float = 10
    attempts: int = 4
    first_backoff_seconds: float = 1
    backoff_coefficient: float = 2

    def backoff_seconds(self, attempts_made: int) -> float:
        """The wait before the attempt after `attempts_made` (1 or more) failed ones."""
        return float(self.first_backoff_seconds * self.backoff_coefficient ** (attempts_made - 1))

    @property
    def longest_seconds(self) -> float:
        """One webhook's delivery at its longest: every attempt timing out, every backoff."""
        waits = sum(self.backoff_seconds(n) for n in range(1, self.attempts))
        return self.attempts * self.timeout_seconds + waits


NOTICE_DELIVERY = DeliveryPolicy()
NOTICE_NOT_DELIVERED = "NoticeNotDelivered"
"""The failure type of a `notify_waiting` some webhook did not take after its attempts (its
message names each such webhook by its host only, and why)."""
