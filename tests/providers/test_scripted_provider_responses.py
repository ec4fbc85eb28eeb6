"""The scripted provider over OpenAI Responses, driven by the official `openai` client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from openai import AsyncOpenAI, BadRequestError, Omit, omit
from openai.types.responses import Response, ResponseInputParam, ResponseStreamEvent

from agentloop.scripted_provider import (
    ScriptedProvider,
    ScriptTurn,
    ScriptUsage,
)
from agentloop.testing.turns import call as scripted_call
from tests.live import scripted

Item = dict[str, Any]

TRAIN_ARGS = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER_ARGS = {"city": "Shanghai", "date": "2026-12-01"}
TRAIN_RESULT = {"train_number": "G1234", "status": "delayed", "delay_minutes": 15}
WEATHER_RESULT = {"city": "Shanghai", "condition": "light rain", "high_c": 12}
GREETING = scripted("greeting", "Hello over Responses (°C ok).")
THINKING = scripted(
    "thinking",
    ScriptTurn(
        reasoning="Two independent reads: ask both at once.",
        text="Checking both.",
        tool_calls=[
            scripted_call("get_train_status", "call_train", **TRAIN_ARGS),
            scripted_call("get_weather", "call_weather", **WEATHER_ARGS),
        ],
        expect_tool_results={"call_train": "G1234", "call_weather": "Shanghai"},
    ),
    "{{call_train.status}}, {{call_weather.condition}}",
)
ENDINGS = scripted(
    "endings",
    ScriptTurn(refusal="I can't help with that."),
    ScriptTurn(text="cut sho", finish_reason="length"),
    ScriptTurn(text="filtered", finish_reason="content_filter"),
)
USAGE = scripted(
    "usage", ScriptTurn(text="ok", usage=ScriptUsage(prompt_tokens=120, completion_tokens=7))
)

USER: Item = {"role": "user", "content": "Is train G1234 late, and how is the weather?"}
TOOLS: list[Any] = [
    {"type": "function", "name": name, "parameters": {"type": "object"}}
    for name in ("get_train_status", "get_weather")
]


@pytest.fixture
async def provider() -> AsyncIterator[ScriptedProvider]:
    provider = ScriptedProvider([GREETING, THINKING, ENDINGS, USAGE])
    await provider.start(host="127.0.0.1", port=0)
    yield provider
    await provider.stop()


@pytest.fixture
async def client(provider: ScriptedProvider) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=provider.base_url, api_key="scripted", max_retries=0) as client:
        yield client


async def create(
    client: AsyncOpenAI,
    model: str,
    items: list[Item],
    *,
    tools: list[Any] = TOOLS,
    instructions: str | Omit = omit,
) -> Response:
    return await client.responses.create(
        model=model,
        input=cast("ResponseInputParam", items),
        tools=tools,
        instructions=instructions,
    )


async def stream(client: AsyncOpenAI, model: str, items: list[Item]) -> list[ResponseStreamEvent]:
    events = await client.responses.create(
        model=model, input=cast("ResponseInputParam", items), tools=TOOLS, stream=True
    )
    return [event async for event in events]


@dataclass
class Assembled:
    """A streamed response put back together by `output_index` / `item_id`, as a client must."""

    text: str = ""
    arguments: dict[str, str] = field(default_factory=dict)
    delta_items: list[str] = field(default_factory=list)
    final: Response | None = None


def assemble(events: list[ResponseStreamEvent]) -> Assembled:
    out = Assembled()
    call_ids: dict[str, str] = {}
    for event in events:
        if event.type == "response.output_item.added" and event.item.type == "function_call":
            assert event.item.id is not None
            call_ids[event.item.id] = event.item.call_id
        elif event.type == "response.output_text.delta":
            out.text += event.delta
        elif event.type == "response.function_call_arguments.delta":
            out.delta_items.append(event.item_id)
            key = call_ids[event.item_id]
            out.arguments[key] = out.arguments.get(key, "") + event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            out.final = event.response
    return out


def echoed(response: Response) -> list[Item]:
    """The output items sent back as input, as a client keeping the conversation does."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def output(call_id: str, result: dict[str, Any]) -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": json.dumps(result)}


