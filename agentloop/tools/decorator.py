"""`@agentloop.tool` and its companions: a team's own tools, approval rules, verifiers and
dependencies, declared in a module of theirs that the worker loads (`agentloop.tools.plugins`).

A tool is an `async def` whose first parameter is the `ToolContext` and whose other parameters
are typed keyword parameters (or one pydantic model): the JSON Schema the model is sent comes
from them, the description from the docstring. Its precondition and outcome lookup take the
same parameters. Nothing here runs inside the workflow: the worker's activities call it.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, Unpack, get_origin, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from agentloop.activity_io import Verdict
from agentloop.contract import CallRecord, Principal, describe_validation_error
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import (
    InvalidArguments,
    OutcomeLookup,
    Precondition,
    Tool,
    ToolContext,
    ToolHandler,
)
from agentloop.tools.options import (
    ToolDefinitionError,
    ToolOptions,
    declared_spec,
    team_redactors,
)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True)
class _Arguments:
    """How a function of the team's takes a call's arguments."""

    model: type[BaseModel]
    as_model: bool
    """The function takes one pydantic model, not keyword parameters."""

    def parse(self, arguments: Mapping[str, Any]) -> BaseModel:
        try:
            return self.model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise InvalidArguments(describe_validation_error(exc)) from None

    def call(
        self, function: Callable[..., Awaitable[Any]], arguments: Mapping[str, Any], ctx: Any
    ) -> Awaitable[Any]:
        parsed = self.parse(arguments)
        if self.as_model:
            return function(ctx, parsed)
        return function(ctx, **{name: getattr(parsed, name) for name in self.model.model_fields})


def _arguments_of(function: Callable[..., Any], what: str) -> _Arguments:
    """The arguments model of `function(ctx, ...)`."""
    name = _qualname(function)
    if not inspect.iscoroutinefunction(function):
        raise ToolDefinitionError(f"{what} {name} must be an `async def`")
    params = list(inspect.signature(function).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ToolDefinitionError(f"{what} {name}: its first parameter must be the ToolContext")
    try:
        hints = get_type_hints(function, include_extras=True)
    except Exception as exc:  # an annotation that does not resolve
        raise ToolDefinitionError(f"{what} {name}: its annotations do not resolve: {exc}") from exc
    rest = params[1:]
    if len(rest) == 1 and _is_model(hints.get(rest[0].name)):
        return _Arguments(model=hints[rest[0].name], as_model=True)
    fields: dict[str, Any] = {}
    for param in rest:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{what} {name}: *{param.name} cannot be described to the model; name each argument"
            )
        if param.name not in hints:
            raise ToolDefinitionError(f"{what} {name}: parameter {param.name!r} has no type")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], default)
    try:
        model = create_model(
            f"{function.__name__}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
    except Exception as exc:
        raise ToolDefinitionError(f"{what} {name}: {exc}") from exc
    return _Arguments(model=model, as_model=False)


def _prose(text: str) -> str:
    """A docstring as the model reads it: each paragraph on one line."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _qualname(function: Callable[..., Any]) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', function)}"


def _schema_of(arguments: _Arguments, name: str) -> dict[str, Any]:
    try:
        return arguments.model.model_json_schema()
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {name}: no JSON Schema for its arguments: {exc}") from exc


def _same_arguments(
    companion: Callable[..., Awaitable[Any]] | None, arguments: _Arguments, what: str, tool: str
) -> _Arguments | None:
    """A precondition or lookup takes the tool's own arguments (or none besides the context)."""
    if companion is None:
        return None
    own = _arguments_of(companion, f"{what} of tool {tool}")
    if own.model.model_fields and set(own.model.model_fields) != set(arguments.model.model_fields):
        raise ToolDefinitionError(
            f"{what} {_qualname(companion)} of tool {tool}: it must take the tool's arguments "
            f"({', '.join(arguments.model.model_fields) or 'none'}), or only the context"
        )
    return own if own.model.model_fields else None


