"""Activity inputs and outputs: made of canonical events, so the workflow never sees SDK types."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agentloop.contract import CallRecord, ModelSettings, Provider
from agentloop.events import Event, ModelOutput
from agentloop.tool_spec import ToolSpec

MODEL_CALL = "call_model"
"""The model call with the tool specs inline: a run's first one (and every one of a run that
started before specs went by reference)."""
MODEL_CALL_BY_REF = "call_model_by_ref"
"""The model call naming the specs by reference. Its own activity type, so that a worker still
on older code, which would ignore the reference and call the model without tools, never takes
it: it does not have the type."""
MODEL_CALLS = (MODEL_CALL, MODEL_CALL_BY_REF)


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


class CallModelResult(BaseModel):
    head: str
    """The transcript head after `new_events` and `output` were appended."""
    output: ModelOutput
    cost_usd: float = 0.0
    """What the call cost by the worker's price table (0 for a model it does not know)."""
    request_chars: int = 0
    """The size of the events sent (as `context.fit` measures them), for the token ratio."""
    tools_ref: str | None = None
    """Where the tool specs of the call are stored: later calls send this, not the specs."""


class RunToolInput(BaseModel):
    workflow_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str = ""


class PreconditionResult(BaseModel):
    problem: str | None = None
    """Why the call must not go ahead; None when the precondition holds."""


class VerifyInput(BaseModel):
    check: str
    workflow_id: str
    answer: str = ""
    calls: list[CallRecord] = Field(default_factory=list)
    """The call ledger: the evidence a verifier checks against the systems of record."""


class Verdict(BaseModel):
    passed: bool
    reason: str = ""


class DescribeToolsInput(BaseModel):
    names: list[str] = Field(default_factory=list)
