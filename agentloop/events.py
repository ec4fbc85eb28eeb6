"""The canonical event model: the one vocabulary every layer speaks.

Provider formats never leak past `adapters/`; the workflow, the policies and the store only see
these events. Every model is frozen and every field has a default, because a payload that reached
Temporal history lives there for ever: fields added later must not break old histories.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StopKind = Literal["final", "tool_calls", "refused", "truncated", "content_filtered"]
"""Why the model stopped, normalised across providers."""

ToolStatus = Literal[
    "succeeded", "failed", "rejected", "denied", "unknown", "confirmed_after_query"
]
"""What happened to one tool call. `rejected`: the runner refused it before execution
(unknown tool, bad arguments); `denied`: authorization said no."""

ErrorClass = Literal[
    "transient",
    "invalid_arguments",
    "unknown_tool",
    "business",
    "permission",
    "protocol",
    "internal",
]
"""Error classes of docs/concepts/design.md / seed 001; each has its own recovery."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Instruction(_Frozen):
    """System or developer instructions."""

    type: Literal["instruction"] = "instruction"
    text: str = ""
    text_ref: str = ""
    """The store key of `text` once a run stored it (a text over `MAX_INLINE_TEXT_CHARS`):
    what carries the event on may then drop the text and name it (`loop.texts`). Transport
    only: not part of the transcript node."""


class UserInput(_Frozen):
    """The task, or a later message from a user."""

    type: Literal["user_input"] = "user_input"
    text: str = ""
    text_ref: str = ""
    """As `Instruction.text_ref`."""
    sender: str = "user"
    """Who said it; the first one is the run's principal."""


class ToolCall(_Frozen):
    """One call the model proposed. Nothing runs until the runner has validated it."""

    type: Literal["tool_call"] = "tool_call"
    call_id: str = ""
    """The provider's id for this call; every result must echo it."""
    name: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Parsed arguments (a JSON object)."""
    raw_arguments: str = ""
    """The arguments exactly as the model sent them, echoed back verbatim."""
    args_digest: str = ""
    """`digests.args_digest(name, arguments)`: what approvals and stall checks bind to."""


class Usage(_Frozen):
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ProviderRef(_Frozen):
    """Where a model output came from, and what that provider needs echoed back."""

    provider: str = ""
    """`openai-chat`, `openai-responses` or `anthropic`."""
    api: str = ""
    """The wire API, e.g. `chat.completions`."""
    api_version: str = ""
    model: str = ""
    """The model that answered, as the provider named it."""
    response_id: str = ""
    request_id: str = ""
    raw_items: list[dict[str, Any]] = Field(default_factory=list)
    """Provider-native items to echo back exactly (assistant message, content blocks,
    reasoning items with their signatures)."""


class ModelOutput(_Frozen):
    """One complete model response. Partial responses never become a `tool_calls` output."""

    type: Literal["model_output"] = "model_output"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop: StopKind = "final"
    stop_detail: str = ""
    """The provider's own stop reason and any explanation (e.g. `length while emitting
    tool arguments`)."""
    usage: Usage = Field(default_factory=Usage)
    provider_ref: ProviderRef = Field(default_factory=ProviderRef)
    text_ref: str = ""
    """Set on an output as the workflow receives it when the text was too long to travel
    inline: `text` is then its start and this is the store key of the whole (the transcript
    holds it whole). Transport only: not part of the transcript node."""
    text_chars: int = 0
    """With `text_ref`: the length of the whole text."""

    @property
    def offers_calls(self) -> bool:
        """Only an output that stopped for `tool_calls` had its calls offered for execution;
        the calls of a truncated, refused or filtered output never run and get no results."""
        return self.stop == "tool_calls" and bool(self.tool_calls)


class InputRequest(_Frozen):
    """A tool's server needs a person's answer before the call can complete (an MCP server's
    `input_required`). Transport only: `run_tool` hands it to the workflow, which asks it
    (`awaiting_input`) and runs the call again with the answer. Never in a transcript."""

    question: str
    """What the person is asked, bounded by the activity (`MAX_QUESTION_CHARS`)."""
    pending_ref: str
    """The store key of what the server needs back to go on (its request key, its state,
    the answer's schema): of any size, so the workflow carries only this reference."""


class ToolResult(_Frozen):
    """The outcome of one tool call, keyed by its call id, never by position."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str = ""
    tool: str = ""
    status: ToolStatus = "succeeded"
    content: str = ""
    """What the model sees: bounded, JSON or text."""
    artifact_ref: str | None = None
    error_class: ErrorClass | None = None
    retryable: bool = False
    side_effect: bool = False
    """True when the call changed (or may have changed) an external system."""
    state: dict[str, Any] = Field(default_factory=dict)
    """Small task-state updates the tool reports (seed 003)."""
    attempts: int = 0
    """The activity attempt that answered (Temporal's retries included; 0: not said). Transport
    only, like `content_ref`."""
    content_ref: str = ""
    """Where `run_tool` stored `content` (the store key of its bytes): the next model call
    carries this reference instead, so the content rides in workflow history once. Transport
    only: not part of the transcript node (see `transcript.node_body`)."""
    input_request: InputRequest | None = None
    """Set instead of an outcome when the tool asks a person first: the call has not happened
    yet (transport only, never settled as the call's result)."""
    trusted: bool = False
    """Its tool declared its output trusted: the model is sent it without the provenance
    envelope (`agentloop.envelope`). False for every result the runner made itself."""
    redacted: dict[str, int] = Field(default_factory=dict)
    """How many values of each kind (`card_number`, `api_key`, ...) were replaced in `content`
    before the model or the store saw it (`agentloop.redaction`)."""
    original_ref: str = ""
    """The artifact keeping the output as it was before redaction, readable only by the
    tool's approvers (empty: nothing was redacted, or the policy keeps no original)."""


class StateUpdate(_Frozen):
    """A note from the runner: approvals, budget changes, verdicts, nudges."""

    type: Literal["state_update"] = "state_update"
    kind: str = ""
    text: str = ""
    """Shown to the model as an observation when non-empty."""
    data: dict[str, Any] = Field(default_factory=dict)


CONTINUED = "continued"
"""The `kind` of the runner note a run continuing another (`continue_from`) sends first: the
conversation before it is the earlier run's, whose call ids this run's runner never saw."""


Event = Annotated[
    Instruction | UserInput | ModelOutput | ToolCall | ToolResult | StateUpdate,
    Field(discriminator="type"),
]