def _adapt(
    function: Callable[..., Awaitable[Any]], own: _Arguments | None, tool_args: _Arguments
) -> Callable[[dict[str, Any], ToolContext[Any]], Awaitable[Any]]:
    async def call(arguments: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        if own is None:
            tool_args.parse(arguments)  # checked all the same
            return await function(ctx)
        return await own.call(function, arguments, ctx)

    return call


@overload
def tool(function: F, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    precondition: Callable[..., Awaitable[None]] | None = None,
    lookup_outcome: Callable[..., Awaitable[Outcome]] | None = None,
    **options: Unpack[ToolOptions],
) -> Callable[[F], Tool]: ...


def tool(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    precondition: Callable[..., Awaitable[None]] | None = None,
    lookup_outcome: Callable[..., Awaitable[Outcome]] | None = None,
    **options: Unpack[ToolOptions],
) -> Tool | Callable[[F], Tool]:
    """Declare a tool: `@tool` or `@tool(effect="write", ...)` on an `async def`.

    Args:
        name: the name the model calls it by (default: the function's name).
        description: what the model is told (default: the docstring).
        effect: `read` or `write` (default `write`: a tool not said to be a read may change
            something). A write gets an idempotency key, one attempt, and an outcome lookup
            when its answer is lost; without `lookup_outcome` an unknown outcome waits for
            an operator (`awaiting_reconciliation`). A read (`effect="read"`) is retried.
        scopes: the principal's scopes the call needs (checked before anything runs).
        needs_approval: True, or the name of an approval rule (`@approval_rule`) that says
            when a human must approve; rules run in the worker, never in the workflow.
        approvers: who may decide (empty: anyone).
        action: what the call does in the world (default: the name): a rejected action
            never runs again in the run, under any tool.
        on_reject: `stop` the run, or `tell_model` and go on.
        timeout_seconds: one attempt's limit (default 30 s).
        max_attempts: a read's attempts (a write always gets one).
        max_calls_per_run: a cap on this tool's calls in one run.
        max_result_chars: what the model is sent of a result; the rest goes to the store as
            an artifact the model pages through.
        poll_limit: a polling tool may repeat the same call this often before it is a stall.
        version: recorded with every call (the audit and the call ledger).
        compensate: a write's undo, the name of another tool: offered (under the run's
            `compensate` policy) when the run ends without delivering; it is called with the
            parameters this call's result or arguments name, and `original_idempotency_key`
            (docs/concepts/compensation.md).
        trusted: its output reaches the model as it came, not in the envelope that marks
            tool output as data, not instructions (only for output no outsider writes).
        redact: redactors its output passes through beside the worker's `AGENTLOOP_REDACT`:
            pattern names (`card_number`, `iban`, `api_key`, `email`) or the team's own
            functions, `def mask(text: str) -> str` returning the text with what it hides
            replaced by `agentloop.redaction.placeholder(kind)` (run in the worker; one that
            raises withholds the whole output).
        keep_redacted: `approvers` (the output as it was is kept for the tool's approvers
            only) or `nobody` (not kept at all).
        precondition: `async def check(ctx, <the tool's arguments>)` raising
            `BusinessRefusal` or `PermissionDenied` when the call must not go ahead: run
            before approval or execution, against the system of record.
        lookup_outcome: `async def lookup(ctx, <the tool's arguments>) -> Outcome`: what the
            system of record holds under `ctx.idempotency_key` (writes).
    """

    def declare(function: F) -> Tool:
        tool_name = name or function.__name__
        arguments = _arguments_of(function, "tool")
        spec = declared_spec(
            "tool",
            tool_name,
            named=f"tool {_qualname(function)}",
            description=_prose(description or function.__doc__ or ""),
            parameters=_schema_of(arguments, tool_name),
            has_outcome_lookup=lookup_outcome is not None,
            options=options,
            has_precondition=precondition is not None,
        )
        check = _same_arguments(precondition, arguments, "precondition", tool_name)
        lookup = _same_arguments(lookup_outcome, arguments, "lookup_outcome", tool_name)
        handler: ToolHandler = _adapt(function, arguments, arguments)
        return Tool(
            spec=spec,
            handler=handler,
            precondition=(
                _adapt(precondition, check, arguments) if precondition is not None else None
            ),
            lookup_outcome=(
                _adapt(lookup_outcome, lookup, arguments) if lookup_outcome is not None else None
            ),
            redactors=team_redactors(options),
            function=function,
        )

    return declare(function) if function is not None else declare


# --- approval rules, verifiers, dependencies ------------------------------------------------

RuleFunction = Callable[[Mapping[str, Any], Principal], "bool | Awaitable[bool]"]


@dataclass(frozen=True)
class ApprovalRule:
    """A named predicate over a call's arguments and the principal: True when a human must
    approve. Named by a tool's `needs_approval`; evaluated in the worker before the call is
    offered for approval, and the verdict recorded in history (replay never runs it)."""

    name: str
    function: RuleFunction

    def __call__(self, arguments: Mapping[str, Any], principal: Principal) -> Any:
        """The rule as written (sync or async), for the team's own tests."""
        return self.function(arguments, principal)

    async def evaluate(self, arguments: Mapping[str, Any], principal: Principal) -> bool:
        """The verdict, whichever way the rule was written (what the worker records)."""
        verdict = self.function(arguments, principal)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)


