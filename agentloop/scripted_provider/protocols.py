"""The wire protocols the provider speaks: for each, its route, its parser and its renderer.

What the provider sent at a turn is its own rendering read back by its own parser
(`sent_parts`), so echo checks compare like with like in every protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentloop.scripted_provider import (
    anthropic_parse,
    anthropic_render,
    openai_chat_parse,
    openai_chat_render,
    openai_errors,
    openai_responses_parse,
    openai_responses_render,
)
from agentloop.scripted_provider.conversation import Conversation, Part
from agentloop.scripted_provider.rendering import (
    JSONObject,
    Rejection,
    Reply,
    Stream,
    TurnOutput,
)

ProtocolName = Literal["openai-chat", "openai-responses", "anthropic"]


@dataclass(frozen=True)
class WireProtocol:
    name: ProtocolName
    path: str
    """The route, relative to the server root."""
    request_id_header: str
    pauses: bool
    """Whether this API has `pause_turn` (elsewhere the scripted pause is ignored)."""
    parse: Callable[[Mapping[str, Any]], Conversation]
    sent_parts: Callable[[TurnOutput], list[Part]]
    render_body: Callable[[Reply], JSONObject]
    render_stream: Callable[[Reply], Stream]
    render_error: Callable[[Rejection], JSONObject]


def _chat_sent(output: TurnOutput) -> list[Part]:
    message = openai_chat_render.assistant_message(output)
    return openai_chat_parse.message_parts(message, "sent")[0]


def _responses_sent(output: TurnOutput) -> list[Part]:
    return openai_responses_parse.item_parts(openai_responses_render.output_items(output))[0]


def _anthropic_sent(output: TurnOutput) -> list[Part]:
    blocks = anthropic_render.content_blocks(output)
    return anthropic_parse.content_parts(blocks, "sent")[0]


OPENAI_CHAT = WireProtocol(
    name="openai-chat",
    path="/v1/chat/completions",
    request_id_header=openai_errors.REQUEST_ID_HEADER,
    pauses=False,
    parse=openai_chat_parse.parse_request,
    sent_parts=_chat_sent,
    render_body=openai_chat_render.completion_body,
    render_stream=openai_chat_render.completion_stream,
    render_error=openai_errors.error_body,
)

OPENAI_RESPONSES = WireProtocol(
    name="openai-responses",
    path="/v1/responses",
    request_id_header=openai_errors.REQUEST_ID_HEADER,
    pauses=False,
    parse=openai_responses_parse.parse_request,
    sent_parts=_responses_sent,
    render_body=openai_responses_render.response_body,
    render_stream=openai_responses_render.response_stream,
    render_error=openai_errors.error_body,
)

ANTHROPIC = WireProtocol(
    name="anthropic",
    path="/v1/messages",
    request_id_header=anthropic_render.REQUEST_ID_HEADER,
    pauses=True,
    parse=anthropic_parse.parse_request,
    sent_parts=_anthropic_sent,
    render_body=anthropic_render.message_body,
    render_stream=anthropic_render.message_stream,
    render_error=anthropic_render.error_body,
)

PROTOCOLS: tuple[WireProtocol, ...] = (OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC)