TRAIN = output("call_train", TRAIN_RESULT)
WEATHER = output("call_weather", WEATHER_RESULT)


async def test_final_text_is_the_same_streamed_and_not(client: AsyncOpenAI) -> None:
    response = await create(client, "greeting", [USER])
    events = await stream(client, "greeting", [USER])
    streamed = assemble(events)

    assert (response.id, response.object, response.status) == (
        "resp_greeting_0",
        "response",
        "completed",
    )
    assert response.output_text == GREETING.turns[0].text
    assert response._request_id is not None and response._request_id.startswith("req_")
    assert streamed.text == response.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.completed"
    assert streamed.final is not None and streamed.final.output_text == response.output_text
    assert sum(1 for e in events if e.type == "response.output_text.delta") > 3


async def test_parallel_calls_stream_interleaved_and_reassemble(client: AsyncOpenAI) -> None:
    response = await create(client, "thinking", [USER])
    streamed = assemble(await stream(client, "thinking", [USER]))

    calls = {item.call_id: item for item in response.output if item.type == "function_call"}
    assert {k: c.id for k, c in calls.items()} == {
        "call_train": "fc_call_train",
        "call_weather": "fc_call_weather",
    }
    assert streamed.delta_items[:4] == ["fc_call_train", "fc_call_weather"] * 2
    assert streamed.arguments == {k: c.arguments for k, c in calls.items()}
    assert json.loads(streamed.arguments["call_train"]) == TRAIN_ARGS
    assert streamed.final is not None
    assert [i.type for i in streamed.final.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]


async def test_round_trip_with_reasoning_has_no_violations(
    client: AsyncOpenAI, provider: ScriptedProvider
) -> None:
    first = await create(client, "thinking", [USER], instructions="You are a travel assistant.")
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.id == "rs_thinking_0"
    assert reasoning.encrypted_content and reasoning.summary[0].text.startswith("Two independent")
    developer: Item = {"role": "developer", "content": "Be brief."}
    # Outputs may come back in any order, each under its own call_id.
    items = [developer, USER, *echoed(first), WEATHER, TRAIN]
    second = await create(client, "thinking", items)

    assert second.output_text == "delayed, light rain"
    assert provider.violations == []
    assert [(r["protocol"], r["turn"]) for r in provider.requests] == [
        ("openai-responses", 0),
        ("openai-responses", 1),
    ]


def _missing(items: list[Item]) -> list[Item]:
    return [*items, TRAIN]


def _unknown_id(items: list[Item]) -> list[Item]:
    return [*items, TRAIN, {**WEATHER, "call_id": "call_bogus"}]


def _duplicate(items: list[Item]) -> list[Item]:
    return [*items, TRAIN, WEATHER, TRAIN]


def _output_before_call(items: list[Item]) -> list[Item]:
    return [USER, TRAIN, *items[1:], WEATHER]


def _changed_item_id(items: list[Item]) -> list[Item]:
    return [{**i, "id": "fc_other"} if i.get("id") == "fc_call_train" else i for i in items] + [
        TRAIN,
        WEATHER,
    ]


def _reasoning_dropped(items: list[Item]) -> list[Item]:
    return [i for i in items if i.get("type") != "reasoning"] + [TRAIN, WEATHER]


def _reasoning_changed(items: list[Item]) -> list[Item]:
    changed = [
        {**i, "encrypted_content": "tampered"} if i.get("type") == "reasoning" else i for i in items
    ]
    return [*changed, TRAIN, WEATHER]


def _reasoning_after_calls(items: list[Item]) -> list[Item]:
    reasoning = [i for i in items if i.get("type") == "reasoning"]
    return [*[i for i in items if i.get("type") != "reasoning"], *reasoning, TRAIN, WEATHER]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (_missing, "no tool result for call id(s) ['call_weather'] of input[1..4]"),
        (_unknown_id, "input[6] answers tool call id 'call_bogus', which input[1..4] did not"),
        (_duplicate, "input[7] is a duplicate tool result for call id 'call_train'"),
        (_output_before_call, "input[1] is the function_call_output for 'call_train', but its"),
        (_changed_item_id, "tool call 'call_train' has item id 'fc_other', the provider sent"),
        (_reasoning_dropped, "lacks the reasoning item 'rs_thinking_0' the provider sent"),
        (_reasoning_changed, "has encrypted_content 'tampered', the provider sent 'scripted:"),
        (_reasoning_after_calls, "before the reasoning item 'rs_thinking_0' they followed"),
    ],
)
async def test_protocol_violations_are_rejected(
    client: AsyncOpenAI,
    provider: ScriptedProvider,
    build: Callable[[list[Item]], list[Item]],
    expected: str,
) -> None:
    items = build([USER, *echoed(await create(client, "thinking", [USER]))])
    with pytest.raises(BadRequestError) as error:
        await create(client, "thinking", items)

    assert error.value.code == "protocol_violation"
    assert expected in error.value.message
    assert any(
        expected in v["message"] and v["protocol"] == "openai-responses"
        for v in provider.violations
    ), provider.violations


async def test_chat_shaped_tools_are_rejected(client: AsyncOpenAI) -> None:
    chat_tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    with pytest.raises(BadRequestError) as error:
        await create(client, "greeting", [USER], tools=chat_tools)

    assert "tools[0] nests `function` (the Chat Completions shape)" in error.value.message


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
async def test_refusal_length_and_content_filter_map_to_responses_terms(
    client: AsyncOpenAI, streamed: bool
) -> None:
    results: list[Response] = []
    history: list[Item] = [USER]
    for _ in ENDINGS.turns:
        if streamed:
            events = await stream(client, "endings", history)
            assert events[-1].type in ("response.completed", "response.incomplete")
            final = assemble(events).final
            assert final is not None and events[-1].type == f"response.{final.status}"
        else:
            final = await create(client, "endings", history)
        results.append(final)
        history = [*history, *echoed(final), USER]

    refused, truncated, filtered = results
    assert refused.status == "completed"
    message = refused.output[0]
    assert message.type == "message" and message.content[0].type == "refusal"
    assert message.content[0].refusal == "I can't help with that."
    assert truncated.status == "incomplete" and truncated.incomplete_details is not None
    assert truncated.incomplete_details.reason == "max_output_tokens"
    assert truncated.output_text == "cut sho"
    assert filtered.incomplete_details is not None
    assert (filtered.status, filtered.incomplete_details.reason) == ("incomplete", "content_filter")


async def test_usage_in_responses_shape(client: AsyncOpenAI) -> None:
    response = await create(client, "usage", [USER])
    final = assemble(await stream(client, "usage", [USER])).final

    assert response.usage is not None and final is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (120, 7)
    assert response.usage.total_tokens == 127
    assert final.usage == response.usage


async def test_the_input_token_counter_counts_as_the_turns_usage_and_is_logged(
    client: AsyncOpenAI, provider: ScriptedProvider
) -> None:
    scripted = await client.responses.input_tokens.count(model="usage", input=[USER])
    estimated = await client.responses.input_tokens.count(model="greeting", input=[USER])
    answer = await client.responses.create(model="greeting", input=cast(Any, [USER]))
    assert scripted.input_tokens == 120
    assert answer.usage is not None and estimated.input_tokens == answer.usage.input_tokens
    assert [(c["script"], c["protocol"], c["input_tokens"]) for c in provider.token_counts] == [
        ("usage", "openai-responses", 120),
        ("greeting", "openai-responses", estimated.input_tokens),
    ]
    assert len(provider.requests) == 1  # counting is not a model call
