"""Pieces every provider adapter shares: tool-call arguments, runner notes, SDK errors.

Pure apart from `map_sdk_errors`, which only translates exceptions. It imports neither SDK:
each adapter names its own SDK's exceptions (`SdkErrors`), so a worker that talks to one
provider never pays for importing the other (anthropic alone takes 2 s).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, assert_never

import httpx2
from pydantic_core import PydanticSerializationError

from agentloop.adapters.base import ProviderError, UnsupportedEventError
from agentloop.contract import ModelSettings
from agentloop.digests import args_digest
from agentloop.envelope import enveloped
from agentloop.events import (
    CONTINUED,
    Event,
    Instruction,
    ModelOutput,
    StateUpdate,
    StopKind,
    ToolCall,
    ToolResult,
    UserInput,
)
from agentloop.input_limits import MAX_NAME_CHARS
from agentloop.policies.bounds import (
    MAX_ARGUMENT_CHARS,
    MAX_OUTPUT_ARGUMENT_BYTES,
    NOT_TEXT,
    OutOfBounds,
    as_text,
    clipped,
    is_text,
    is_text_value,
    loads_bounded,
)
from agentloop.policies.errors import classify_connection_error, classify_http_error

if TYPE_CHECKING:
    import anthropic
    import openai

RUNNER_NOTE_PREFIX = "[agentloop] "
"""Marks text the runner (not the user) put in front of the model."""

_MAX_ERROR_MESSAGE_CHARS = 500


class ArgumentsError(ValueError):
    """Tool-call arguments that are not one JSON object."""


def runner_note(text: str) -> str:
    return RUNNER_NOTE_PREFIX + text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_arguments(raw: str) -> dict[str, Any]:
    """The arguments string as a JSON object; an empty string is `{}`.

    Raises `ArgumentsError` saying what is wrong (too long or too deeply nested to parse,
    invalid JSON, NaN/Infinity, not an object)."""
    if not raw.strip():
        return {}
    try:
        value = loads_bounded(raw, max_chars=MAX_ARGUMENT_CHARS, parse_constant=_reject_constant)
    except OutOfBounds as err:
        raise ArgumentsError(f"arguments not parsed: {err}") from err
    except ValueError as err:
        raise ArgumentsError(f"arguments are not valid JSON ({err})") from err
    if not isinstance(value, dict):
        raise ArgumentsError(f"arguments are a JSON {type(value).__name__}, not an object")
    if "\\u" in raw and not is_text_value(value):
        raise ArgumentsError(f"arguments: {NOT_TEXT}")
    return value


def text_safe(output: ModelOutput) -> ModelOutput:
    """`output`, with every string in it Unicode text: a provider's JSON may carry lone
    surrogate escapes in the answer or its raw items, which would make the output impossible
    to record (each becomes `?`)."""
    try:
        output.model_dump_json()
    except PydanticSerializationError:
        return ModelOutput.model_validate(_replace_surrogates(output.model_dump()))
    return output


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return as_text(value)
    if isinstance(value, dict):
        return {as_text(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    return value


MAX_CALLS_PER_OUTPUT = 128
"""Calls one model output may propose: a batch's calls start in one workflow task completion,
which Temporal caps at 4 MiB (each carries its arguments and the run's principal)."""
MAX_LISTED_PROBLEMS = 20
"""Broken calls of one output named one by one in its stop detail; the rest are counted."""


def make_tool_call(call_id: str, name: str, raw_arguments: str) -> tuple[ToolCall, str]:
    """A `ToolCall` with its digest, plus the reason it must not run ("" when it may).

    A call whose arguments do not parse is still returned (with empty `arguments` and the
    raw string verbatim) so the record shows what the model sent."""
    problem = ""
    if len(call_id) > MAX_NAME_CHARS or len(name) > MAX_NAME_CHARS:
        # Kept cut: an id or name the model may send at any length is recorded, copied into
        # refusals and results, and would otherwise outgrow what a run can write.
        call_id, name = clipped(call_id, MAX_NAME_CHARS), clipped(name, MAX_NAME_CHARS)
        problem = f"the call's id or tool name is over {MAX_NAME_CHARS} characters"
    if not is_text(call_id + name + raw_arguments):
        call_id, name, raw_arguments = as_text(call_id), as_text(name), as_text(raw_arguments)
        problem = problem or f"the call: {NOT_TEXT}"
    try:
        arguments = parse_arguments(raw_arguments)
    except ArgumentsError as err:
        arguments, problem = {}, problem or str(err)
    if not call_id:
        problem = "call has no id"
    elif not name:
        problem = "call has no tool name"
    call = ToolCall(
        call_id=call_id,
        name=name,
        arguments=arguments,
        raw_arguments=raw_arguments,
        args_digest=args_digest(name, arguments),
    )
    return call, problem


def make_tool_calls(raw_calls: Iterable[tuple[str, str, str]]) -> tuple[list[ToolCall], list[str]]:
    """`(call_id, name, raw arguments)` triples as `ToolCall`s, plus one problem line per call
    that must not run (`call <id or #n>: ...`)."""
    calls: list[ToolCall] = []
    problems: list[str] = []
    size = 0
    for index, (call_id, name, raw_arguments) in enumerate(raw_calls):
        call, problem = make_tool_call(call_id, name, raw_arguments)
        calls.append(call)
        # Ids and names count with the arguments: they bound how many calls one output holds.
        size += len(raw_arguments.encode("utf-8", "replace")) + len(call.call_id) + len(call.name)
        if not problem and size > MAX_OUTPUT_ARGUMENT_BYTES:
            problem = f"the output's tool calls pass {MAX_OUTPUT_ARGUMENT_BYTES} bytes in all"
        if not problem and index >= MAX_CALLS_PER_OUTPUT:
            problem = f"the output proposes more than {MAX_CALLS_PER_OUTPUT} calls"
        if problem:
            problems.append(f"call {call.call_id or f'#{index}'}: {problem}")
    if len(problems) > MAX_LISTED_PROBLEMS:
        more = len(problems) - MAX_LISTED_PROBLEMS
        problems = [*problems[:MAX_LISTED_PROBLEMS], f"and {more} more calls that cannot run"]
    return calls, problems


def demote_broken_calls(stop: StopKind, detail: str, problems: list[str]) -> tuple[StopKind, str]:
    """A tool-call output with any broken call is `truncated`: none of its calls runs."""
    if problems and stop in ("tool_calls", "truncated"):
        return "truncated", "; ".join([detail, *problems])
    return stop, detail


class StreamAssembler(Protocol):
    def feed(self, event: dict[str, Any]) -> None: ...
    def finish(self) -> ModelOutput: ...


def ignore_text(_text: str) -> None:
    """The text sink of a call nobody watches."""


@dataclass(frozen=True)
class ToolTurn:
    """A model output that asked for tools, with one result per call, in the model's order."""

    output: ModelOutput
    results: list[ToolResult]


Segment = Instruction | UserInput | StateUpdate | ModelOutput | ToolTurn
"""A unit of conversation every protocol can render; `ModelOutput` here asked for no tools."""


def group_turns(events: list[Event]) -> list[Segment]:
    """The transcript as segments, every protocol's pairing rule checked once.

    Results are matched to their calls by `call_id`, never by position. Whatever else
    arrives while an assistant turn still waits for results (a runner note, a user message)
    is placed after that turn, which every provider's ordering rules accept. A result that
    answers no open call, a duplicate, a call left without a result, and a standalone
    `ToolCall` raise `UnsupportedEventError`: an invalid conversation is never sent.

    An output whose call ids are not unique in its run (one repeated, or reused from an
    earlier turn) was refused by the runner: none of its calls ran, and the run stopped on it.
    It is sent without its calls, and what a continuing run says of each (its `not_run`
    result) as a runner note naming the call: one id with two results, or two calls, is a
    conversation no provider takes. The stored transcript keeps both as they were."""
    segments: list[Segment] = []
    held: list[Segment] = []
    open_turn: ModelOutput | None = None
    results: dict[str, ToolResult] = {}
    run_ids: set[str] = set()  # the call ids offered since the run began
    refused: set[str] = set()  # the call ids of the last output, if the runner refused it

    def waiting() -> list[str]:
        assert open_turn is not None
        return [c.call_id for c in open_turn.tool_calls if c.call_id not in results]

    for event in events:
        match event:
            case ToolResult() if event.call_id in refused:
                segments.append(_not_sent_note(event))
            case ToolResult():
                if event.call_id in results:
                    raise UnsupportedEventError(
                        f"duplicate tool result for call_id {event.call_id!r}"
                    )
                if open_turn is None or event.call_id not in waiting():
                    raise UnsupportedEventError(
                        f"tool result for call_id {event.call_id!r} answers no call of the "
                        "assistant turn before it"
                    )
                results[event.call_id] = event
                if not waiting():
                    calls = open_turn.tool_calls
                    segments.append(ToolTurn(open_turn, [results[c.call_id] for c in calls]))
                    segments.extend(held)
                    open_turn, held = None, []
            case ModelOutput():
                if open_turn is not None:
                    raise UnsupportedEventError(
                        f"no tool result for call_id {', '.join(map(repr, waiting()))} "
                        "before the next model output"
                    )
                ids = [call.call_id for call in event.tool_calls] if event.offers_calls else []
                refused = set()
                if len(set(ids)) < len(ids) or not run_ids.isdisjoint(ids):
                    refused = set(ids)
                    segments.append(event.model_copy(update={"tool_calls": []}))
                elif ids:
                    open_turn = event
                    run_ids.update(ids)
                else:
                    segments.append(event)
            case ToolCall():
                raise UnsupportedEventError(
                    f"standalone ToolCall {event.call_id!r}: tool calls travel inside a ModelOutput"
                )
            case Instruction() | UserInput() | StateUpdate():
                if isinstance(event, StateUpdate) and event.kind == CONTINUED:
                    run_ids = set()
                (held if open_turn is not None else segments).append(event)
            case _:
                assert_never(event)
    if open_turn is not None:
        raise UnsupportedEventError(
            f"no tool result for call_id {', '.join(map(repr, waiting()))} "
            "at the end of the transcript"
        )
    return segments


def _not_sent_note(result: ToolResult) -> StateUpdate:
    return StateUpdate(
        kind="call_not_sent",
        text=f"Your call {result.call_id} ({result.tool}) never ran and is left out of this "
        f"conversation: its call id was not unique in the run. Its result: {enveloped(result)}",
    )


@dataclass(frozen=True)
class SdkErrors:
    """One SDK's exception families. Both SDKs are generated alike (and built on httpx2), so
    the classes have the same names in each, all but the base."""

    validation: type[openai.APIResponseValidationError | anthropic.APIResponseValidationError]
    status: type[openai.APIStatusError | anthropic.APIStatusError]
    connection: tuple[type[Exception], ...]
    api: type[openai.APIError | anthropic.APIError]
    base: type[Exception]

    @classmethod
    def of(cls, sdk: ModuleType, base: type[Exception]) -> SdkErrors:
        return cls(
            validation=sdk.APIResponseValidationError,
            status=sdk.APIStatusError,
            connection=(sdk.APIConnectionError, httpx2.TransportError),
            api=sdk.APIError,
            base=base,
        )


# An error *event* inside a 200 stream has no HTTP status of its own: infer one from its type.
_ERROR_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
}


