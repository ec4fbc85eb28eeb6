"""Anthropic Messages wire format: a scripted turn as the real API would send it.

Pure functions, shapes after `anthropic.types.Message`, the `RawMessageStreamEvent` union and
the error body (`{"type": "error", "error": {"type", "message"}}`). Content blocks come as the
API orders them: `thinking` (with its `signature`), `text`, then `tool_use` blocks. A
`pause_turn` turn is answered in two phases: the reasoning and text first (`stop_reason:
"pause_turn"`), the refusal and tool calls when the client sends that back.

Tool input that is not a JSON object (a script's deliberately broken argument string) cannot be
a non-streamed `input`, which the API always sends as an object: it goes out as `{}` there, and
verbatim in a stream's `input_json_delta` fragments, where a real truncation would show it.
"""

from __future__ import annotations

import json
from typing import Any

from agentloop.scripted_provider.rendering import (
    JSONObject,
    Rejection,
    Reply,
    Stream,
    TurnOutput,
    argument_fragments,
    pieces,
    sse_frame,
)
from agentloop.scripted_provider.scripts import ScriptedToolCall, ScriptUsage

REQUEST_ID_HEADER = "request-id"
"""The anthropic client exposes it as `_request_id` on every parsed response."""

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def message_id(output: TurnOutput) -> str:
    suffix = "_continued" if output.phase == "continuation" else ""
    return f"msg_{output.script}_{output.index}{suffix}"


def content_blocks(output: TurnOutput) -> list[JSONObject]:
    """The `content` of the phase being answered: what the client echoes back."""
    turn = output.turn
    head: list[JSONObject] = []
    if turn.reasoning is not None:
        signature = output.opaque("signature")
        head.append({"type": "thinking", "thinking": turn.reasoning, "signature": signature})
    if turn.text:  # the API refuses empty text blocks, so it never sends one
        head.append({"type": "text", "text": turn.text})
    tail: list[JSONObject] = [{"type": "text", "text": turn.refusal}] if turn.refusal else []
    tail += [_tool_use(call, _input(call)) for call in turn.tool_calls]
    match output.phase:
        case "paused":
            return head
        case "continuation":
            return tail
        case "whole":
            return head + tail


def message_body(reply: Reply) -> JSONObject:
    """A non-streamed `message` object."""
    stop_reason, stop_sequence = _stop(reply.output)
    content = content_blocks(reply.output)
    return _message(reply, content, stop_reason, stop_sequence, _usage(reply.usage))


def message_stream(reply: Reply) -> Stream:
    """The SSE events of a streamed message; `message_stop` completes it."""
    frames: list[bytes] = []

    def add(event_type: str, **fields: Any) -> None:
        frames.append(sse_frame({"type": event_type, **fields}, event=event_type))

    start_usage = {**_usage(reply.usage), "output_tokens": min(1, reply.usage.completion_tokens)}
    add("message_start", message=_message(reply, [], None, None, start_usage))
    add("ping")
    blocks = content_blocks(reply.output)
    calls = [block for block in blocks if block["type"] == "tool_use"]
    first_call = len(blocks) - len(calls)
    for index, block in enumerate(blocks[:first_call]):
        add("content_block_start", index=index, content_block=_emptied(block))
        for delta in _deltas(block):
            add("content_block_delta", index=index, delta=delta)
        add("content_block_stop", index=index)
    fragments, cut = argument_fragments(reply.turn) if calls else ([], False)
    for fragment in fragments:
        index, call = first_call + fragment.call, reply.turn.tool_calls[fragment.call]
        if fragment.first:
            add("content_block_start", index=index, content_block=_tool_use(call, {}))
        delta = {"type": "input_json_delta", "partial_json": fragment.text}
        add("content_block_delta", index=index, delta=delta)
        if fragment.last:
            add("content_block_stop", index=index)
    if cut:
        return Stream(frames)
    stop_reason, stop_sequence = _stop(reply.output)
    add(
        "message_delta",
        delta={"stop_reason": stop_reason, "stop_sequence": stop_sequence},
        usage=_usage(reply.usage),
    )
    add("message_stop")
    return Stream(frames[:-1], frames[-1:])


def error_body(rejection: Rejection) -> JSONObject:
    """The body the anthropic client turns into `RateLimitError`, `OverloadedError`, ..."""
    default = "api_error" if rejection.status >= 500 else "invalid_request_error"
    error_type = _ERROR_TYPES.get(rejection.status, default)
    return {"type": "error", "error": {"type": error_type, "message": rejection.message}}


def _message(
    reply: Reply,
    content: list[JSONObject],
    stop_reason: str | None,
    stop_sequence: str | None,
    usage: JSONObject,
) -> JSONObject:
    return {
        "id": message_id(reply.output),
        "type": "message",
        "role": "assistant",
        "model": reply.output.script,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    }


def _stop(output: TurnOutput) -> tuple[str, str | None]:
    """`stop_reason` and `stop_sequence` for the phase answered."""
    turn = output.turn
    if output.phase == "paused":
        return "pause_turn", None
    if turn.refusal is not None and turn.finish_reason is None:
        return "refusal", None
    match turn.effective_finish_reason():
        case "stop" if turn.stop_sequence is not None:
            return "stop_sequence", turn.stop_sequence
        case "stop":
            return "end_turn", None
        case "tool_calls" | "function_call":
            return "tool_use", None
        case "length":
            return "max_tokens", None
        case "content_filter":
            return "refusal", None


def _usage(usage: ScriptUsage) -> JSONObject:
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _tool_use(call: ScriptedToolCall, tool_input: JSONObject) -> JSONObject:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input}


def _input(call: ScriptedToolCall) -> JSONObject:
    try:
        value = json.loads(call.arguments_text())
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _emptied(block: JSONObject) -> JSONObject:
    """A text or thinking block as `content_block_start` opens it: no content yet."""
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {"type": "text", "text": ""}


def _deltas(block: JSONObject) -> list[JSONObject]:
    if block["type"] == "thinking":
        thinking = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])]
        return [*thinking, {"type": "signature_delta", "signature": block["signature"]}]
    return [{"type": "text_delta", "text": piece} for piece in pieces(block["text"])]
