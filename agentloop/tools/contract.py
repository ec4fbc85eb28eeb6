"""The tool contract, activity side: a `ToolSpec` (`agentloop.tool_spec`) plus the handler,
precondition and outcome lookup only activities ever call, what they are told about the call
(`ToolContext`), and the errors they raise to say what happened.

Each error class has its recovery (docs/concepts/design.md §3): `InvalidArguments` goes back to
the model to fix its call; `BusinessRefusal` is the system of record saying no (told to the model);
`PermissionDenied` is an object-level refusal (this ticket is another tenant's); a
`TransientError` read is retried by Temporal; a write that raised anything but a refusal is
never sent again blindly: its outcome is looked up by its key first (`OutcomeUnknown` says so
outright).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from agentloop.contract import Principal
from agentloop.store import Store, load_artifact_text
from agentloop.tool_spec import Outcome, ToolSpec

DepsT = TypeVar("DepsT")


class ToolError(Exception):
    """A failure the tool understands: reported to the model as a result, not raised further.

    `error_class` says which recovery applies; each subclass below is one class. A
    `ToolError(message, error_class=...)` names a class directly."""

    error_class_default: ClassVar[str] = "business"
    retryable_default: ClassVar[bool] = False

    def __init__(
        self, message: str, *, error_class: str | None = None, retryable: bool | None = None
    ) -> None:
        super().__init__(message)
        self.error_class = error_class or self.error_class_default
        self.retryable = self.retryable_default if retryable is None else retryable


class InvalidArguments(ToolError):
    """The arguments are wrong in a way the schema could not say: the model fixes its call."""

    error_class_default = "invalid_arguments"


class BusinessRefusal(ToolError):
    """The system of record says no (full, not eligible, already done): the model is told."""

    error_class_default = "business"


class PermissionDenied(ToolError):
    """This principal may not act on this object (another tenant's ticket): never run, and
    the model is told. Authorization by scope is checked before any tool runs; this is the
    object-level check only the tool's own system can make."""

    error_class_default = "permission"


class TransientError(ToolError):
    """Worth another try: Temporal retries a read (its `max_attempts`). A write is never
    retried blindly: its outcome is looked up by its key first, and only a write the system
    of record does not have is sent again, with the same key."""

    error_class_default = "transient"
    retryable_default = True


class OutcomeUnknown(ToolError):
    """A write was sent but no usable answer came back: it may or may not have been applied.

    Never retried blindly: sending it again could apply it twice. The runner asks the tool's
    `lookup_outcome` with the same idempotency key instead."""

    error_class_default = "outcome_unknown"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class InputNeeded(Exception):
    """Raised by a handler whose system needs a person's answer before the call can happen
    (an MCP server's `input_required`): nothing was done. The run asks `question`
    (`awaiting_input`); the person's `message` answers it, and the call runs again (a write
    under the same idempotency key) with `ToolContext.reply` holding the answer and `pending`.

    Not a `ToolError`: it is no failure. `pending` is JSON of any size the handler needs back
    (kept in the store; the workflow carries its reference). A call asks at most
    `MAX_INPUT_ROUNDS` times; then what it asked goes to the model as a refusal."""

    def __init__(self, question: str, pending: Mapping[str, Any]) -> None:
        super().__init__(question)
        self.question = question
        self.pending = dict(pending)


@dataclass(frozen=True)
class Reply:
    """A person's answer to what the call's handler asked (`InputNeeded`) the last time."""

    text: str
    sender: str
    pending: dict[str, Any]
    """As the handler gave it with its question."""


class Artifacts:
    """The run's artifact store, as a tool sees it: a large output kept whole, the model sent
    a reference it pages through with the built-in `read_artifact`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def put(self, data: bytes | str, media_type: str = "text/plain") -> str:
        """Store `data`; returns its reference (`sha256:...`)."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        return await self._store.put_artifact(raw, media_type)

    async def read_text(self, ref: str, offset: int, limit: int) -> tuple[str, int]:
        """`limit` characters of the text artifact `ref` from `offset`, and its total size."""
        return await load_artifact_text(self._store, ref, offset, limit)


@dataclass(frozen=True)
class ToolContext(Generic[DepsT]):
    """What a handler, a precondition and an outcome lookup know about the call besides its
    arguments. The same context reaches all three."""

    call_id: str
    """The model's id of this call: every result is recorded under it."""
    idempotency_key: str
    """For a write: the key to send to the system of record (unique per run chain and call),
    and the key `lookup_outcome` asks by. Empty for a read."""
    workflow_id: str
    run_id: str
    """Temporal's run id of the run making the call."""
    attempt: int
    """Temporal's attempt of this activity (1 for the first)."""
    principal: Principal
    """Who the run acts for: subject, tenant, scopes. Object-level checks live in the
    team's own code ("this ticket belongs to this tenant") and use this."""
    deps: DepsT
    """The dependencies of the module that declared the tool (see `agentloop.dependencies`),
    opened once per worker; None when the module declares none."""
    artifacts: Artifacts
    tool: str = ""
    """The tool's name."""
    reply: Reply | None = None
    """Set when this call's handler asked a person (`InputNeeded`) the time it last ran."""


@dataclass(frozen=True)
class WithState:
    """What a handler returns to update the run's task state along with its output: the run
    merges `state` into its `task_state` (each key replaces that key, `None` removes it; see
    `policies.task_state`), shows it in `status` and the result, hands it to verifiers and
    watches it for progress. The model sees `output` only."""

    output: Any
    state: Mapping[str, Any]


TeamRedactor = Callable[[str], str]
"""A team's redactor: a tool's output in, the same with what it hides replaced out (by
`[redacted:KIND]`, `agentloop.redaction.placeholder`). Runs in the worker, never in the
workflow; its name is the kind the ledger counts when it hides nothing else."""
ToolHandler = Callable[[dict[str, Any], ToolContext[Any]], Awaitable[Any]]
"""How the activities call a tool: its arguments (checked against its schema) and context."""
Precondition = Callable[[dict[str, Any], ToolContext[Any]], Awaitable[None]]
"""Raises `BusinessRefusal` (or `PermissionDenied`) when the call must not go ahead."""
OutcomeLookup = Callable[[dict[str, Any], ToolContext[Any]], Awaitable[Outcome]]
"""What the system of record holds under `ctx.idempotency_key` for this call's arguments."""


@dataclass(frozen=True)
class Tool:
    """A tool a worker can run: its spec, and the code behind it."""

    spec: ToolSpec
    handler: ToolHandler
    precondition: Precondition | None = None
    lookup_outcome: OutcomeLookup | None = None
    redactors: tuple[TeamRedactor, ...] = ()
    """The team's own redactors its output passes through in the worker, after the patterns
    its spec names (`agentloop.redaction`)."""
    function: Callable[..., Awaitable[Any]] | None = field(default=None, compare=False)
    """The decorated function, as written (`Tool` is callable like it, for the team's own
    unit tests)."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.function is None:
            raise TypeError(f"tool {self.spec.name} has no function to call directly")
        return await self.function(*args, **kwargs)