def _bounded(message: str) -> str:
    return message[:_MAX_ERROR_MESSAGE_CHARS]


def _error_event_status(body: object) -> int:
    """Status implied by an error event's body; unknown kinds count as a server failure."""
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]  # anthropic: {"type": "error", "error": {"type": ...}}
    kind = body.get("type") if isinstance(body, Mapping) else None
    return _ERROR_TYPE_STATUS.get(kind, 500) if isinstance(kind, str) else 500


def _classified(
    message: str, status: int | None, inferred: int, headers: Mapping[str, str]
) -> ProviderError:
    advice = classify_http_error(inferred, headers, message)
    request_id = _request_id(headers)
    return ProviderError(
        _bounded(message) + _naming(request_id),
        error_class=advice.error_class,
        retryable=advice.retryable,
        status_code=status,
        retry_after_seconds=advice.retry_after_seconds,
        request_id=request_id,
    )


def _request_id(headers: Mapping[str, str]) -> str | None:
    """OpenAI answers with `x-request-id`, Anthropic with `request-id`."""
    return headers.get("x-request-id") or headers.get("request-id") or None


def _naming(request_id: str | None) -> str:
    return f" (request {request_id})" if request_id else ""


@contextmanager
def map_sdk_errors(sdk: SdkErrors) -> Iterator[None]:
    """Re-raise any error of the SDK (or of its httpx2 transport) as `ProviderError`.

    HTTP errors are classified by `policies.errors.classify_http_error` (status, headers,
    message + error code); connection failures and timeouts, including a connection dropped
    mid-stream, by `classify_connection_error`. An error event inside a streamed 200 response
    is classified by its error type (`status_code` stays None). A body the SDK could not
    validate is a non-retryable `protocol` error; anything else from the SDK is `internal`."""
    try:
        yield
    except sdk.validation as err:
        # The raw response is not kept anywhere else: its request id is the reference to it.
        request_id = _request_id(err.response.headers)
        raise ProviderError(
            _bounded(f"invalid provider response: {err.message}") + _naming(request_id),
            error_class="protocol",
            retryable=False,
            status_code=err.status_code,
            request_id=request_id,
        ) from err
    except sdk.status as err:
        message = f"{err.message} {getattr(err, 'code', None) or ''}".strip()
        headers = err.response.headers
        if err.status_code >= 400:
            raise _classified(message, err.status_code, err.status_code, headers) from err
        inferred = _error_event_status(err.body)
        raise _classified(f"error event in stream: {message}", None, inferred, headers) from err
    except sdk.connection as err:
        advice = classify_connection_error()
        raise ProviderError(
            _bounded(f"connection failed: {type(err).__name__}: {err}"),
            error_class=advice.error_class,
            retryable=advice.retryable,
            retry_after_seconds=advice.retry_after_seconds,
        ) from err
    except sdk.api as err:
        message = f"error event in stream: {err.message} {getattr(err, 'code', None) or ''}"
        message = message.strip()
        raise _classified(message, None, _error_event_status(err.body), {}) from err
    except sdk.base as err:
        raise ProviderError(
            _bounded(f"{type(err).__name__}: {err}"), error_class="internal", retryable=False
        ) from err


def model_parameters(
    settings: ModelSettings,
    *,
    max_tokens: str,
    stop: str | None = None,
    effort: Callable[[str], tuple[str, Any]] | None = None,
    sampling: bool = True,
) -> dict[str, Any]:
    """The run's model parameters under the provider's names: `max_tokens` is its name for
    the output-token limit, `stop` for stop sequences, `effort` spells the reasoning effort
    (None: it takes no such field; the run's input was checked for that at start), and
    `sampling` says whether it takes `temperature` and `top_p`."""
    fields: dict[str, Any] = {}
    if settings.max_output_tokens is not None:
        fields[max_tokens] = settings.max_output_tokens
    if sampling and settings.temperature is not None:
        fields["temperature"] = settings.temperature
    if sampling and settings.top_p is not None:
        fields["top_p"] = settings.top_p
    if settings.stop and stop is not None:
        fields[stop] = list(settings.stop)
    if settings.reasoning_effort is not None and effort is not None:
        key, value = effort(settings.reasoning_effort)
        fields[key] = value
    return fields
