"""What the two OpenAI adapters share: one call through the openai client, and its errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import openai

from agentloop.adapters._shared import SdkErrors, StreamAssembler, ignore_text, map_sdk_errors
from agentloop.adapters.base import TextSink
from agentloop.events import ModelOutput

OPENAI_ERRORS = SdkErrors.of(openai, base=openai.OpenAIError)


@dataclass(frozen=True)
class OpenAIEndpoint:
    """Where an OpenAI API lives and what the SDK parses its answers into."""

    path: str
    response_type: type[Any]


_AUTHENTICATED: Any = {"security": {"bearer_auth": True}}
"""Request options asking the client for its usual `Authorization` header."""

_RAW_EVENTS = openai.AsyncStream[object]
"""Streamed events as the JSON objects they are: the assemblers read dicts, and building the
SDK's model for every event (then dumping it again) cost ~70 µs an event, a token each."""


async def complete_openai(
    client: openai.AsyncOpenAI,
    endpoint: OpenAIEndpoint,
    body: dict[str, Any],
    parse: Callable[[dict[str, Any], str], ModelOutput],
    assembler: Callable[[str, TextSink], StreamAssembler],
    on_text: TextSink | None = None,
) -> ModelOutput:
    """One call through the openai client, streamed (raw event iterator, never the SDK's
    stream helper) or not, with its request id and errors mapped. Shared by the OpenAI
    adapters, which differ only in the endpoint, the parser and the assembler.

    The body goes out as built (`client.post`), not through `create(**body)`: the resource
    method walks the whole conversation to transform it on every call (7 ms for Chat, 28 ms
    for Responses at 20 turns, docs/concepts/design.md §6), and `build_request` already wrote
    it on the wire's terms."""
    with map_sdk_errors(OPENAI_ERRORS):
        if not body["stream"]:
            response = await client.post(
                endpoint.path, cast_to=endpoint.response_type, body=body, options=_AUTHENTICATED
            )
            return parse(response.model_dump(), response._request_id or "")
        stream = await client.post(
            endpoint.path,
            cast_to=endpoint.response_type,
            body=body,
            options=_AUTHENTICATED,
            stream=True,
            stream_cls=_RAW_EVENTS,
        )
        request_id = stream.response.headers.get("x-request-id") or ""
        assembling = assembler(request_id, on_text or ignore_text)
        async with stream:
            async for event in stream:
                assembling.feed(cast(dict[str, Any], event))
        return assembling.finish()


COUNTED_FIELDS = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning"}
)
"""What a Responses request body shares with a request to the input-token counter."""


async def count_openai_input(client: openai.AsyncOpenAI, body: dict[str, Any]) -> int:
    """The input tokens of a Responses request `body`, as OpenAI's counter says (used for
    Chat Completions too: the same conversation, in the Responses API's shape)."""
    with map_sdk_errors(OPENAI_ERRORS):
        counted = await client.responses.input_tokens.count(
            **{k: v for k, v in body.items() if k in COUNTED_FIELDS}
        )
    return counted.input_tokens
