"""Anthropic Messages API <-> the canonical event model.

`build_request`, `parse_response` and `MessagesStreamAssembler` are pure translations;
`AnthropicMessagesAdapter.complete` adds the SDK calls and continues a `pause_turn`. Streams are
read as raw events (the client's `post` with `stream=True`), never through the SDK's `.stream()`
helper, which raises `ValueError` on tool input that is not valid JSON.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, assert_never, cast

import anthropic
from anthropic import AsyncAnthropic, AsyncStream
from anthropic.types import Message as SdkMessage

from agentloop.adapters._shared import (
    ArgumentsError,
    SdkErrors,
    Segment,
    ToolTurn,
    _classified,
    _error_event_status,
    demote_broken_calls,
    group_turns,
    ignore_text,
    make_tool_calls,
    map_sdk_errors,
    model_parameters,
    parse_arguments,
    runner_note,
)
from agentloop.adapters.base import (
    DEFAULT_MAX_TOKENS,
    ModelRequest,
    ProviderError,
    TextSink,
    UnsupportedEventError,
)
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
    ToolResult,
    Usage,
    UserInput,
)
from agentloop.policies.checks import SET_BY_AGENTLOOP
from agentloop.tool_spec import ToolSpec

PROVIDER = "anthropic"
API = "messages"
MAX_PAUSE_CONTINUATIONS = 5  # how many times `complete` re-sends a turn paused by `pause_turn`

Block = dict[str, Any]
Message = dict[str, Any]

_SUCCEEDED = frozenset({"succeeded", "confirmed_after_query"})
_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use"})  # input streamed as JSON fragments


# --------------------------------------------------------------------------- request


def build_request(request: ModelRequest) -> dict[str, Any]:
    """Keyword arguments for `client.messages.create`. They share the transcript's own items
    (received blocks, call arguments) rather than copies, so a long conversation is not copied
    on every call: nothing may change them in place."""
    settings = request.settings
    system, messages = _map_events(request.events)
    if needs_note(request.events, bool(request.tools)):
        system.append(ENVELOPE_NOTE)
    kwargs: dict[str, Any] = {
        "model": request.model,
        "max_tokens": settings.max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": messages,
        "stream": settings.stream,
    }
    if system:
        kwargs["system"] = "\n\n".join(system)
    if request.tools:
        kwargs["tools"] = [_map_tool_spec(spec) for spec in request.tools]
    kwargs |= model_parameters(
        settings,
        max_tokens="max_tokens",
        stop="stop_sequences",
        sampling=False,  # API version 2026-10-21 refuses them (checked at a run's start)
    )
    # Provider fields passed through: checked at start not to touch any of the above.
    return {**settings.extra, **kwargs}


def _map_tool_spec(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def _map_events(events: list[Event]) -> tuple[list[str], list[Message]]:
    """Instruction texts (for the top-level `system`) and the alternating messages."""
    system: list[str] = []
    messages: list[Message] = []
    for segment in group_turns(events):
        for role, blocks in _map_segment(segment):
            if role == "system":
                system.extend(block["text"] for block in blocks)
            else:
                _join(messages, role, blocks)
    if not messages or messages[0]["role"] != "user":
        raise UnsupportedEventError("an Anthropic conversation must start with user content")
    return system, messages


def _map_segment(segment: Segment) -> list[tuple[str, list[Block]]]:
    match segment:
        case Instruction(text=text):
            return [("system", _text(text))]
        case UserInput(text=text):
            return [("user", _text(text))]
        case StateUpdate(text=text):
            return [("user", _text(runner_note(text) if text else ""))]
        case ModelOutput():
            return [("assistant", _assistant_blocks(segment))]
        case ToolTurn(output=output, results=results):
            # This API's rule: the next user message starts with one tool_result per tool_use.
            results_blocks = [_map_tool_result(result) for result in results]
            return [("assistant", _assistant_blocks(output)), ("user", results_blocks)]
        case _:
            assert_never(segment)


def _join(messages: list[Message], role: str, blocks: list[Block]) -> None:
    """Roles alternate: same-role content joins the last message (replaced, never changed in
    place: it may be another request's). Extends `messages`, a list the caller owns, so a
    conversation is built in one pass, not copied once per message."""
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        last = messages[-1]
        messages[-1] = {**last, "content": [*last["content"], *blocks]}
    else:
        messages.append({"role": role, "content": blocks})


def _text(text: str) -> list[Block]:
    return [{"type": "text", "text": text}] if text else []


_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
"""The call ids this API takes (`^[a-zA-Z0-9_-]+$`); its own are always such."""


def _wire_id(call_id: str) -> str:
    """A call id as this API takes it. Another provider's id (a run that fell back to this
    one carries its calls) with other characters is rewritten, the same for its `tool_use` and
    its `tool_result`, a digest of the whole keeping two rewritten ids apart."""
    if _TOOL_USE_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:12]
    return f"{re.sub(r'[^a-zA-Z0-9_-]', '_', call_id)}_{digest}"


def _map_tool_result(result: ToolResult) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": _wire_id(result.call_id)}
    if result.content:  # an empty string is not valid content: leave it out
        block["content"] = enveloped(result)
    if result.status not in _SUCCEEDED:
        block["is_error"] = True
    return block


def _assistant_blocks(output: ModelOutput) -> list[Block]:
    """The content blocks as the provider sent them (thinking signatures included) when we have
    them, else rebuilt. Calls of an output that did not stop for tool use never ran and will
    never get results, so their `tool_use` blocks are left out."""
    calls = output.tool_calls if output.offers_calls else []
    raw = _raw_blocks(output.provider_ref)
    if raw is not None:
        kept = [b for b in raw if calls or b.get("type") != "tool_use"]
        ids = [b.get("id") for b in kept if b.get("type") == "tool_use"]
        if ids == [call.call_id for call in calls]:
            return [_echo(block) for block in kept]
    return _text(output.text) + [_map_tool_call(call) for call in calls]


def _raw_blocks(ref: ProviderRef) -> list[Block] | None:
    if ref.provider != PROVIDER or len(ref.raw_items) != 1:
        return None
    item = ref.raw_items[0]
    content = item.get("content")
    if item.get("role") != "assistant" or not isinstance(content, list):
        return None
    return content


def _echo(block: Block) -> Block:
    """A received block without its null fields: `model_dump()` fills in every optional field
    the API did not send, and some (`caller`) may not be sent back as null. Its values are the
    transcript's own, shared, not copied (`build_request`)."""
    return {key: value for key, value in block.items() if value is not None}


