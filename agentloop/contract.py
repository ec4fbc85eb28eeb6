"""The public contract of the `AgentRun` workflow: input, result, signals, status.

Other programs drive agentloop through these shapes (docs/concepts/design.md §3), so fields
are only ever added, with defaults. Pure pydantic: imported by the workflow, the CLI and
callers alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from agentloop.digests import canonical_json, sha256_hex
from agentloop.events import Event
from agentloop.input_limits import (
    MAX_LIST_ITEMS,
    MAX_NAME_CHARS,
    MAX_NOTE_CHARS,
    MAX_TEXT_CHARS,
    MAX_WAIT_SECONDS,
    Name,
    StrictInput,
)
from agentloop.ledger import (
    ApprovalRecord as ApprovalRecord,
)
from agentloop.ledger import (
    CallRecord as CallRecord,
)
from agentloop.ledger import (
    CompensationLine as CompensationLine,
)
from agentloop.ledger import (
    ModelSwitch as ModelSwitch,
)
from agentloop.ledger import (
    NoticeSent as NoticeSent,
)
from agentloop.ledger import (
    PendingApproval as PendingApproval,
)
from agentloop.ledger import (
    PendingCall as PendingCall,
)
from agentloop.ledger import (
    Reconciliation as Reconciliation,
)
from agentloop.ledger import (
    RefusedApproval as RefusedApproval,
)
from agentloop.ledger import (
    RefusedDecision as RefusedDecision,
)
from agentloop.ledger import (
    RefusedResolution as RefusedResolution,
)
from agentloop.ledger import (
    RefusedSignal as RefusedSignal,
)
from agentloop.ledger import (
    ResolutionRecord as ResolutionRecord,
)
from agentloop.ledger import (
    SideEffect as SideEffect,
)
from agentloop.ledger import (
    UnresolvedWrite as UnresolvedWrite,
)
from agentloop.ledger import (
    WriteAwaitingOperator as WriteAwaitingOperator,
)
from agentloop.people_messages import (
    ApprovalDecision as ApprovalDecision,
)
from agentloop.people_messages import (
    ApprovalVerdict as ApprovalVerdict,
)
from agentloop.people_messages import (
    CancelRequest as CancelRequest,
)
from agentloop.people_messages import (
    Delivery as Delivery,
)
from agentloop.people_messages import (
    ResolveRequest as ResolveRequest,
)
from agentloop.people_messages import (
    UserMessage as UserMessage,
)

WORKFLOW_NAME = "AgentRun"
# The names the run's messages go by: one set, which the workflow takes them by
# (`agentloop.workflows.inbound`) and `agentloop.run_client.RunClient`, the one sender, sends.
APPROVE_SIGNAL: Final = "approve"
RESOLVE_SIGNAL: Final = "resolve"
MESSAGE_SIGNAL: Final = "message"
CANCEL_SIGNAL: Final = "cancel"
DECIDE_UPDATE: Final = "decide_approval"
"""The `approve` signal's twin, which answers whether the decision counted."""
DELIVER_UPDATE: Final = "deliver"
"""The `message`, `resolve` and `cancel` signals' twin (`Delivery`), which answers whether
what it carries counted (after the worker's check, when it has one)."""
STATUS_QUERY: Final = "status"
RUN_FAILED: Final = "RunFailed"
"""The type of the failure a workflow fails with when its run ends `failed`: the failure's
details hold the run's `AgentRunResult` (`agentloop.run_results.read_result` reads it)."""
DEFAULT_TASK_QUEUE = "agent-loop"

Provider = Literal["openai-chat", "openai-responses", "anthropic"]
"""The provider protocols, one adapter each (`agentloop.adapters`)."""

RunStatus = Literal[
    "completed",
    "blocked",
    "limit_reached",
    "stalled",
    "denied",
    "refused",
    "incomplete",
    "rejected",
    "approval_timeout",
    "input_timeout",
    "unresolved",
    "failed",
    "cancelled",
    "unverified",
]
"""How a run ended. `unverified` only ends a run that requires verification
(`AgentRunInput.require_verification`, or its worker's `require_verification`): its final
answer was not accepted by any completion check."""

