"""OpenAI Chat Completions wire format: a scripted turn as the real API would send it.

Pure functions (no HTTP, no script lookup), so tests can pin every byte. Shapes follow
`openai.types.chat.ChatCompletion` and `ChatCompletionChunk`. This API has no reasoning items
and no paused turns: `reasoning` and `pause_turn` are ignored here.
"""

from __future__ import annotations

from agentloop.scripted_provider.rendering import (
    Fragment,
    JSONObject,
    Reply,
    Stream,
    TurnOutput,
    argument_fragments,
    pieces,
    sse_frame,
)
from agentloop.scripted_provider.scripts import ScriptedToolCall, ScriptUsage

DONE_FRAME = b"data: [DONE]\n\n"


def completion_id(output: TurnOutput) -> str:
    # Deterministic so a retried request is answered with the very same completion.
    return f"chatcmpl-{output.script}-{output.index}"


def assistant_message(output: TurnOutput) -> JSONObject:
    """The `message` of the completion: what the client echoes back as an assistant message."""
    turn = output.turn
    message: JSONObject = {
        "role": "assistant",
        "content": turn.text,
        "refusal": turn.refusal,
        "annotations": [],
    }
    if turn.tool_calls:  # the real API omits the key when the model called nothing
        message["tool_calls"] = [_full_tool_call(call) for call in turn.tool_calls]
    return message


def completion_body(reply: Reply) -> JSONObject:
    """A non-streamed `chat.completion` object."""
    choice = {
        "index": 0,
        "message": assistant_message(reply.output),
        "logprobs": None,
        "finish_reason": reply.turn.effective_finish_reason(),
    }
    head = _head(reply, "chat.completion")
    return {**head, "choices": [choice], "usage": _usage(reply.usage)}


def completion_stream(reply: Reply) -> Stream:
    """The `chat.completion.chunk`s of a streamed answer; `[DONE]` is the completion."""
    turn = reply.turn

    def chunk(delta: JSONObject, finish_reason: str | None = None) -> JSONObject:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        # With include_usage the real API sends `usage: null` on every chunk but the last.
        extra: JSONObject = {"usage": None} if reply.stream_usage else {}
        return {**_head(reply, "chat.completion.chunk"), "choices": [choice], **extra}

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += [chunk({"content": piece}) for piece in pieces(turn.text)]
    chunks += [chunk({"refusal": piece}) for piece in pieces(turn.refusal)]
    fragments, cut = argument_fragments(turn)
    chunks += [chunk({"tool_calls": [_call_delta(f, turn.tool_calls)]}) for f in fragments]
    if cut:
        # No finish_reason, no usage, no [DONE]: the client must notice by itself.
        return Stream([sse_frame(c) for c in chunks])
    chunks.append(chunk({}, turn.effective_finish_reason()))
    if reply.stream_usage:
        head = _head(reply, "chat.completion.chunk")
        chunks.append({**head, "choices": [], "usage": _usage(reply.usage)})
    return Stream([sse_frame(c) for c in chunks], [DONE_FRAME])


def _head(reply: Reply, object_type: str) -> JSONObject:
    # Every chunk of one completion repeats the same id, timestamp and model.
    return {
        "id": completion_id(reply.output),
        "object": object_type,
        "created": reply.created,
        "model": reply.output.script,
        "system_fingerprint": None,
    }


def _usage(usage: ScriptUsage) -> JSONObject:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _full_tool_call(call: ScriptedToolCall) -> JSONObject:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_text()},
    }


def _call_delta(fragment: Fragment, calls: list[ScriptedToolCall]) -> JSONObject:
    # Only `index` says which call a fragment extends; the first one also names the call.
    if not fragment.first:
        return {"index": fragment.call, "function": {"arguments": fragment.text}}
    call = calls[fragment.call]
    return {
        "index": fragment.call,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": fragment.text},
    }