def _map_tool_call(call: ToolCall) -> Block:
    return {
        "type": "tool_use",
        "id": _wire_id(call.call_id),
        "name": call.name,
        "input": call.arguments,
    }


# -------------------------------------------------------------------------- response


@dataclass
class _Response:
    """One assistant message as received (a `Message.model_dump()`, or assembled from the
    stream's events as sent), not yet interpreted."""

    message: Message
    request_id: str = ""
    raw_inputs: dict[int, str] = field(default_factory=dict)  # unparsed tool input, by position
    fault: str = ""  # why the message is incomplete (stream ended early, ...); "" if complete

    @property
    def blocks(self) -> list[Block]:
        return list(self.message.get("content") or [])

    @property
    def paused(self) -> bool:  # stopped for `pause_turn` with nothing wrong: may be continued
        stopped = self.message.get("stop_reason") == "pause_turn"
        return stopped and not self.fault and not self.raw_inputs


def parse_response(raw: dict[str, Any], request_id: str = "") -> ModelOutput:
    """A `ModelOutput` from a non-streamed `Message` (`message.model_dump()`)."""
    return _to_output([_Response(raw, request_id)])


def _to_output(parts: list[_Response]) -> ModelOutput:
    """The one place received messages become a `ModelOutput`; several parts are one turn the
    provider paused and `complete` continued (content joined, usage summed, last stop wins)."""
    last = parts[-1]
    blocks: list[Block] = []
    raw_inputs: dict[int, str] = {}
    for part in parts:
        raw_inputs.update({len(blocks) + i: raw for i, raw in part.raw_inputs.items()})
        blocks.extend(part.blocks)
    tool_calls, problems = make_tool_calls(
        (b.get("id") or "", b.get("name") or "", raw_inputs.get(i, canonical_json(b.get("input"))))
        for i, b in enumerate(blocks)
        if b.get("type") == "tool_use"
    )
    stop, detail = _map_stop_reason(last.message.get("stop_reason"), blocks)
    if last.fault:
        stop, detail = "truncated", last.fault
    elif stop == "refused":
        category = (last.message.get("stop_details") or {}).get("category")
        detail += f" ({category})" if category else ""
    else:
        stop, detail = demote_broken_calls(stop, detail, problems)
    if len(parts) > 1:
        detail += f" ({len(parts) - 1} pause_turn continuation(s))"
    return ModelOutput(
        text="".join(b.get("text") or "" for b in blocks if b.get("type") == "text"),
        tool_calls=tool_calls,
        stop=stop,
        stop_detail=detail,
        usage=_map_usage([part.message.get("usage") or {} for part in parts]),
        provider_ref=ProviderRef(
            provider=PROVIDER,
            api=API,
            model=last.message.get("model") or "",
            response_id=last.message.get("id") or "",
            request_id=last.request_id,
            raw_items=[{"role": "assistant", "content": blocks}],
        ),
    )