StopCause = Literal[
    "final_answer",
    "give_up",
    "empty_answer",
    "budget",
    "deadline",
    "stalled",
    "invalid_calls",
    "cancelled",
    "refused",
    "content_filtered",
    "truncated",
    "verification",
    "denied",
    "rejected",
    "approval_timeout",
    "input_timeout",
    "unresolved",
    "protocol",
    "model_error",
    "store_error",
    "invalid_input",
]
"""Why a run stopped, as a code beside the `stop_reason` sentence (`AgentRunResult.stop_cause`):
`budget` is any cap of `limits` but the deadline (the sentence names which)."""

Phase = Literal[
    "calling_model",
    "validating",
    "awaiting_approval",
    "executing_tools",
    "awaiting_reconciliation",
    "awaiting_input",
    "verifying",
    "compensating",
    "finished",
]


def describe_validation_error(exc: ValidationError, names: Mapping[str, str] = {}) -> str:
    """A validation error on one line, one clause per field (`limits.max_model_calls: ...`),
    without pydantic's URLs: what a caller needs to fix its input. `names`: what to call a
    field instead (the CLI's option it came from)."""
    parts = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "input"
        got = repr(error.get("input"))
        got = got if len(got) <= 80 else got[:77] + "..."
        parts.append(f"{names.get(field, field)}: {error['msg']} (got {got})")
    return "; ".join(parts)


CompensatePolicy = Literal["never", "ask", "always"]
"""What a run that ends without delivering does with the writes it made that declared an
undo (docs/concepts/compensation.md): leave them as they are, offer each undo for a
person's approval (`ask`), or run each undo without asking (`always`)."""


class Principal(StrictInput):
    subject: Name
    tenant: str = Field(default="default", max_length=MAX_NAME_CHARS)
    scopes: list[Name] = Field(default_factory=list, max_length=MAX_LIST_ITEMS)


class Limits(StrictInput):
    max_model_calls: int = Field(default=8, ge=1)
    max_tool_calls: int = Field(default=32, ge=0)
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0)
    deadline_seconds: float | None = Field(default=600, gt=0, le=MAX_WAIT_SECONDS)
    per_tool: dict[Name, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict, max_length=MAX_LIST_ITEMS
    )


class FallbackModel(StrictInput):
    """A model a run falls back to when the one serving it is unavailable."""

    provider: Provider
    model: Name


MAX_FALLBACKS = 4


MAX_STOP_SEQUENCES = 16
MAX_EXTRA_CHARS = 4_000
ReasoningEffort = Literal["minimal", "low", "medium", "high"]


