"""Wire exactness: every body and SSE event the provider sends validates, strictly, against the
installed SDKs' own pydantic types (the clients themselves parse leniently, so this is the check
that a required field is not missing). Raw HTTP, so every frame is seen as sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from anthropic.types import Message, RawMessageStreamEvent, ToolUseBlock
from anthropic.types.shared import ErrorResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from agentloop.scripted_provider import (
    ScriptedError,
    ScriptedProvider,
    ScriptedToolCall,
    ScriptTurn,
)
from agentloop.testing.turns import call as scripted_call
from tests.live import scripted

CALLS = [
    scripted_call("lookup", "call_a", q="first"),
    scripted_call("lookup", "call_b", q="second"),
]
RICH = scripted(
    "rich", ScriptTurn(reasoning="Plan.", text="Looking.", refusal="Not that.", tool_calls=CALLS)
)
TRUNCATED = scripted(
    "truncated",
    ScriptTurn(
        text="Let me",
        tool_calls=[ScriptedToolCall(id="call_t", name="lookup", arguments='{"q": "fir')],
        finish_reason="length",
    ),
)
CUT = scripted(
    "cut", ScriptTurn(text="Looking it up.", tool_calls=CALLS, cut_stream_after_events=5)
)
FAILING = scripted(
    "failing",
    ScriptTurn(
        text="ok", errors=[ScriptedError(status=429, retry_after="1", retry_after_ms="1000")]
    ),
)

USER = {"role": "user", "content": "hi"}
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-chat": (
        "/v1/chat/completions",
        {
            "messages": [USER],
            "tools": [{"type": "function", "function": {"name": "lookup"}}],
            "stream_options": {"include_usage": True},
        },
    ),
    "openai-responses": (
        "/v1/responses",
        {"input": [USER], "tools": [{"type": "function", "name": "lookup", "parameters": {}}]},
    ),
    "anthropic": (
        "/v1/messages",
        {
            "messages": [USER],
            "max_tokens": 256,
            "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
        },
    ),
}
BODY_TYPES: dict[str, TypeAdapter[Any]] = {
    "openai-chat": TypeAdapter(ChatCompletion),
    "openai-responses": TypeAdapter(Response),
    "anthropic": TypeAdapter(Message),
}
EVENT_TYPES: dict[str, TypeAdapter[Any]] = {
    "openai-chat": TypeAdapter(ChatCompletionChunk),
    "openai-responses": TypeAdapter(ResponseStreamEvent),
    "anthropic": TypeAdapter(RawMessageStreamEvent),
}
COMPLETIONS = {"[DONE]", "response.completed", "response.incomplete", "message_stop"}


@pytest.fixture
async def provider() -> AsyncIterator[ScriptedProvider]:
    provider = ScriptedProvider([RICH, TRUNCATED, CUT, FAILING], builtin=False)
    await provider.start(host="127.0.0.1", port=0)
    yield provider
    await provider.stop()


async def post(
    provider: ScriptedProvider, protocol: str, model: str, *, stream: bool
) -> aiohttp.ClientResponse:
    path, body = REQUESTS[protocol]
    async with aiohttp.ClientSession() as http:
        response = await http.post(
            provider.anthropic_base_url + path, json={**body, "model": model, "stream": stream}
        )
        await response.read()
        return response


def completes(frame: tuple[str | None, str]) -> bool:
    """Whether the frame says the answer is complete, in any of the three protocols."""
    name, data = frame
    return (name or data) in COMPLETIONS


def frames(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) of each SSE frame."""
    out: list[tuple[str | None, str]] = []
    for raw in text.split("\n\n"):
        if not raw:
            continue
        fields = dict(line.split(": ", 1) for line in raw.split("\n"))
        out.append((fields.get("event"), fields["data"]))
    return out


def validate_events(protocol: str, events: list[tuple[str | None, str]]) -> None:
    for name, data in events:
        if data == "[DONE]":
            continue
        payload = json.loads(data)
        if protocol != "openai-chat":
            assert name == payload["type"]  # `event:` and the JSON agree, as the API's do
        if payload.get("type") != "ping":  # not in the SDK union; the client skips it
            EVENT_TYPES[protocol].validate_python(payload)


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_json_bodies_validate_against_the_sdk_types(
    provider: ScriptedProvider, protocol: str
) -> None:
    response = await post(provider, protocol, "rich", stream=False)
    body = await response.json()

    assert response.status == 200, body
    BODY_TYPES[protocol].validate_python(body, strict=False)
    header = "request-id" if protocol == "anthropic" else "x-request-id"
    assert response.headers[header].startswith("req_")


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_truncated_turns_validate_too(provider: ScriptedProvider, protocol: str) -> None:
    body = await (await post(provider, protocol, "truncated", stream=False)).json()

    if protocol == "openai-chat":
        assert ChatCompletion.model_validate(body).choices[0].finish_reason == "length"
    elif protocol == "openai-responses":
        response = Response.model_validate(body)
        assert response.incomplete_details is not None
        assert (response.status, response.incomplete_details.reason) == (
            "incomplete",
            "max_output_tokens",
        )
    else:
        message = Message.model_validate(body)
        block = message.content[-1]
        # Broken tool input cannot be an object: the API sends `input` as one, always.
        assert isinstance(block, ToolUseBlock) and block.input == {}
        assert message.stop_reason == "max_tokens"
    validate_events(
        protocol, frames(await (await post(provider, protocol, "truncated", stream=True)).text())
    )


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_every_sse_event_validates_and_names_its_type(
    provider: ScriptedProvider, protocol: str
) -> None:
    response = await post(provider, protocol, "rich", stream=True)
    events = frames(await response.text())

    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert [completes(frame) for frame in events] == [False] * (len(events) - 1) + [True]
    validate_events(protocol, events)
    if protocol == "openai-responses":
        numbers = [json.loads(data)["sequence_number"] for _, data in events]
        assert numbers == list(range(len(events)))


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_cut_after_events_sends_exactly_k_frames_and_no_completion(
    provider: ScriptedProvider, protocol: str
) -> None:
    text = await (await post(provider, protocol, "cut", stream=True)).text()

    assert len(frames(text)) == 5
    assert not any(completes(frame) for frame in frames(text))


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_scripted_errors_in_each_error_shape(
    provider: ScriptedProvider, protocol: str
) -> None:
    response = await post(provider, protocol, "failing", stream=True)
    body = await response.json()

    assert response.status == 429
    assert (response.headers["retry-after"], response.headers["retry-after-ms"]) == ("1", "1000")
    if protocol == "anthropic":
        assert ErrorResponse.model_validate(body).error.type == "rate_limit_error"
    else:
        assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["message"]