def _map_stop_reason(reason: str | None, blocks: list[Block]) -> tuple[StopKind, str]:
    has_calls = any(block.get("type") == "tool_use" for block in blocks)
    match reason:
        case "end_turn" | "stop_sequence":
            return ("tool_calls", f"{reason} with tool calls") if has_calls else ("final", reason)
        case "tool_use":
            return ("tool_calls", reason) if has_calls else ("truncated", f"{reason} without calls")
        case "max_tokens" | "model_context_window_exceeded":
            if blocks and blocks[-1].get("type") in _INPUT_BLOCKS:
                return "truncated", f"{reason} while emitting tool input"
            return "truncated", reason
        case "refusal":
            return "refused", reason
        case "pause_turn":
            return "truncated", "pause_turn: turn still paused, not continued further"
        case None:
            return "truncated", "response without a stop reason"
        case _:
            return "truncated", f"unknown stop reason {reason!r}"


def _map_usage(usages: list[dict[str, Any]]) -> Usage:
    """Summed over the parts of one turn; cache reads and writes are billed input tokens too."""
    inputs = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return Usage(
        input_tokens=sum(usage.get(key) or 0 for usage in usages for key in inputs),
        output_tokens=sum(usage.get("output_tokens") or 0 for usage in usages),
    )


class MessagesStreamAssembler:
    """Assembles raw stream event dicts (`event.model_dump()`) into one `ModelOutput`.

    Blocks are keyed by `index`; tool input fragments are joined per block and parsed only at
    the end, so input that is not valid JSON truncates the output instead of raising. The
    result counts only once `message_stop` arrived. An `error` event raises `ProviderError`."""

    def __init__(self, request_id: str = "", on_text: TextSink = ignore_text) -> None:
        self._request_id = request_id
        self._on_text = on_text
        self._message: Message = {}
        self._blocks: dict[int, Block] = {}
        self._json: dict[int, list[str]] = {}
        self._faults: list[str] = []
        self._stopped = False

    def feed(self, event: dict[str, Any]) -> None:
        match event.get("type"):
            case "message_start":
                self._message = copy.deepcopy(event.get("message") or {})
            case "content_block_start":
                self._blocks[event.get("index", 0)] = copy.deepcopy(event["content_block"])
            case "content_block_delta":
                self._feed_delta(event.get("index", 0), event.get("delta") or {})
            case "message_delta":
                # Counts here are cumulative: they replace those of `message_start`.
                delta = event.get("delta") or {}
                self._message.update({k: v for k, v in delta.items() if v is not None})
                usage = {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
                self._message["usage"] = {**(self._message.get("usage") or {}), **usage}
            case "message_stop":
                self._stopped = True
            case "error":
                error = event.get("error") or {}
                message = f"error event in stream: {error.get('type')}: {error.get('message')}"
                raise _classified(message, None, _error_event_status(event), {})
            case _:
                pass  # content_block_stop, ping, and event kinds added later

    def _feed_delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.get(index)
        kind = delta.get("type")
        if block is None:
            self._faults.append(f"{kind} for block {index} before its content_block_start")
            return
        match kind:
            case "text_delta":
                text = delta.get("text", "")
                block["text"] = (block.get("text") or "") + text
                self._on_text(text)
            case "input_json_delta":
                self._json.setdefault(index, []).append(delta.get("partial_json") or "")
            case "thinking_delta":
                block["thinking"] = (block.get("thinking") or "") + delta.get("thinking", "")
            case "signature_delta":
                block["signature"] = delta.get("signature", "")
            case "citations_delta":
                block["citations"] = [*(block.get("citations") or []), delta.get("citation")]
            case _:
                self._faults.append(f"unsupported delta {kind!r} for block {index}")

    def _assembled(self) -> _Response:
        blocks: list[Block] = []
        raw_inputs: dict[int, str] = {}
        faults = list(self._faults)
        for position, (index, received) in enumerate(sorted(self._blocks.items())):
            block = dict(received)
            if index in self._json:
                text = "".join(self._json[index])
                try:
                    block["input"] = parse_arguments(text)
                except ArgumentsError as err:
                    block["input"] = {}
                    if block.get("type") == "tool_use":
                        raw_inputs[position] = text  # the call carries it and truncates
                    else:
                        faults.append(f"block {index}: {err}")
            blocks.append(block)
        fault = "; ".join(faults) if self._stopped else "stream ended before message_stop"
        message = {**self._message, "content": blocks}
        return _Response(message, self._request_id, raw_inputs, fault)

    def finish(self) -> ModelOutput:
        return _to_output([self._assembled()])


# --------------------------------------------------------------------------- adapter

ANTHROPIC_ERRORS = SdkErrors.of(anthropic, base=anthropic.AnthropicError)

COUNTED_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})
"""What a Messages request shares with a request to the token counter."""