class ModelParameters(StrictInput):
    """A run's model parameters (`AgentRunInput.model_settings`), sent on every model call.
    Checked per provider when the run starts (`checks.model_settings_problem`): a parameter
    the provider does not take fails the run at once, naming it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stop: list[Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]] = Field(
        default_factory=list, max_length=MAX_STOP_SEQUENCES
    )
    """Stop sequences (Chat Completions `stop`, Anthropic `stop_sequences`)."""
    reasoning_effort: ReasoningEffort | None = None
    """OpenAI's reasoning effort (Chat `reasoning_effort`, Responses `reasoning.effort`)."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific request fields passed through as given (at most 4,000 characters of
    JSON; none agentloop sets itself)."""


class AgentRunInput(StrictInput):
    """The run's input. Every field has a maximum (the constants above): an input beyond one
    fails the run at once, naming the field, instead of wedging it later."""

    task: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    instructions: str = Field(default="", max_length=MAX_TEXT_CHARS)
    provider: Provider
    model: Name
    fallbacks: list[FallbackModel] = Field(default_factory=list, max_length=MAX_FALLBACKS)
    """The models to go on with, in order, when a model call fails as unavailable after its
    own retries (a 5xx, a rate limit, a lost connection, a timeout; never a refusal or a
    request the provider refused): the call goes to the next one with the same transcript, in
    its protocol, and the run stays on it (`RunStatusView.model_switches`). `model_settings`
    must suit each one's provider."""
    tools: list[Name] = Field(default_factory=list, max_length=MAX_LIST_ITEMS)
    principal: Principal = Field(default_factory=lambda: Principal(subject="anonymous"))
    principal_signature: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    """A starter's signature of this whole input (`start_digest`), the run's workflow id, an
    expiry and a nonce (`agentloop.sign_start`, `agentloop.runtime.start_signing`): workers
    with starter keys (`AGENTLOOP_STARTER_KEYS`) check it at the run's start and refuse a run
    it does not vouch for, or a second run started with it."""
    limits: Limits = Field(default_factory=Limits)
    stream: bool = True
    """Read the provider's answer as a stream (the model's text reaches watchers as it comes)."""
    publish_events: bool = True
    """Publish what the run does on its Workflow Stream (`agentloop.watch`, `agentloop watch`):
    the model's text as it streams, each call, result and wait, the end. Off: nothing is
    published, and the run's history has the shape it had before streams."""
    model_settings: ModelParameters = Field(default_factory=ModelParameters)
    approval_timeout_seconds: float = Field(default=86400, gt=0, le=MAX_WAIT_SECONDS)
    on_approval_timeout: Literal["end", "reject", "escalate", "blocked"] = "end"
    """What a call undecided after `approval_timeout_seconds` does: `end` the run
    `approval_timeout`; `reject` it (rejected by `approval_timeout`, told to the model like an
    approver's rejection); `escalate` it to the `escalate_to` group of each notice route it
    goes to and wait `approval_timeout_seconds` more, then end; end the run `blocked`."""
    reconciliation_timeout_seconds: float = Field(default=86400, gt=0, le=MAX_WAIT_SECONDS)
    """How long a write whose outcome stayed unknown waits for a `resolve` signal before the
    run stops `unresolved`."""
    input_timeout_seconds: float = Field(default=86400, gt=0, le=MAX_WAIT_SECONDS)
    """How long a question the model asked (`ask_user`) waits for a `message`."""
    context_budget_chars: int | None = Field(default=None, ge=2_000)
    """Characters the model may be sent per call; past it, older tool results are shortened
    and run-state facts restated. Wins over `context_budget_tokens`."""
    context_budget_tokens: int | None = Field(default=None, ge=500)
    """The same budget in tokens (default: by model), turned into characters at the ratio
    the provider's token count of this run's last request showed."""
    continue_as_new_after_events: int | None = Field(default=None, ge=20)
    """Continue as new once a run's history holds this many events (besides whenever
    Temporal suggests it); the run state and transcript head carry over."""
    output_schema: dict[str, Any] | None = None
    """When set, the final answer must be JSON satisfying it (checked when the run starts to
    be a JSON Schema of at most 64,000 characters and 32 levels)."""
    completion_check: Name | None = None
    continue_from: str | None = Field(default=None, min_length=1, max_length=1_000)
    """A finished run's workflow id whose transcript this run resumes: of the same tenant,
    and of the same subject unless `continue_as_other_subject`."""
    continue_as_other_subject: bool = False
    task_family: Name | None = None
    """The family of tasks this run belongs to (indexed as `AgentTaskFamily`): `agentloop
    stats FAMILY` reads the finished runs of a family and suggests limits from them."""
    limits_source: str | None = Field(default=None, max_length=MAX_NOTE_CHARS)
    """Where `limits` came from, when not from the caller (`agentloop run --limits-from`)."""
    delegate_model: Name | None = None
    """The model of the runs this run delegates to with the `delegate` tool (default: its own)."""
    offer_give_up: bool = True
    """Offer the model the built-in `give_up` tool: it says why it cannot finish, and the run
    stops `blocked` with that reason."""
    require_verification: bool = False
    """A final answer no completion check accepted (none named, or `completion_check` said
    no) ends the run `unverified`, never `completed`: the model is told once first. The
    worker may require it too, for every run or a task family (`require_verification`)."""
    compensate: CompensatePolicy = "ask"
    """When the run ends without delivering (any status but `completed`): what becomes of
    the writes that succeeded and declared an undo (`compensate=` on the tool). `ask`: each
    undo waits for a person's approval, with its exact arguments, like any write."""
    compensate_per_tool: dict[Name, CompensatePolicy] = Field(
        default_factory=dict, max_length=MAX_LIST_ITEMS
    )
    """`compensate` for the writes of one tool (by the original tool's name), over the
    run's."""

    def unbudgeted_continuation(self) -> str | None:
        """Why this run may not start as given, when it continues another without being
        given its limits: fresh defaults would hand an unfinished task a new budget that
        nobody decided (the CLI's `continue` asks for `--max-model-calls`)."""
        if self.continue_from and "limits" not in self.model_fields_set:
            return (
                "limits: a run with continue_from must be given its limits explicitly (the"
                " budget it may use on top of what the runs it continues used)"
            )
        return None

    def start_digest(self) -> str:
        """The SHA-256 (hex) of what a starter's signature binds: the canonical JSON of this
        input without `principal_signature`, each value left at its default left out (a field
        added later with its default changes no digest; one given a value does)."""
        unsigned = self.model_dump(
            mode="json", exclude={"principal_signature"}, exclude_defaults=True
        )
        return sha256_hex(canonical_json(unsigned))

    def summary(self) -> str:
        """The run's one-line static summary in the Temporal UI."""
        task = self.task if len(self.task) <= 120 else self.task[:117] + "..."
        return f"{task} · {self.provider} {self.model}"


