"""OpenAI Chat Completions wire format: a script turn as the real API would send it.

Pure functions only (no HTTP, no scripts lookup), so the other protocols can live next to
this one and tests can pin every byte. Shapes follow `openai.types.chat.ChatCompletion` and
`ChatCompletionChunk`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentloop.demo.scripted_provider.scripts import ScriptedToolCall, ScriptTurn, ScriptUsage

JSONObject = dict[str, Any]

# Small pieces make every assembler do real work: text arrives in several content deltas and
# each argument string in many fragments.
CONTENT_PIECE_CHARS = 6
ARGUMENT_FRAGMENT_CHARS = 5

DONE_FRAME = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class Envelope:
    """What every chunk of one completion repeats: same id, same timestamp, same model."""

    id: str
    model: str
    created: int


def completion_id(script_name: str, turn: int) -> str:
    # Deterministic so a retried request is answered with the very same completion.
    return f"chatcmpl-{script_name}-{turn}"


def error_body(message: str, *, error_type: str, code: str, param: str | None = None) -> JSONObject:
    """The body the openai client turns into `BadRequestError`, `NotFoundError`, ..."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def completion_body(turn: ScriptTurn, envelope: Envelope, usage: ScriptUsage) -> JSONObject:
    """A non-streamed `chat.completion` object."""
    message: JSONObject = {
        "role": "assistant",
        "content": turn.text,
        "refusal": turn.refusal,
        "annotations": [],
    }
    if turn.tool_calls:  # the real API omits the key when the model called nothing
        message["tool_calls"] = [_full_tool_call(call) for call in turn.tool_calls]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": turn.effective_finish_reason(),
    }
    return {**_head(envelope, "chat.completion"), "choices": [choice], "usage": _usage(usage)}


def stream_chunks(
    turn: ScriptTurn, envelope: Envelope, usage: ScriptUsage, *, include_usage: bool
) -> list[JSONObject]:
    """The `chat.completion.chunk` objects of a streamed answer, in order (no `[DONE]`)."""

    def chunk(delta: JSONObject, finish_reason: str | None = None) -> JSONObject:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        # With include_usage the real API sends `usage: null` on every chunk but the last.
        extra: JSONObject = {"usage": None} if include_usage else {}
        return {**_head(envelope, "chat.completion.chunk"), "choices": [choice], **extra}

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += [chunk({"content": piece}) for piece in _pieces(turn.text, CONTENT_PIECE_CHARS)]
    chunks += [chunk({"refusal": piece}) for piece in _pieces(turn.refusal, CONTENT_PIECE_CHARS)]
    deltas = _tool_call_deltas(turn.tool_calls, turn.cut_stream_after_chars)
    chunks += [chunk({"tool_calls": [delta]}) for delta in deltas]
    if turn.cut_stream_after_chars is not None:
        # A cut stream ends cleanly but never says how it finished: the client must notice
        # the missing finish_reason by itself.
        return chunks
    chunks.append(chunk({}, turn.effective_finish_reason()))
    if include_usage:
        head = _head(envelope, "chat.completion.chunk")
        chunks.append({**head, "choices": [], "usage": _usage(usage)})
    return chunks


def sse_frames(chunks: list[JSONObject]) -> list[bytes]:
    """Server-sent-event framing of the chunks, ending with the `[DONE]` sentinel."""
    frames = [f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode() for chunk in chunks]
    return [*frames, DONE_FRAME]


def _head(envelope: Envelope, object_type: str) -> JSONObject:
    return {
        "id": envelope.id,
        "object": object_type,
        "created": envelope.created,
        "model": envelope.model,
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


def _pieces(text: str | None, size: int) -> list[str]:
    if not text:
        return []
    return [text[start : start + size] for start in range(0, len(text), size)]


def _tool_call_deltas(calls: list[ScriptedToolCall], budget: int | None) -> list[JSONObject]:
    """Argument fragments of all calls, interleaved round-robin across calls.

    Real providers interleave parallel calls, which breaks assemblers that assume one call
    finishes before the next starts; only `index` says which call a fragment extends. The
    first fragment of each call also carries its id, type and name. `budget` caps the
    argument characters sent over all calls (a cut stream).
    """
    fragments = [_pieces(call.arguments_text(), ARGUMENT_FRAGMENT_CHARS) or [""] for call in calls]
    rounds = max((len(parts) for parts in fragments), default=0)
    deltas: list[JSONObject] = []
    for round_no in range(rounds):
        for index, parts in enumerate(fragments):
            if round_no >= len(parts):
                continue
            if budget is not None and budget <= 0:
                return deltas
            piece = parts[round_no] if budget is None else parts[round_no][:budget]
            budget = None if budget is None else budget - len(piece)
            deltas.append(_call_delta(index, calls[index], piece, first=round_no == 0))
    return deltas


def _call_delta(index: int, call: ScriptedToolCall, arguments: str, *, first: bool) -> JSONObject:
    if not first:
        return {"index": index, "function": {"arguments": arguments}}
    return {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }
