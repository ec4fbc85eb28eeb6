"""OpenAI Chat Completions <-> the canonical event model.

`build_request`, `parse_response` and `ChatStreamAssembler` are pure translations;
`OpenAIChatAdapter.complete` adds the one SDK call. Streams are read from the raw chunk
iterator (`create(stream=True)`), never from the SDK's `.stream()` helper, which reports empty
arguments when the fragments of parallel calls interleave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, assert_never

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from agentloop.adapters._openai import OpenAIEndpoint, complete_openai, count_openai_input
from agentloop.adapters._shared import (
    Segment,
    ToolTurn,
    demote_broken_calls,
    group_turns,
    ignore_text,
    make_tool_calls,
    model_parameters,
    runner_note,
)
from agentloop.adapters.base import ModelRequest, TextSink
from agentloop.adapters.openai_responses import build_request as responses_request
from agentloop.digests import canonical_json
from agentloop.envelope import ENVELOPE_NOTE, enveloped, needs_note
from agentloop.events import (
    Event,
    Instruction,
    ModelOutput,
    ProviderRef,
    StateUpdate,
    StopKind,
    ToolCall,
    Usage,
    UserInput,
)
from agentloop.tool_spec import ToolSpec

PROVIDER = "openai-chat"
API = "chat.completions"

Message = dict[str, Any]


# --------------------------------------------------------------------------- request


def build_request(request: ModelRequest) -> dict[str, Any]:
    """The request body for `/chat/completions`, on the wire's terms (sent as built). It shares
    the transcript's own items (received messages) rather than copies, so a long conversation
    is not copied on every call: nothing may change it in place."""
    settings = request.settings
    kwargs: dict[str, Any] = {
        "model": request.model,
        "messages": _with_note(_map_events(request.events), request),
        "stream": settings.stream,
    }
    if settings.stream:
        kwargs["stream_options"] = {"include_usage": True}
    if request.tools:
        kwargs["tools"] = [_map_tool_spec(spec) for spec in request.tools]
    kwargs |= model_parameters(
        settings,
        max_tokens="max_completion_tokens",
        stop="stop",
        effort=lambda effort: ("reasoning_effort", effort),
    )
    # Provider fields passed through: checked at start not to touch any of the above.
    return {**settings.extra, **kwargs}


def _with_note(messages: list[Message], request: ModelRequest) -> list[Message]:
    """`messages` with what the envelope means said once, as a system message after the
    run's own instructions."""
    if not needs_note(request.events, bool(request.tools)):
        return messages
    at = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    messages.insert(at, {"role": "system", "content": ENVELOPE_NOTE})
    return messages


def _map_tool_spec(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


def _map_events(events: list[Event]) -> list[Message]:
    messages: list[Message] = []
    for segment in group_turns(events):
        messages.extend(_map_segment(segment))
    return messages


def _map_segment(segment: Segment) -> list[Message]:
    match segment:
        case Instruction(text=text):
            return [{"role": "system", "content": text}]
        case UserInput(text=text):
            return [{"role": "user", "content": text}]
        case StateUpdate(text=text):
            return [{"role": "user", "content": runner_note(text)}] if text else []
        case ModelOutput():
            return [_assistant_message(segment)]
        case ToolTurn(output=output, results=results):
            # This API's rule: one `tool` message per call, right after the assistant message.
            return [_assistant_message(output)] + [
                {"role": "tool", "tool_call_id": r.call_id, "content": enveloped(r)}
                for r in results
            ]
        case _:
            assert_never(segment)


def _assistant_message(output: ModelOutput) -> Message:
    """The assistant message as the provider sent it when we have it, else rebuilt.

    Calls of an output that did not stop for `tool_calls` (truncated, refused, filtered) were
    never offered for execution and will never get results, so they are not sent."""
    offered = output.offers_calls
    ref = output.provider_ref
    if ref.provider == PROVIDER and len(ref.raw_items) == 1:
        raw = ref.raw_items[0]
        if raw.get("role") == "assistant" and (offered or not raw.get("tool_calls")):
            return raw
    calls = output.tool_calls if offered else []
    message: Message = {"role": "assistant", "content": output.text or (None if calls else "")}
    if calls:
        message["tool_calls"] = [_map_tool_call(call) for call in calls]
    return message


def _map_tool_call(call: ToolCall) -> Message:
    arguments = call.raw_arguments or canonical_json(call.arguments)
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


# -------------------------------------------------------------------------- response


def parse_response(raw: dict[str, Any], request_id: str = "") -> ModelOutput:
    """A `ModelOutput` from a non-streamed `chat.completion` body (`response.model_dump()`)."""
    choices = raw.get("choices") or []
    choice: dict[str, Any] = choices[0] if choices else {}
    message: dict[str, Any] = choice.get("message") or {}
    return _finish(
        content=message.get("content"),
        refusal=message.get("refusal") or None,  # some servers send "" beside an answer
        calls=[_call_fields(call) for call in message.get("tool_calls") or []],
        finish_reason=choice.get("finish_reason"),
        usage=raw.get("usage"),
        ref=_ref(raw.get("id"), raw.get("model"), request_id),
        unfinished="response without a finish reason",
    )


def _call_fields(call: dict[str, Any]) -> Message:
    function: dict[str, Any] = call.get("function") or {}
    return _call_message(
        call.get("id") or "", function.get("name") or "", function.get("arguments") or ""
    )


def _call_message(call_id: str, name: str, arguments: str) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _ref(response_id: Any, model: Any, request_id: str) -> ProviderRef:
    return ProviderRef(
        provider=PROVIDER,
        api=API,
        model=model or "",
        response_id=response_id or "",
        request_id=request_id,
    )


@dataclass
class _CallParts:
    index: int
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChatStreamAssembler:
    """Assembles `chat.completion.chunk` dicts into one `ModelOutput`.

    Tool calls are keyed by `index` (their id and name arrive on the first fragment only, and
    the fragments of parallel calls may interleave), and a fragment bringing another id than
    the call at its index begins a new call: some compatible servers (Ollama) send each of
    parallel calls whole on index 0, or with no index at all (taken as 0). The result counts
    only once a finish reason arrived; the usage chunk (no choices) may follow it."""

    def __init__(self, request_id: str = "", on_text: TextSink = ignore_text) -> None:
        self._request_id = request_id
        self._on_text = on_text
        self._response_id = ""
        self._model = ""
        self._content: list[str] | None = None
        self._refusal: list[str] | None = None
        self._calls: list[_CallParts] = []
        self._at_index: dict[int, _CallParts] = {}
        """The call a fragment at each index continues: the last one begun there."""
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None

    def feed(self, chunk: dict[str, Any]) -> None:
        self._response_id = self._response_id or chunk.get("id") or ""
        self._model = self._model or chunk.get("model") or ""
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue  # n > 1 is never requested
            self._feed_delta(choice.get("delta") or {})
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]

    def _feed_delta(self, delta: dict[str, Any]) -> None:
        if delta.get("content") is not None:
            self._content = self._content or []
            self._content.append(delta["content"])
            self._on_text(delta["content"])
        if delta.get("refusal"):  # not "": some servers send it beside the opening content ""
            self._refusal = self._refusal or []
            self._refusal.append(delta["refusal"])
        for fragment in delta.get("tool_calls") or []:
            parts = self._call_of(fragment)
            function: dict[str, Any] = fragment.get("function") or {}
            parts.call_id = parts.call_id or fragment.get("id") or ""
            parts.name = parts.name or function.get("name") or ""
            if function.get("arguments"):
                parts.arguments.append(function["arguments"])

    def _call_of(self, fragment: dict[str, Any]) -> _CallParts:
        index, call_id = fragment.get("index") or 0, fragment.get("id")
        parts = self._at_index.get(index)
        if parts is None or (call_id and parts.call_id and call_id != parts.call_id):
            parts = self._at_index[index] = _CallParts(index)
            self._calls.append(parts)
        return parts

    def finish(self) -> ModelOutput:
        # The model's order: by index, and calls sharing one in the order they began.
        ordered = sorted(self._calls, key=lambda parts: parts.index)
        calls = [
            _call_message(parts.call_id, parts.name, "".join(parts.arguments)) for parts in ordered
        ]
        content = "".join(self._content or [])
        refusal = None if self._refusal is None else "".join(self._refusal)
        # The opening chunk carries `content: ""` even when the message turns out to be only
        # tool calls or a refusal; the non-streamed message has `content: null` then.
        absent = self._content is None or (not content and (calls or refusal is not None))
        return _finish(
            content=None if absent else content,
            refusal=refusal,
            calls=calls,
            finish_reason=self._finish_reason,
            usage=self._usage,
            ref=_ref(self._response_id, self._model, self._request_id),
            unfinished="stream ended before a finish reason",
        )


