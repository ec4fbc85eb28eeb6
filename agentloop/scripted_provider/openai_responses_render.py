"""OpenAI Responses wire format: a scripted turn as the real API would send it.

Pure functions, shapes after `openai.types.responses.Response` and the `ResponseStreamEvent`
union. Output items come in the order a reasoning model emits them: a `reasoning` item, one
assistant `message` (text and/or refusal parts), then one `function_call` item per call. Ids
derive from the script, turn and call id, so a retried request gets the very same items and an
echo can be checked without keeping state. `pause_turn` does not exist here and is ignored.
"""

from __future__ import annotations

from typing import Any

from agentloop.scripted_provider.rendering import (
    JSONObject,
    Reply,
    Stream,
    TurnOutput,
    argument_fragments,
    pieces,
    sse_frame,
)
from agentloop.scripted_provider.scripts import ScriptedToolCall, ScriptUsage


def response_id(output: TurnOutput) -> str:
    return f"resp_{output.script}_{output.index}"


def call_item_id(call: ScriptedToolCall) -> str:
    return f"fc_{call.id}"


def output_items(output: TurnOutput) -> list[JSONObject]:
    """The complete `output` items; the last one is `incomplete` when the response is."""
    turn = output.turn
    items: list[JSONObject] = []
    if turn.reasoning is not None:
        items.append(
            {
                "id": f"rs_{output.script}_{output.index}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": turn.reasoning}],
                "encrypted_content": output.opaque("encrypted_content"),
            }
        )
    content: list[JSONObject] = []
    if turn.text:
        content.append(
            {"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}
        )
    if turn.refusal:
        content.append({"type": "refusal", "refusal": turn.refusal})
    if content:
        items.append(
            {
                "id": f"msg_{output.script}_{output.index}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    for call in turn.tool_calls:
        items.append(
            {
                "id": call_item_id(call),
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments_text(),
                "status": "completed",
            }
        )
    if items and _status(output)[0] == "incomplete" and "status" in items[-1]:
        items[-1]["status"] = "incomplete"  # where the output stopped
    return items


def response_body(reply: Reply) -> JSONObject:
    """A non-streamed `response` object."""
    return _response(reply, complete=True)


def response_stream(reply: Reply) -> Stream:
    """The SSE events of a streamed response; `response.completed`/`.incomplete` completes it."""
    events = _Events()
    events.add("response.created", response=_response(reply, complete=False))
    events.add("response.in_progress", response=_response(reply, complete=False))
    items = output_items(reply.output)
    calls = [item for item in items if item["type"] == "function_call"]
    for index, item in enumerate(items[: len(items) - len(calls)]):
        if item["type"] == "reasoning":
            _reasoning_events(events, index, item)
        else:
            _message_events(events, index, item)
    fragments, cut = argument_fragments(reply.turn)
    first_call = len(items) - len(calls)
    for fragment in fragments:
        item, index = calls[fragment.call], first_call + fragment.call
        ids = {"item_id": item["id"], "output_index": index}
        if fragment.first:
            opened = {**item, "arguments": "", "status": "in_progress"}
            events.add("response.output_item.added", output_index=index, item=opened)
        events.add("response.function_call_arguments.delta", **ids, delta=fragment.text)
        if fragment.last:
            events.add("response.function_call_arguments.done", **ids, arguments=item["arguments"])
            events.add("response.output_item.done", output_index=index, item=item)
    if cut:
        return Stream(events.frames)
    final = _response(reply, complete=True)
    events.add(f"response.{final['status']}", response=final)
    return Stream(events.frames[:-1], events.frames[-1:])


class _Events:
    """Collects SSE frames, numbering them as the API does (`sequence_number` from 0)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def add(self, event_type: str, **fields: Any) -> None:
        data = {"type": event_type, "sequence_number": len(self.frames), **fields}
        self.frames.append(sse_frame(data, event=event_type))


def _reasoning_events(events: _Events, index: int, item: JSONObject) -> None:
    ids = {"item_id": item["id"], "output_index": index, "summary_index": 0}
    text = item["summary"][0]["text"]
    opened = {"id": item["id"], "type": "reasoning", "summary": []}
    events.add("response.output_item.added", output_index=index, item=opened)
    empty_part = {"type": "summary_text", "text": ""}
    events.add("response.reasoning_summary_part.added", **ids, part=empty_part)
    for piece in pieces(text):
        events.add("response.reasoning_summary_text.delta", **ids, delta=piece)
    events.add("response.reasoning_summary_text.done", **ids, text=text)
    events.add("response.reasoning_summary_part.done", **ids, part=item["summary"][0])
    events.add("response.output_item.done", output_index=index, item=item)


def _message_events(events: _Events, index: int, item: JSONObject) -> None:
    opened = {**item, "status": "in_progress", "content": []}
    events.add("response.output_item.added", output_index=index, item=opened)
    for content_index, part in enumerate(item["content"]):
        ids = {"item_id": item["id"], "output_index": index, "content_index": content_index}
        if part["type"] == "output_text":
            empty: JSONObject = {**part, "text": ""}
            events.add("response.content_part.added", **ids, part=empty)
            for piece in pieces(part["text"]):
                events.add("response.output_text.delta", **ids, delta=piece, logprobs=[])
            events.add("response.output_text.done", **ids, text=part["text"], logprobs=[])
        else:
            events.add("response.content_part.added", **ids, part={**part, "refusal": ""})
            for piece in pieces(part["refusal"]):
                events.add("response.refusal.delta", **ids, delta=piece)
            events.add("response.refusal.done", **ids, refusal=part["refusal"])
        events.add("response.content_part.done", **ids, part=part)
    events.add("response.output_item.done", output_index=index, item=item)


def _status(output: TurnOutput) -> tuple[str, JSONObject | None]:
    """`status` and `incomplete_details` for the turn's finish reason."""
    match output.turn.effective_finish_reason():
        case "length":
            return "incomplete", {"reason": "max_output_tokens"}
        case "content_filter":
            return "incomplete", {"reason": "content_filter"}
        case _:
            return "completed", None


def _response(reply: Reply, *, complete: bool) -> JSONObject:
    """The `response` object; while in progress (stream start) without output or usage."""
    status, incomplete = _status(reply.output) if complete else ("in_progress", None)
    return {
        "id": response_id(reply.output),
        "object": "response",
        "created_at": reply.created,
        "status": status,
        "background": False,
        "completed_at": reply.created if status == "completed" else None,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": reply.output.script,
        "output": output_items(reply.output) if complete else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _usage(reply.usage) if complete else None,
        "user": None,
        "metadata": {},
    }


def _usage(usage: ScriptUsage) -> JSONObject:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }
