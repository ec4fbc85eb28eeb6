"""The scripted provider over Anthropic Messages, driven by the official `anthropic` client
(raw event stream, no mocks)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from anthropic import AsyncAnthropic, BadRequestError, Omit, omit
from anthropic.types import Message, MessageParam, RawMessageStreamEvent, ToolParam

from agentloop.scripted_provider import (
    ScriptedProvider,
    ScriptTurn,
    ScriptUsage,
)
from agentloop.testing.turns import call as scripted_call
from tests.live import scripted

Msg = dict[str, Any]
Block = dict[str, Any]

TRAIN_ARGS = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER_ARGS = {"city": "Shanghai", "date": "2026-12-01"}
CALLS = [
    scripted_call("get_train_status", "call_train", **TRAIN_ARGS),
    scripted_call("get_weather", "call_weather", **WEATHER_ARGS),
]
GREETING = scripted("greeting", "Hello over Messages (°C ok).")
THINKING = scripted(
    "thinking",
    ScriptTurn(
        reasoning="Two independent reads: ask both at once.",
        text="Checking both.",
        tool_calls=CALLS,
        expect_tool_results={"call_train": "G1234", "call_weather": "Shanghai"},
    ),
    "{{call_train.status}}, {{call_weather.condition}}",
)
PAUSED = scripted(
    "paused",
    ScriptTurn(text="Let me look that up.", tool_calls=CALLS, pause_turn=True),
    "done",
)
ENDINGS = scripted(
    "endings",
    ScriptTurn(refusal="I can't help with that."),
    ScriptTurn(text="cut sho", finish_reason="length"),
    ScriptTurn(text="filtered", finish_reason="content_filter"),
    ScriptTurn(text="Stopped at", stop_sequence="END"),
)
USAGE = scripted(
    "usage", ScriptTurn(text="ok", usage=ScriptUsage(prompt_tokens=120, completion_tokens=7))
)

USER: Msg = {"role": "user", "content": "Is train G1234 late, and how is the weather?"}
TOOLS: list[Any] = [
    {"name": name, "description": f"{name} (test)", "input_schema": {"type": "object"}}
    for name in ("get_train_status", "get_weather")
]
TRAIN_RESULT: Block = {
    "type": "tool_result",
    "tool_use_id": "call_train",
    "content": json.dumps({"train_number": "G1234", "status": "delayed"}),
}
# Content as text blocks, and flagged as an error: both allowed by the API.
WEATHER_RESULT: Block = {
    "type": "tool_result",
    "tool_use_id": "call_weather",
    "content": [{"type": "text", "text": json.dumps({"city": "Shanghai", "condition": "rain"})}],
    "is_error": True,
}


@pytest.fixture
async def provider() -> AsyncIterator[ScriptedProvider]:
    provider = ScriptedProvider([GREETING, THINKING, PAUSED, ENDINGS, USAGE])
    await provider.start(host="127.0.0.1", port=0)
    yield provider
    await provider.stop()


@pytest.fixture
async def client(provider: ScriptedProvider) -> AsyncIterator[AsyncAnthropic]:
    async with AsyncAnthropic(
        base_url=provider.anthropic_base_url, api_key="scripted", max_retries=0
    ) as client:
        yield client


def _wire(messages: list[Msg]) -> list[MessageParam]:
    # Tests build messages as plain dicts, broken ones included, exactly as sent on the wire.
    return cast("list[MessageParam]", messages)


async def create(
    client: AsyncAnthropic, model: str, messages: list[Msg], *, system: str | Omit = omit
) -> Message:
    return await client.messages.create(
        model=model,
        max_tokens=1024,
        messages=_wire(messages),
        tools=cast("list[ToolParam]", TOOLS),
        system=system,
    )


async def stream(
    client: AsyncAnthropic, model: str, messages: list[Msg]
) -> list[RawMessageStreamEvent]:
    events = await client.messages.create(
        model=model,
        max_tokens=1024,
        messages=_wire(messages),
        tools=cast("list[ToolParam]", TOOLS),
        stream=True,
    )
    return [event async for event in events]


@dataclass
class Assembled:
    """A streamed message put back together by block `index`, as a client must."""

    blocks: dict[int, Block] = field(default_factory=dict)
    json_parts: dict[int, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    """`start:N`, `delta:N`, `stop:N` in arrival order."""
    stop_reason: str | None = None
    stop_sequence: str | None = None
    output_tokens: int | None = None

    def content(self) -> list[Block]:
        blocks = [dict(self.blocks[i]) for i in sorted(self.blocks)]
        for i, block in enumerate(blocks):
            if block["type"] == "tool_use":
                block["input"] = json.loads(self.json_parts.get(i) or "{}")
        return blocks


def assemble(events: list[RawMessageStreamEvent]) -> Assembled:
    out = Assembled()
    for event in events:
        if event.type == "content_block_start":
            out.blocks[event.index] = event.content_block.model_dump(exclude_none=True)
            out.order.append(f"start:{event.index}")
        elif event.type == "content_block_delta":
            out.order.append(f"delta:{event.index}")
            block, delta = out.blocks[event.index], event.delta
            if delta.type == "text_delta":
                block["text"] += delta.text
            elif delta.type == "thinking_delta":
                block["thinking"] += delta.thinking
            elif delta.type == "signature_delta":
                block["signature"] = delta.signature
            elif delta.type == "input_json_delta":
                out.json_parts[event.index] = (
                    out.json_parts.get(event.index, "") + delta.partial_json
                )
        elif event.type == "content_block_stop":
            out.order.append(f"stop:{event.index}")
        elif event.type == "message_delta":
            out.stop_reason, out.stop_sequence = event.delta.stop_reason, event.delta.stop_sequence
            out.output_tokens = event.usage.output_tokens
    return out


def error_message(error: BadRequestError) -> str:
    # The client's own `message` is a repr of the whole body; the API's message is inside.
    body = cast("dict[str, Any]", error.body)
    return str(body["error"]["message"])


def echo(message: Message) -> Msg:
    return {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in message.content],
    }


def results(*blocks: Block) -> Msg:
    return {"role": "user", "content": list(blocks)}


async def test_final_text_is_the_same_streamed_and_not(client: AsyncAnthropic) -> None:
    message = await create(client, "greeting", [USER])
    events = await stream(client, "greeting", [USER])
    streamed = assemble(events)

    assert (message.id, message.stop_reason, message.stop_sequence) == (
        "msg_greeting_0",
        "end_turn",
        None,
    )
    assert message._request_id is not None and message._request_id.startswith("req_")
    assert [b.model_dump(exclude_none=True) for b in message.content] == streamed.content()
    assert message.content[0].type == "text" and message.content[0].text == GREETING.turns[0].text
    assert events[0].type == "message_start" and events[0].message.content == []
    assert [e.type for e in events[-2:]] == ["message_delta", "message_stop"]
    assert streamed.stop_reason == "end_turn"
    assert sum(1 for e in events if e.type == "content_block_delta") > 3


async def test_parallel_tool_use_streams_interleaved_and_reassembles(
    client: AsyncAnthropic,
) -> None:
    message = await create(client, "thinking", [USER])
    streamed = assemble(await stream(client, "thinking", [USER]))

    assert streamed.content() == [b.model_dump(exclude_none=True) for b in message.content]
    assert [b["type"] for b in streamed.content()] == ["thinking", "text", "tool_use", "tool_use"]
    tool_events = [e for e in streamed.order if e.endswith((":2", ":3"))]
    # Both blocks are open before their deltas interleave; each closes after its last delta.
    assert tool_events[:6] == ["start:2", "delta:2", "start:3", "delta:3", "delta:2", "delta:3"]
    assert streamed.blocks[2]["input"] == {} and streamed.content()[2]["input"] == TRAIN_ARGS
    assert streamed.json_parts[3] == json.dumps(WEATHER_ARGS, separators=(",", ":"))
    assert streamed.stop_reason == message.stop_reason == "tool_use"


async def test_round_trip_with_thinking_has_no_violations(
    client: AsyncAnthropic, provider: ScriptedProvider
) -> None:
    first = await create(client, "thinking", [USER], system="You are a travel assistant.")
    thinking = first.content[0]
    assert thinking.type == "thinking" and thinking.signature.startswith("scripted:")
    # Results in any order among themselves, as long as they open the next user message.
    follow_up = results(WEATHER_RESULT, TRAIN_RESULT, {"type": "text", "text": "Thanks."})
    second = await create(client, "thinking", [USER, echo(first), follow_up])

    assert second.content[0].type == "text" and second.content[0].text == "delayed, rain"
    assert provider.violations == []
    assert [(r["protocol"], r["turn"]) for r in provider.requests] == [
        ("anthropic", 0),
        ("anthropic", 1),
    ]


def _system_role(history: list[Msg]) -> list[Msg]:
    return [
        {"role": "system", "content": "Be brief."},
        *history,
        results(TRAIN_RESULT, WEATHER_RESULT),
    ]


def _text_first(history: list[Msg]) -> list[Msg]:
    return [*history, results({"type": "text", "text": "Here:"}, TRAIN_RESULT, WEATHER_RESULT)]


def _not_alternating(history: list[Msg]) -> list[Msg]:
    return [USER, *history, results(TRAIN_RESULT, WEATHER_RESULT)]


def _missing(history: list[Msg]) -> list[Msg]:
    return [*history, results(TRAIN_RESULT)]


def _unknown_id(history: list[Msg]) -> list[Msg]:
    return [*history, results(TRAIN_RESULT, {**WEATHER_RESULT, "tool_use_id": "call_bogus"})]


def _duplicate(history: list[Msg]) -> list[Msg]:
    return [*history, results(TRAIN_RESULT, WEATHER_RESULT, TRAIN_RESULT)]


def _edit_blocks(history: list[Msg], edit: Callable[[list[Block]], list[Block]]) -> list[Msg]:
    user, assistant = history
    return [
        user,
        {**assistant, "content": edit(assistant["content"])},
        results(TRAIN_RESULT, WEATHER_RESULT),
    ]


def _thinking_dropped(history: list[Msg]) -> list[Msg]:
    return _edit_blocks(history, lambda blocks: [b for b in blocks if b["type"] != "thinking"])


def _signature_changed(history: list[Msg]) -> list[Msg]:
    return _edit_blocks(
        history,
        lambda blocks: [
            {**b, "signature": "forged"} if b["type"] == "thinking" else b for b in blocks
        ],
    )


def _input_changed(history: list[Msg]) -> list[Msg]:
    return _edit_blocks(
        history,
        lambda blocks: [
            {**b, "input": {**b["input"], "city": "Beijing"}}
            if b.get("id") == "call_weather"
            else b
            for b in blocks
        ],
    )


def _id_anthropic_refuses(history: list[Msg]) -> list[Msg]:
    # Another provider's call id, carried over unchanged by a fallback.
    return _edit_blocks(
        history,
        lambda blocks: [
            {**b, "id": "functions.get_weather:0"} if b.get("id") == "call_weather" else b
            for b in blocks
        ],
    )


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            _id_anthropic_refuses,
            "(tool_use) has id 'functions.get_weather:0', which does not match ^[a-zA-Z0-9_-]+$",
        ),
        (
            _system_role,
            "messages[0] has role 'system': system instructions go only in the top-level",
        ),
        (_text_first, "messages[2].content[1] is a tool_result after a text block"),
        (_not_alternating, "messages[1] (user) is out of turn: roles must alternate"),
        (_missing, "no tool result for call id(s) ['call_weather'] of messages[1]"),
        (
            _unknown_id,
            "messages[2].content[1] answers tool call id 'call_bogus', which messages[1]",
        ),
        (_duplicate, "messages[2].content[2] is a duplicate tool result for call id 'call_train'"),
        (_thinking_dropped, "lacks the thinking block the provider sent"),
        (_signature_changed, "thinking block has signature 'forged', the provider sent 'scripted:"),
        (_input_changed, "tool call 'call_weather' has arguments"),
    ],
)
async def test_protocol_violations_are_rejected(
    client: AsyncAnthropic,
    provider: ScriptedProvider,
    build: Callable[[list[Msg]], list[Msg]],
    expected: str,
) -> None:
    messages = build([USER, echo(await create(client, "thinking", [USER]))])
    with pytest.raises(BadRequestError) as error:
        await create(client, "thinking", messages)

    assert error.value.type == "invalid_request_error"
    assert expected in error_message(error.value)
    assert any(
        expected in v["message"] and v["protocol"] == "anthropic" for v in provider.violations
    ), provider.violations


async def test_openai_shaped_tools_are_rejected(client: AsyncAnthropic) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    with pytest.raises(BadRequestError) as error:
        await client.messages.create(
            model="greeting", max_tokens=64, messages=_wire([USER]), tools=cast("Any", tools)
        )

    assert "tools[0] has the OpenAI shape" in error_message(error.value)


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
async def test_pause_turn_is_continued_by_echoing_the_paused_content(
    client: AsyncAnthropic, provider: ScriptedProvider, streamed: bool
) -> None:
    async def ask(messages: list[Msg]) -> tuple[list[Block], str | None]:
        if streamed:
            assembled = assemble(await stream(client, "paused", messages))
            return assembled.content(), assembled.stop_reason
        message = await create(client, "paused", messages)
        return [b.model_dump(exclude_none=True) for b in message.content], message.stop_reason

    paused, reason = await ask([USER])
    assert (paused, reason) == ([{"type": "text", "text": "Let me look that up."}], "pause_turn")
    rest, reason = await ask([USER, {"role": "assistant", "content": paused}])
    assert reason == "tool_use"
    assert [(b["type"], b["id"], b["input"]) for b in rest] == [
        ("tool_use", "call_train", TRAIN_ARGS),
        ("tool_use", "call_weather", WEATHER_ARGS),
    ]
    # The client joins both parts into one assistant turn before sending results.
    whole = {"role": "assistant", "content": [*paused, *rest]}
    final, reason = await ask([USER, whole, results(TRAIN_RESULT, WEATHER_RESULT)])

    assert (final, reason) == ([{"type": "text", "text": "done"}], "end_turn")
    assert provider.violations == []
    assert [r["turn"] for r in provider.requests] == [0, 0, 1]


async def test_trailing_assistant_message_must_be_the_paused_content(
    client: AsyncAnthropic, provider: ScriptedProvider
) -> None:
    with pytest.raises(BadRequestError) as error:
        await create(client, "paused", [USER, {"role": "assistant", "content": "Let me see."}])
    expected = "has text ['Let me see.'], the provider sent ['Let me look that up.']"
    assert expected in error_message(error.value)

    with pytest.raises(BadRequestError) as error:
        await create(client, "greeting", [USER, {"role": "assistant", "content": "Hi"}])
    assert "turn 0 of the script did not pause" in error_message(error.value)


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
async def test_refusal_length_filter_and_stop_sequence_map_to_stop_reasons(
    client: AsyncAnthropic, streamed: bool
) -> None:
    seen: list[tuple[str | None, str | None, list[Block]]] = []
    history: list[Msg] = [USER]
    for _ in ENDINGS.turns:
        if streamed:
            assembled = assemble(await stream(client, "endings", history))
            content = assembled.content()
            seen.append((assembled.stop_reason, assembled.stop_sequence, content))
        else:
            message = await create(client, "endings", history)
            content = [b.model_dump(exclude_none=True) for b in message.content]
            seen.append((message.stop_reason, message.stop_sequence, content))
        history = [*history, {"role": "assistant", "content": content}, USER]

    assert seen == [
        ("refusal", None, [{"type": "text", "text": "I can't help with that."}]),
        ("max_tokens", None, [{"type": "text", "text": "cut sho"}]),
        ("refusal", None, [{"type": "text", "text": "filtered"}]),
        ("stop_sequence", "END", [{"type": "text", "text": "Stopped at"}]),
    ]


async def test_usage_in_anthropic_shape(client: AsyncAnthropic) -> None:
    message = await create(client, "usage", [USER])
    events = await stream(client, "usage", [USER])

    assert (message.usage.input_tokens, message.usage.output_tokens) == (120, 7)
    start = events[0]
    assert start.type == "message_start" and start.message.usage.input_tokens == 120
    assert assemble(events).output_tokens == 7


async def test_the_token_counter_counts_as_the_turns_usage_and_is_logged(
    client: AsyncAnthropic, provider: ScriptedProvider
) -> None:
    hello: list[MessageParam] = [{"role": "user", "content": "Hello?"}]
    scripted = await client.messages.count_tokens(model="usage", messages=hello)
    estimated = await client.messages.count_tokens(model="greeting", messages=hello)
    answer = await client.messages.create(model="greeting", max_tokens=100, messages=hello)
    assert scripted.input_tokens == 120
    assert estimated.input_tokens == answer.usage.input_tokens
    assert [(c["script"], c["input_tokens"]) for c in provider.token_counts] == [
        ("usage", 120),
        ("greeting", estimated.input_tokens),
    ]
    assert len(provider.requests) == 1  # counting is not a model call
