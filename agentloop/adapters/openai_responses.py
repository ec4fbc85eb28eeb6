"""OpenAI Responses API <-> the canonical event model.

`build_request`, `parse_response` and `ResponsesStreamAssembler` are pure translations;
`OpenAIResponsesAdapter.complete` adds the one SDK call. Each request carries the whole
conversation with `store: False`, never `previous_response_id`: the provider's output items
(reasoning items with their `encrypted_content`) are echoed back as input. Streams are read
from `create(stream=True)`, never from the SDK's `.stream()` helper.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

from openai import AsyncOpenAI
from openai.types.responses import Response

from agentloop.adapters._openai import OpenAIEndpoint, complete_openai, count_openai_input
from agentloop.adapters._shared import (
    Segment,
    ToolTurn,
    _bounded,
    demote_broken_calls,
    group_turns,
    ignore_text,
    make_tool_calls,
    model_parameters,
    runner_note,
)
from agentloop.adapters.base import ModelRequest, ProviderError, TextSink
from agentloop.digests import canonical_json
from agentloop.envelope import ENVELOPE_NOTE, enveloped, needs_note
from agentloop.events import (
    Instruction,
    ModelOutput,
    ProviderRef,
    StateUpdate,
    StopKind,
    ToolCall,
    Usage,
    UserInput,
)
from agentloop.policies.errors import ErrorAdvice, classify_http_error
from agentloop.tool_spec import ToolSpec

PROVIDER = "openai-responses"
API = "responses"

Item = dict[str, Any]


# --------------------------------------------------------------------------- request


REASONING_MODEL_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def reasons(model: str) -> bool:
    """Whether `model` returns reasoning items. Only those models accept
    `include: ["reasoning.encrypted_content"]`; the others refuse it with a 400."""
    return model.startswith(REASONING_MODEL_PREFIXES) and "chat" not in model


def build_request(request: ModelRequest) -> dict[str, Any]:
    """The request body for `/responses`, on the wire's terms (sent as built). Nothing is
    stored at the provider (`store: False`), so reasoning items travel back encrypted. It shares
    the transcript's own items (received output items) rather than copies, so a long
    conversation is not copied on every call: nothing may change it in place."""
    settings = request.settings
    segments = group_turns(request.events)
    kwargs: dict[str, Any] = {
        "model": request.model,
        "input": [item for segment in segments for item in _map_segment(segment)],
        "stream": settings.stream,
        "store": False,
    }
    if reasons(request.model):
        kwargs["include"] = ["reasoning.encrypted_content"]
    instructions = [s.text for s in segments if isinstance(s, Instruction) and s.text]
    if needs_note(request.events, bool(request.tools)):
        instructions.append(ENVELOPE_NOTE)
    if instructions:
        kwargs["instructions"] = "\n\n".join(instructions)
    if request.tools:
        kwargs["tools"] = [_map_tool_spec(spec) for spec in request.tools]
    kwargs |= model_parameters(
        settings,
        max_tokens="max_output_tokens",
        effort=lambda effort: ("reasoning", {"effort": effort}),
    )
    return {**settings.extra, **kwargs}


def _map_tool_spec(spec: ToolSpec) -> Item:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "strict": False,
    }


def _map_segment(segment: Segment) -> list[Item]:
    match segment:
        case Instruction():
            return []  # sent as the top-level `instructions`
        case UserInput(text=text):
            return [_user_message(text)]
        case StateUpdate(text=text):
            return [_user_message(runner_note(text))] if text else []
        case ModelOutput():
            return _output_items(segment)
        case ToolTurn(output=output, results=results):
            # This API's rule: one `function_call_output` per call, keyed by `call_id`.
            return _output_items(output) + [
                {"type": "function_call_output", "call_id": r.call_id, "output": enveloped(r)}
                for r in results
            ]
        case _:
            assert_never(segment)


def _user_message(text: str) -> Item:
    return {"type": "message", "role": "user", "content": text}


def _output_items(output: ModelOutput) -> list[Item]:
    """The items as the provider sent them when we have them, else rebuilt. Calls of an output
    that did not stop for `tool_calls` get no results, so are not sent (the API refuses a
    `function_call` without its output)."""
    offered = {call.call_id for call in output.tool_calls} if output.offers_calls else set()
    ref = output.provider_ref
    if ref.provider == PROVIDER and ref.raw_items:
        echoed = _echo(ref.raw_items, offered)
        if {i.get("call_id") for i in echoed if i.get("type") == "function_call"} == offered:
            return echoed
    return _rebuilt(output, offered)


def _echo(raw_items: list[Item], offered: set[str]) -> list[Item]:
    """The items to send back (shared, not copied: `build_request`): messages, offered calls,
    and every reasoning item that is still followed by one of those (the API refuses a
    reasoning item left without one)."""
    kept: list[Item] = []
    for item in reversed(raw_items):
        kind = item.get("type")
        answered = kind == "function_call" and item.get("call_id") in offered
        if kind == "message" or answered or (kind == "reasoning" and kept):
            kept.append(item)
    return kept[::-1]


def _rebuilt(output: ModelOutput, offered: set[str]) -> list[Item]:
    part = {"type": "output_text", "text": output.text, "annotations": []}
    items = [{"type": "message", "role": "assistant", "content": [part]}] if output.text else []
    return items + [_map_tool_call(c) for c in output.tool_calls if c.call_id in offered]


def _map_tool_call(call: ToolCall) -> Item:
    arguments = call.raw_arguments or canonical_json(call.arguments)
    return {
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": arguments,
    }


# -------------------------------------------------------------------------- response


def parse_response(raw: dict[str, Any], request_id: str = "") -> ModelOutput:
    """A `ModelOutput` from a `Response` body (`response.model_dump()`); `failed` raises
    `ProviderError`. `raw_items` keeps the output items as the API takes them back as input."""
    status = raw.get("status")
    if status == "failed":
        raise _failure(raw.get("error"), "response failed")
    items: list[Item] = [_input_ready(item) for item in raw.get("output") or []]
    parts = [p for i in items if i.get("type") == "message" for p in i.get("content") or []]
    texts = [p.get("text", "") for p in parts if p.get("type") == "output_text"]
    # An empty refusal part ("", as a compatible server may send beside its text) is none.
    refusals = [p["refusal"] for p in parts if p.get("type") == "refusal" and p.get("refusal")]
    tool_calls, problems = make_tool_calls(
        (i.get("call_id", ""), i.get("name", ""), i.get("arguments", ""))
        for i in items
        if i.get("type") == "function_call"
    )
    emitting_call = bool(items) and items[-1].get("type") == "function_call"
    reason = (raw.get("incomplete_details") or {}).get("reason")
    stop, detail = _map_status(status, reason, bool(tool_calls), emitting_call)
    if refusals and status in ("completed", "incomplete"):
        stop, detail = "refused", f"refusal ({detail})"
    else:
        stop, detail = demote_broken_calls(stop, detail, problems)
    return ModelOutput(
        text="".join(refusals if stop == "refused" else texts),
        tool_calls=tool_calls,
        stop=stop,
        stop_detail=detail,
        usage=_map_usage(raw.get("usage")),
        provider_ref=ProviderRef(
            provider=PROVIDER,
            api=API,
            model=raw.get("model") or "",
            response_id=raw.get("id") or "",
            request_id=request_id,
            raw_items=items,
        ),
    )


def _input_ready(value: Any) -> Any:
    """An output item as the API takes it back. `model_dump()` pads each absent optional field
    with None (absent and null mean the same to the API) and spells `async` as `async_`. A
    reasoning item's `status` and plaintext `content` are output-only: the API refuses them
    as input (`unknown_parameter`; `array_above_max_length`, max 0)."""
    if isinstance(value, list):
        return [_input_ready(v) for v in value]
    if not isinstance(value, dict):
        return value
    ready = {"async" if k == "async_" else k: _input_ready(v) for k, v in value.items()}
    if ready.get("type") == "reasoning":
        ready.pop("status", None)
        ready.pop("content", None)
    return {k: v for k, v in ready.items() if v is not None}


def _map_status(
    status: str | None, reason: str | None, has_calls: bool, emitting_call: bool
) -> tuple[StopKind, str]:
    match status, reason:
        case "completed", _:
            return ("tool_calls", "completed") if has_calls else ("final", "completed")
        case "incomplete", "content_filter":
            return "content_filtered", reason
        case "incomplete", "max_output_tokens" if emitting_call:
            return "truncated", "max_output_tokens while emitting tool arguments"
        case "incomplete", _:
            return "truncated", reason or "incomplete without a reason"
        case _:
            return "truncated", f"response status {status!r}"


def _map_usage(usage: dict[str, Any] | None) -> Usage:
    usage = usage or {}
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
    )


_CODE_STATUS = {"rate_limit_exceeded": 429, "server_error": 500}


def classify_failure(code: str | None, message: str = "") -> ErrorAdvice:
    """How to recover from a `failed` response or an `error` event, which have no HTTP status:
    the "try again" codes count as 429/500, any other code as a 400, no code as a 500."""
    status = _CODE_STATUS.get(code, 400) if code else 500
    return classify_http_error(status, {}, f"{message} {code or ''}")


def _failure(error: Any, what: str) -> ProviderError:
    error = error if isinstance(error, Mapping) else {}
    code = error.get("code")
    message = f"{what}: {error.get('message') or 'no message'} {code or ''}".strip()
    advice = classify_failure(code, message)
    return ProviderError(
        _bounded(message),
        error_class=advice.error_class,
        retryable=advice.retryable,
        retry_after_seconds=advice.retry_after_seconds,
    )


_TEXT_KEY = {"output_text": "text", "refusal": "refusal"}


@dataclass
class _ItemParts:
    item: Item = field(default_factory=dict)
    """The latest snapshot: from `output_item.added`, then `output_item.done`."""
    done: bool = False
    arguments: list[str] | None = None
    content: dict[int, tuple[str, list[str]]] = field(default_factory=dict)
    """content_index -> (`output_text` or `refusal`, deltas)."""


class ResponsesStreamAssembler:
    """Assembles Responses stream event dicts into one `ModelOutput`.

    Items are keyed by `output_index` (or the index of their `item_id`): the argument fragments
    of parallel calls may interleave. Only `response.completed`/`.incomplete` make the output
    count, read from that event's response, which must agree with the deltas (an empty `output`
    there is replaced by the streamed items). `response.failed` and `error` raise."""

    def __init__(self, request_id: str = "", on_text: TextSink = ignore_text) -> None:
        self._request_id = request_id
        self._on_text = on_text
        self._snapshot: dict[str, Any] = {}
        self._items: dict[int, _ItemParts] = {}
        self._index_of: dict[str, int] = {}
        self._terminal: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        match kind:
            case "response.created" | "response.in_progress" | "response.queued":
                self._snapshot = event.get("response") or {}
            case "response.output_item.added" | "response.output_item.done":
                item: Item = event.get("item") or {}
                index = event.get("output_index", len(self._items))
                if item.get("id"):
                    self._index_of[item["id"]] = index
                parts = self._parts(index)
                parts.item, parts.done = item, kind.endswith("done")
            case "response.function_call_arguments.delta":
                parts = self._locate(event)
                parts.arguments = parts.arguments or []
                parts.arguments.append(event.get("delta") or "")
            case "response.output_text.delta" | "response.refusal.delta":
                part = "refusal" if kind == "response.refusal.delta" else "output_text"
                at = event.get("content_index", 0)
                text = event.get("delta") or ""
                self._locate(event).content.setdefault(at, (part, []))[1].append(text)
                if part == "output_text":
                    self._on_text(text)
            case "response.completed" | "response.incomplete":
                response = event.get("response") or {}
                self._terminal = {**response, "status": kind.removeprefix("response.")}
            case "response.failed":
                raise _failure((event.get("response") or {}).get("error"), "response failed")
            case "error":
                nested = event.get("error")
                raise _failure(nested if isinstance(nested, Mapping) else event, "error event")

    def _parts(self, index: int) -> _ItemParts:
        return self._items.setdefault(index, _ItemParts())

    def _locate(self, event: dict[str, Any]) -> _ItemParts:
        return self._parts(
            self._index_of.get(event.get("item_id", ""), event.get("output_index", 0))
        )

    def _assembled(self) -> list[Item]:
        """Each item as `output_item.done` gave it, else as the deltas built it."""
        items: list[Item] = []
        for _, parts in sorted(self._items.items()):
            item = dict(parts.item)
            if not parts.done and parts.arguments is not None:
                item["arguments"] = "".join(parts.arguments)
            if not parts.done and parts.content:
                item["content"] = [
                    {"type": kind, _TEXT_KEY[kind]: "".join(deltas)}
                    for _, (kind, deltas) in sorted(parts.content.items())
                ]
            items.append(item)
        return items

    def _disagreement(self, output: list[Item]) -> str:
        """What the final response says differently from the stream, "" when nothing."""
        for index, parts in sorted(self._items.items()):
            final = output[index] if index < len(output) else {}
            for key in ("type", "id", "call_id", "name"):
                if parts.item.get(key) is not None and parts.item[key] != final.get(key):
                    return f"item #{index} {key}"
            if parts.arguments is not None and "".join(parts.arguments) != final.get("arguments"):
                return f"item #{index} arguments"
            content = final.get("content") or []
            for at, (kind, deltas) in parts.content.items():
                part = content[at] if at < len(content) else {}
                if part.get(_TEXT_KEY[kind]) != "".join(deltas):
                    return f"item #{index} content #{at}"
        return ""

    def finish(self) -> ModelOutput:
        raw = self._terminal or {**self._snapshot, "status": "in_progress", "output": []}
        if not raw.get("output"):  # some servers end with an empty `output`
            raw = {**raw, "output": self._assembled()}
        output = parse_response(raw, self._request_id)
        if self._terminal is None:
            detail = "stream ended before response.completed"
        elif problem := self._disagreement(raw["output"]):
            detail = f"stream and final response disagree on {problem}"
        else:
            return output
        # nothing of a truncated output runs: its calls are never offered for execution
        return output.model_copy(update={"stop": "truncated", "stop_detail": detail})


# --------------------------------------------------------------------------- adapter

RESPONSES = OpenAIEndpoint("/responses", Response)


class OpenAIResponsesAdapter:
    """`ProviderAdapter` for the Responses API. Build the client with `max_retries=0`:
    retries belong to Temporal, driven by the `ProviderError` classification."""

    def __init__(self, client: AsyncOpenAI) -> None:
        self._client = client

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelOutput:
        return await complete_openai(
            self._client,
            RESPONSES,
            build_request(request),
            parse_response,
            ResponsesStreamAssembler,
            on_text,
        )

    async def count_input_tokens(self, request: ModelRequest) -> int:
        return await count_openai_input(self._client, build_request(request))