_RAW_EVENTS = AsyncStream[object]
"""Streamed events as the JSON objects they are (see `AnthropicMessagesAdapter._create`)."""


class AnthropicMessagesAdapter:
    """`ProviderAdapter` for the Messages API. Build the client with `max_retries=0`: retries
    belong to Temporal, driven by the `ProviderError` classification."""

    def __init__(self, client: AsyncAnthropic) -> None:
        self._client = client

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelOutput:
        kwargs = build_request(request)
        sink = on_text or ignore_text
        with map_sdk_errors(ANTHROPIC_ERRORS):
            parts = [await self._create(kwargs, sink)]
            while parts[-1].paused and len(parts) <= MAX_PAUSE_CONTINUATIONS:
                parts.append(await self._create(_continuation(kwargs, parts), sink))
        return _to_output(parts)

    async def count_input_tokens(self, request: ModelRequest) -> int:
        kwargs = build_request(request)
        counted = {k: v for k, v in kwargs.items() if k in COUNTED_FIELDS}
        with map_sdk_errors(ANTHROPIC_ERRORS):
            answer = await self._client.messages.count_tokens(**counted)
        return answer.input_tokens

    async def _create(self, kwargs: dict[str, Any], on_text: TextSink) -> _Response:
        if not kwargs["stream"]:
            try:
                # What `build_request` set goes by name; a run's `model_settings.extra` (checked
                # at start to touch none of those fields) as `extra_body`.
                known = {k: v for k, v in kwargs.items() if k in SET_BY_AGENTLOOP}
                extra = {k: v for k, v in kwargs.items() if k not in SET_BY_AGENTLOOP}
                message = await self._client.messages.create(**known, extra_body=extra or None)
            except ValueError as err:  # the SDK refuses a long request unless it is streamed
                raise ProviderError(str(err), error_class="bad_request", retryable=False) from err
            return _Response(message.model_dump(), message._request_id or "")
        # Streamed, the body goes out through the client's own `post`, asking for the events
        # as the JSON objects they are: `messages.create` would build the SDK's model for every
        # event (a delta a few tokens long) only for the assembler to dump it again, ~28 µs an
        # event. The request is the same (the client's headers, credentials and body
        # preparation); `create` adds only its deprecated-model warnings and span names.
        stream = await self._client.post(
            "/v1/messages", body=kwargs, cast_to=SdkMessage, stream=True, stream_cls=_RAW_EVENTS
        )
        request_id = stream.response.headers.get("request-id") or ""
        assembler = MessagesStreamAssembler(request_id, on_text)
        async with stream:
            async for event in stream:
                assembler.feed(cast(dict[str, Any], event))
        return assembler._assembled()


def _continuation(kwargs: dict[str, Any], parts: list[_Response]) -> dict[str, Any]:
    """The same request with the paused turn so far as the last (assistant) message."""
    paused = [_echo(block) for part in parts for block in part.blocks]
    messages = list(kwargs["messages"])
    _join(messages, "assistant", paused)
    return {**kwargs, "messages": messages}
