"""What a tool is to the runner and the model: `ToolSpec`, plain data beyond a description
string. It travels into the workflow (validation is pure, done there) and into the model
request; the handler that runs it lives activity side (`agentloop.tools.contract`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Effect = Literal["read", "write"]

DEFAULT_MAX_RESULT_CHARS = 8_000

READ_ARTIFACT = "read_artifact"
ASK_USER = "ask_user"
BUILTIN_TOOLS = (READ_ARTIFACT, ASK_USER)
"""Tools every run may call without naming them in its `tools`."""
GIVE_UP = "give_up"
"""The built-in tool the model says it cannot finish with: the run stops `blocked` (offered
unless the run's input says `offer_give_up: false`)."""

ROLL_BACK = "roll_back"
"""The built-in tool the model asks, mid-run, to undo the writes it made with: their undos
are offered as when a run ends without delivering, and the run goes on (offered in runs with
a tool that declares an undo; docs/concepts/compensation.md)."""

PROVIDER_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A name every provider takes for a tool: OpenAI's function names and Anthropic's tool names
are both ASCII letters, digits, '_' and '-', OpenAI's at most 64 of them. Matched whole
(`fullmatch`: a `$` would let a trailing newline through)."""


def tool_name_problem(name: object) -> str | None:
    """Why `name` cannot be a tool's name: a provider would refuse the run's first model call
    that offers it. Checked where a tool is declared (`@agentloop.tool`,
    `agentloop.activity_tool`, an MCP server's listing)."""
    if isinstance(name, str) and PROVIDER_TOOL_NAME.fullmatch(name):
        return None
    shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else repr(name[:80]) + "..."
    return f"its name {shown} is not 1-64 letters, digits, '_' or '-', as providers need"


MAX_TIMEOUT_SECONDS = 366 * 86_400.0
"""A tool's timeouts are positive and at most a year: Temporal takes no zero (it means "none")
and workflow code cannot make a `timedelta` of any float."""
DEFAULT_START_TIMEOUT_SECONDS = 300.0
"""Longer than a backlog on a busy queue or a worker's restart should last."""

DELEGATE = "delegate"
"""The tool a run delegates a sub-task with (a child run; see `tools.delegate`)."""


class ToolSpec(BaseModel):
    """Everything the runner and the model need to know about a tool."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str = "1"
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON Schema of the arguments object."""
    effect: Effect = "read"
    required_scopes: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=30.0, gt=0, le=MAX_TIMEOUT_SECONDS)
    max_attempts: int = 3
    """Attempts for a read; a write is never retried blindly and always gets 1."""
    max_calls_per_run: int | None = None
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    needs_approval: bool | str = False
    """True, or the name of a rule in `policies.approval.APPROVAL_RULES` (a pure predicate
    over the arguments and the principal) that says when a human must approve the call."""
    approvers: list[str] = Field(default_factory=list)
    """Who may decide an approval for this tool; empty: any approver."""
    action: str = ""
    """What the call does in the world (default: the tool's name). A rejected action is
    never run later with the same arguments, whichever tool names it."""
    on_reject: Literal["stop", "tell_model"] = "stop"
    """What a rejection does: stop the run `rejected`, or tell the model and go on."""
    has_precondition: bool = False
    """A business check against the system of record runs (as an activity) before the call
    is offered for approval or run; a failure goes back to the model."""
    poll_limit: int | None = None
    """A tool meant to be polled (e.g. a job status) may repeat the same call with the same
    answer this many times before the runner calls it a stall."""
    has_outcome_lookup: bool = False
    """Writes: the system of record can say, by idempotency key, whether the write happened."""
    activity: str | None = None
    """A tool that is an existing Temporal activity of this type, on `task_queue`, served by
    any worker in any SDK language (`agentloop.activity_tool`); None: agentloop's `run_tool`."""
    task_queue: str | None = None
    lookup_activity: str | None = None
    """For an activity tool's writes: the activity type (on the same task queue) that says,
    by idempotency key, whether the write happened."""
    heartbeat_seconds: float | None = None
    """An activity tool that heartbeats: a worker lost mid-call is noticed this fast."""
    start_timeout_seconds: float = Field(
        default=DEFAULT_START_TIMEOUT_SECONDS, gt=0, le=MAX_TIMEOUT_SECONDS
    )
    """An activity tool: how long its call (and its lookup) may wait on `task_queue` for a
    worker to take it. Past it the call fails as never started, which for a write means not
    applied: a queue no worker polls (a typo, a worker not deployed) is told, not waited on
    for ever."""

    compensate: str | None = None
    """For a write: the tool that undoes it (docs/concepts/compensation.md), offered when a
    run ends without delivering. It is called with those of its parameters the original
    call's result (a JSON object) or arguments name, the result's first, and
    `original_idempotency_key` with the original call's key."""
    trusted: bool = False
    """Its output reaches the model as it came, without the provenance envelope that marks
    every other tool's output as data, not instructions (`agentloop.envelope`)."""
    redact: list[str] = Field(default_factory=list)
    """Redactors (`agentloop.redaction.PATTERNS`) its output passes through beside the
    worker's (`AGENTLOOP_REDACT`)."""
    keep_redacted: Literal["approvers", "nobody"] = "approvers"
    """Where the output as it was before redaction goes: an artifact only `approvers` may
    read (none is kept for a tool that names no approver), or nowhere."""

    @model_validator(mode="after")
    def _activity_tools_are_complete(self) -> ToolSpec:
        if self.activity is not None and not self.task_queue:
            raise ValueError(f"tool {self.name}: an activity tool names its task queue")
        if self.activity is not None and self.has_precondition:
            raise ValueError(f"tool {self.name}: an activity tool has no precondition")
        if self.compensate is not None and self.effect != "write":
            raise ValueError(f"tool {self.name}: only a write has something to undo")
        return self

    @property
    def action_name(self) -> str:
        return self.action or self.name


def shared_specs(specs: Iterable[ToolSpec]) -> dict[str, ToolSpec]:
    """`specs` by name, each one the worker's copy of that spec: every run offering the same
    tool holds the same object, not one decoded for it (a tool's schema is most of a cached
    run's own memory). Specs are frozen and only ever read; one equal to another is it."""
    return {spec.name: _shared_spec(spec.model_dump_json()) for spec in specs}


@functools.lru_cache(maxsize=256)
def _shared_spec(text: str) -> ToolSpec:
    return ToolSpec.model_validate_json(text)


def bounded(text: str, limit: int) -> str:
    """Tool output the model sees never exceeds the tool's cap."""
    if len(text) <= limit:
        return text
    marker = f"\n[truncated: showing {limit} of {len(text)} characters]"
    return text[: max(0, limit - len(marker))] + marker


def bounded_record(record: Any, limit: int) -> Any:
    """`record` as a run keeps it: past `limit` characters of JSON, that JSON cut like tool
    output (`bounded`)."""
    text = json.dumps(record, default=str)
    return record if len(text) <= limit else bounded(text, limit)


def record_within(record: Any, limit: int) -> Any:
    """`record` cut on the worker so that the run keeps it as it comes (`bounded_record` finds
    its JSON within `limit`): the cut text's own JSON (quotes, escapes) fits too, and says
    how long the whole record was."""
    text = json.dumps(record, default=str)
    if len(text) <= limit:
        return record
    keep = limit
    while keep > 0:
        cut = bounded(text, keep)
        over = len(json.dumps(cut)) - limit
        if over <= 0:
            return cut
        keep -= over
    return ""


class Outcome(BaseModel):
    """What the system of record says about a write, looked up by idempotency key."""

    state: Literal["applied", "not_applied", "unknown"]
    record: Any = None
    """The write's result as the system of record holds it, when applied."""