def approval_rule(name: str) -> Callable[[RuleFunction], ApprovalRule]:
    """Declare an approval rule: `@approval_rule("over_limit")` on
    `def rule(arguments, principal) -> bool` (or an `async def`)."""

    def declare(function: RuleFunction) -> ApprovalRule:
        if not name:
            raise ToolDefinitionError(f"approval rule {_qualname(function)} needs a name")
        return ApprovalRule(name, function)

    return declare


async def _no_lookup(call: CallRecord) -> Outcome:
    return Outcome(state="unknown", record="no lookup was given to this context")


@dataclass(frozen=True)
class VerifyContext(ToolContext[Any]):
    """What a verifier knows: the run, its final answer, and its call ledger (the evidence
    to check against the systems of record). `lookup` asks a write's own outcome lookup."""

    answer: str = ""
    calls: Sequence[CallRecord] = ()
    task_state: Mapping[str, Any] = field(default_factory=dict)
    """The run's task state as its tools set it (`agentloop.WithState`)."""
    lookup: Callable[[CallRecord], Awaitable[Outcome]] = field(default=_no_lookup)
    """A write's outcome at its system of record, through its tool's own lookup."""


VerifierFunction = Callable[[VerifyContext], "Awaitable[Verdict | bool]"]


@dataclass(frozen=True)
class Verifier:
    """A named completion check (`AgentRunInput.completion_check`): a final answer is only a
    candidate until it agrees. Runs in the worker; its verdict is recorded in history."""

    name: str
    function: VerifierFunction

    async def __call__(self, ctx: VerifyContext) -> Verdict | bool:
        """The verifier as written, for the team's own tests."""
        return await self.function(ctx)

    async def evaluate(self, ctx: VerifyContext) -> Verdict:
        """Its answer as a `Verdict` (a bare bool gets a stock reason). Anything else fails
        the check, saying what came back: a dict, a string or an un-awaited coroutine would
        be truthy, and a check that passes on a slip is no check."""
        verdict: object = await self.function(ctx)
        if isinstance(verdict, Verdict):
            return verdict
        if isinstance(verdict, bool):
            return Verdict(passed=verdict, reason="" if verdict else f"{self.name} says no")
        if inspect.iscoroutine(verdict):
            verdict.close()  # never run: closed, so it is not reported as never awaited
            why = "a coroutine (an `await` is missing)"
        else:
            why = f"a {type(verdict).__name__}"
        return Verdict(
            passed=False,
            reason=f"verifier {self.name} returned {why}, not a Verdict or a bool: it fails",
        )