def _finish(
    *,
    content: str | None,
    refusal: str | None,
    calls: list[Message],
    finish_reason: str | None,
    usage: dict[str, Any] | None,
    ref: ProviderRef,
    unfinished: str,
) -> ModelOutput:
    """The one place a finished (or unfinished) assistant message becomes a `ModelOutput`."""
    echo: Message = {"role": "assistant", "content": content}
    if calls:
        echo["tool_calls"] = calls
    if refusal is not None:
        echo["refusal"] = refusal
    tool_calls, problems = make_tool_calls(
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls
    )
    stop, detail = _map_finish_reason(finish_reason, bool(calls))
    if finish_reason is None:
        detail = unfinished
    elif refusal is not None:
        stop, detail = "refused", f"refusal ({finish_reason})"
    else:
        stop, detail = demote_broken_calls(stop, detail, problems)
    return ModelOutput(
        text=refusal if stop == "refused" and refusal is not None else content or "",
        tool_calls=tool_calls,
        stop=stop,
        stop_detail=detail,
        usage=_map_usage(usage),
        provider_ref=ref.model_copy(update={"raw_items": [echo]}),
    )


def _map_finish_reason(reason: str | None, has_calls: bool) -> tuple[StopKind, str]:
    match reason:
        case "stop":
            # Some compatible servers end a tool-call turn with "stop": the calls still stand.
            return ("tool_calls", "stop with tool calls") if has_calls else ("final", "stop")
        case "tool_calls" | "function_call":
            if has_calls:
                return "tool_calls", reason
            return "truncated", f"{reason} without any tool call"
        case "length":
            if has_calls:
                return "truncated", "length while emitting tool arguments"
            return "truncated", "length"
        case "content_filter":
            return "content_filtered", reason
        case None:
            return "truncated", "no finish reason"
        case _:
            return "truncated", f"unknown finish reason {reason!r}"


def _map_usage(usage: dict[str, Any] | None) -> Usage:
    usage = usage or {}
    return Usage(
        input_tokens=usage.get("prompt_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
    )


# --------------------------------------------------------------------------- adapter

CHAT_COMPLETIONS = OpenAIEndpoint("/chat/completions", ChatCompletion)


CHAT_ITEM_ALLOWANCE = 8
"""Tokens a Chat Completions message may take beyond the same item of a Responses request
(role and call framing: about 6 for a tool call and its result, measured on the scripted
provider), added to the Responses API's count of a Chat request (and once for its
instructions): the count reserved must not fall short of what the call is billed."""


class OpenAIChatAdapter:
    """`ProviderAdapter` for Chat Completions. Build the client with `max_retries=0`:
    retries belong to Temporal, driven by the `ProviderError` classification."""

    def __init__(self, client: AsyncOpenAI) -> None:
        self._client = client

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelOutput:
        return await complete_openai(
            self._client,
            CHAT_COMPLETIONS,
            build_request(request),
            parse_response,
            ChatStreamAssembler,
            on_text,
        )

    async def count_input_tokens(self, request: ModelRequest) -> int:
        # Chat Completions has no counter: the Responses API's counts the same conversation in
        # its own shape, and each item is given room for what the Chat shape may add to it.
        body = responses_request(request)
        counted = await count_openai_input(self._client, body)
        return counted + CHAT_ITEM_ALLOWANCE * (len(body["input"]) + 1)