class ModelSettings(ModelParameters):
    """How a model call is made, besides the transcript and the tools: the run's parameters
    and whether it streams."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    stream: bool = True


class Usage(BaseModel):
    """What a run used, each count in its own unit (model requests, tool executions
    and runtime steps are counted apart)."""

    model_calls: int = 0
    """Model calls the loop made (what `max_model_calls` limits)."""
    tool_calls: int = 0
    """Tool calls started (what `max_tool_calls` limits)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_requests: int = 0
    """Requests sent to the provider: each model call's attempts, Temporal's retries included."""
    tool_attempts: int = 0
    """Tool executions: each call's activity attempts, Temporal's retries included."""
    steps: int = 0
    """Steps of the loop carried out (model calls, checks, tool steps, lookups, waits)."""
    human_waits: int = 0
    """Times the run waited for a person (approval, an answer, a reconciliation)."""


BUDGETED = ("model_calls", "tool_calls", "input_tokens", "output_tokens", "cost_usd")
"""The `Usage` fields limits are set on (and a delegate call's result shows the model)."""


class AgentRunResult(BaseModel):
    status: RunStatus
    stop_reason: str
    stop_cause: StopCause | None = None
    """`stop_reason`'s cause as a code (None: a run from before it was given)."""
    verified: bool = False
    """Whether a completion check (`completion_check`) accepted the final answer: a run that
    completed unverified only says the model stopped asking for tools."""
    verified_by: str | None = None
    """The completion check that accepted the answer."""
    verification: str = ""
    """What that check said."""
    output: str | dict[str, Any] | list[Any] | None = None
    output_ref: str | None = None
    """Set when the answer was too long to travel inline (over 100,000 characters): `output`
    is its start, and this is the store key of the whole (`agentloop transcript` shows it,
    `Store.get_artifact` reads it)."""
    usage: Usage = Field(default_factory=Usage)
    calls: list[CallRecord] = Field(default_factory=list)
    side_effects: list[SideEffect] = Field(default_factory=list)
    pending: list[PendingCall] = Field(default_factory=list)
    transcript_head: str = ""
    """Key of the last transcript node in the store: `agentloop transcript` starts there."""
    unsent: list[Event] = Field(default_factory=list)
    """Events the model had not seen when the run stopped (results of its last tool calls,
    runner notes): a run that continues this one (`continue_from`) sends them first."""
    report: str = ""
    """The stop report: what happened, the side effects and how each was confirmed, what is
    pending, usage, and how to continue."""
    paused_seconds: float = 0.0
    """Time the run spent waiting for humans (not counted against its deadline)."""
    rejected_actions: list[str] = Field(default_factory=list)
    """Digests of the actions an approver rejected (a continuing run never runs them)."""
    unresolved_writes: list[UnresolvedWrite] = Field(default_factory=list)
    """Writes whose outcome stayed unknown, this run's and those it inherited unresolved."""
    artifacts: list[str] = Field(default_factory=list)
    """The artifacts its transcript refers to (a continuing run may read them)."""
    task_state: dict[str, Any] = Field(default_factory=dict)
    """The task's state at the stop, as the run's tools set it (`agentloop.WithState`)."""
    chain_usage: Usage | None = None
    """For a run that continued another (`continue_from`): the usage of the whole chain of
    runs, this one's included (None: a run that continued none, or from before)."""
    compensation: list[CompensationLine] = Field(default_factory=list)
    """For a run that ended without delivering: each write it made, newest first, and what
    became of it (undone by which call, not undone and why, or left as is)."""
    model_switches: list[ModelSwitch] = Field(default_factory=list)
    """Each time the run went on with its next model (`AgentRunInput.fallbacks`)."""