def verifier(name: str) -> Callable[[VerifierFunction], Verifier]:
    """Declare a verifier: `@verifier("refund_issued")` on
    `async def check(ctx: VerifyContext) -> Verdict` (or a bool)."""

    def declare(function: VerifierFunction) -> Verifier:
        if not inspect.iscoroutinefunction(function):
            raise ToolDefinitionError(f"verifier {_qualname(function)} must be an `async def`")
        if not name:
            raise ToolDefinitionError(f"verifier {_qualname(function)} needs a name")
        return Verifier(name, function)

    return declare


OpenFunction = Callable[..., "AbstractAsyncContextManager[Any] | AsyncIterator[Any]"]


@dataclass(frozen=True)
class Dependencies:
    """How a module's dependencies are opened and closed: once per worker, around its life.
    Its tools, rules and verifiers get the opened object as `ctx.deps`."""

    function: OpenFunction
    takes_settings: bool

    def __call__(self, settings: Any = None) -> AbstractAsyncContextManager[Any]:
        """`async with my_deps(settings) as deps:`, for the team's own tests."""
        return self.open(settings)

    def open(self, settings: Any) -> AbstractAsyncContextManager[Any]:
        args = (settings,) if self.takes_settings else ()
        if inspect.isasyncgenfunction(self.function):
            return asynccontextmanager(self.function)(*args)
        opened = self.function(*args)
        if not isinstance(opened, AbstractAsyncContextManager):
            raise ToolDefinitionError(
                f"dependencies {_qualname(self.function)} returned {type(opened).__name__}, "
                "not an async context manager"
            )
        return opened


def dependencies(function: OpenFunction) -> Dependencies:
    """Declare a module's dependencies: `@dependencies` on an async generator (or a function
    returning an async context manager) that yields the object its tools get as `ctx.deps`.
    It may take one parameter: the worker's settings (`agentloop.Settings`)."""
    problem = _not_opening(function)
    if problem:
        raise ToolDefinitionError(
            f"dependencies {_qualname(function)} {problem}: @agentloop.dependencies takes an "
            "async generator (`async def` that yields what the tools get as ctx.deps) or a "
            "function returning an async context manager"
        )
    params = list(inspect.signature(function).parameters)
    if len(params) > 1:
        raise ToolDefinitionError(
            f"dependencies {_qualname(function)} takes at most one parameter (the settings)"
        )
    return Dependencies(function, takes_settings=bool(params))


def _not_opening(function: Any) -> str | None:
    """Why `function` can be seen, without calling it, to open no dependencies (None: it may,
    or it cannot be told before it is called)."""
    if not callable(function):
        return f"is a {type(function).__name__}, not a function"
    if inspect.isasyncgenfunction(function):
        return None
    if inspect.isgeneratorfunction(function):
        return "is a generator, not an async one (`def` where `async def` is needed)"
    if inspect.iscoroutinefunction(function):
        return "is an `async def` that returns, where it should yield"
    if inspect.isasyncgenfunction(inspect.unwrap(function)):
        return None  # @contextlib.asynccontextmanager
    try:
        returns = get_type_hints(function).get("return")
    except Exception:  # an annotation that does not resolve here: it is told when it opens
        return None
    kind = get_origin(returns) or returns
    if returns is None or not isinstance(kind, type) or kind is Any:
        return None
    if issubclass(kind, AbstractAsyncContextManager) or hasattr(kind, "__aenter__"):
        return None
    return f"returns {getattr(kind, '__name__', kind)}, not an async context manager"


__all__ = [
    "ApprovalRule",
    "Dependencies",
    "OutcomeLookup",
    "Precondition",
    "ToolDefinitionError",
    "Verifier",
    "VerifyContext",
    "approval_rule",
    "dependencies",
    "tool",
    "verifier",
]