class PreviousRun(BaseModel):
    """A finished run that a new run continues from (`continue_from`)."""

    workflow_id: str
    head: str
    status: str
    stop_reason: str
    unsent: list[Event] = Field(default_factory=list)
    principal: Principal | None = None
    """Who it ran for (None: not known, from an older loader)."""
    rejected_actions: list[str] = Field(default_factory=list)
    unresolved_writes: list[UnresolvedWrite] = Field(default_factory=list)
    artifacts: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    """What the run, and the runs it continued, used in all."""


class LimitsLeft(BaseModel):
    model_calls: int
    tool_calls: int
    total_tokens: int | None = None
    cost_usd: float | None = None
    seconds: float | None = None


class RunStatusView(BaseModel):
    """What the `status` query returns."""

    phase: Phase
    turn: int
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    unresolved: list[WriteAwaitingOperator] = Field(default_factory=list)
    question: str | None = None
    question_asked_at: datetime | None = None
    """Since when `question` waits for an answer (the inbox shows how long)."""
    usage: Usage = Field(default_factory=Usage)
    chain_usage: Usage | None = None
    """As `AgentRunResult.chain_usage`, so far."""
    task_state: dict[str, Any] = Field(default_factory=dict)
    """The task's state as the run's tools set it (`agentloop.WithState`)."""
    limits_left: LimitsLeft | None = None
    calls: list[CallRecord] = Field(default_factory=list)
    refused_decisions: list[RefusedDecision] = Field(default_factory=list)
    run_chain: list[str] = Field(default_factory=list)
    """The Temporal run ids the run went through, one more per continue-as-new: the first
    (`run_chain[0]`, which signed decisions name) and at most the latest 19."""
    run_chain_left_out: int = 0
    """How many run ids between the first and the latest ones `run_chain` leaves out (the
    Temporal UI lists them all)."""
    approval_signing: str = ""
    """`signed` (decisions count only when signed by a configured approver key) or `unsigned`
    (any signaller may name any approver), as the worker said when the run started and
    each time it checked a decision; empty for a run from before workers said."""
    stop_reason: str | None = None
    stop_cause: StopCause | None = None
    transcript_head: str = ""
    """Key of the last transcript node in the store (`agentloop transcript` reads from it)."""
    waiting_since: AwareDatetime | None = None
    """While the run waits for people (`awaiting_*`): since when (the run's deadline is
    paused meanwhile)."""
    wait_until: AwareDatetime | None = None
    """While it waits for people: when the wait times out (`approval_timeout`,
    `input_timeout`, `unresolved`)."""
    model_switches: list[ModelSwitch] = Field(default_factory=list)
    """Each time the run went on with its next model (`AgentRunInput.fallbacks`): the last
    one names the model serving it now."""
    notice_failures: list[str] = Field(default_factory=list)
    """Notices of this run waiting for a person that could not be delivered to the webhooks
    (`AGENTLOOP_NOTIFY_WEBHOOKS`, `AGENTLOOP_NOTIFY_ROUTES`), each saying of what, which
    webhooks (by name and host only: a webhook URL is a secret) and why."""
    notices_sent: list[NoticeSent] = Field(default_factory=list)
    """The reminders and escalations sent while the run waits (the routes' timers)."""
    compensation: list[CompensationLine] = Field(default_factory=list)
    """While the run undoes what it wrote (`compensating`) and once it stopped: as
    `AgentRunResult.compensation`."""
