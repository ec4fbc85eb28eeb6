"""Per-turn fault injection and stream shaping, the same script over all three protocols,
driven by the official clients over real HTTP (no mocks)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import anthropic
import openai
import pytest

from agentloop.scripted_provider import (
    Script,
    ScriptedError,
    ScriptedProvider,
    ScriptTurn,
)
from agentloop.testing.turns import call as scripted_call

PROTOCOLS = ["openai-chat", "openai-responses", "anthropic"]
TRAIN_ARGS = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER_ARGS = {"city": "Shanghai", "date": "2026-12-01"}
CALLS = [
    scripted_call("get_train_status", "call_train", **TRAIN_ARGS),
    scripted_call("get_weather", "call_weather", **WEATHER_ARGS),
]
ARGUMENTS = {call.id: call.arguments_text() for call in CALLS}
NAMES = ("get_train_status", "get_weather")
USER = {"role": "user", "content": "Is train G1234 late, and how is the weather?"}


@pytest.fixture
async def provider() -> AsyncIterator[ScriptedProvider]:
    provider = ScriptedProvider(builtin=False)
    await provider.start(host="127.0.0.1", port=0)
    yield provider
    await provider.stop()


def play(provider: ScriptedProvider, name: str, *turns: ScriptTurn) -> str:
    provider.register(Script(name=name, turns=list(turns)))
    return name


async def ask(provider: ScriptedProvider, protocol: str, model: str, *, retries: int = 0) -> str:
    """One non-streamed request with the protocol's official client; the answer's text."""
    if protocol == "anthropic":
        async with anthropic.AsyncAnthropic(
            base_url=provider.anthropic_base_url, api_key="scripted", max_retries=retries
        ) as claude:
            message = await claude.messages.create(
                model=model, max_tokens=256, messages=[cast("Any", USER)]
            )
            return "".join(block.text for block in message.content if block.type == "text")
    async with openai.AsyncOpenAI(
        base_url=provider.base_url, api_key="scripted", max_retries=retries
    ) as gpt:
        if protocol == "openai-responses":
            return (await gpt.responses.create(model=model, input=[cast("Any", USER)])).output_text
        completion = await gpt.chat.completions.create(model=model, messages=[cast("Any", USER)])
        return completion.choices[0].message.content or ""


@dataclass
class Streamed:
    """What a client saw of a stream: event kinds, and argument fragments by call id."""

    kinds: list[str] = field(default_factory=list)
    fragments: list[tuple[str, str]] = field(default_factory=list)

    def arguments(self) -> dict[str, str]:
        joined: dict[str, str] = {}
        for call_id, fragment in self.fragments:
            joined[call_id] = joined.get(call_id, "") + fragment
        return joined


async def ask_streamed(provider: ScriptedProvider, protocol: str, model: str) -> Streamed:
    """One streamed request with the protocol's official client, read event by event."""
    if protocol == "anthropic":
        return await _stream_messages(provider, model)
    async with openai.AsyncOpenAI(
        base_url=provider.base_url, api_key="scripted", max_retries=0
    ) as gpt:
        if protocol == "openai-responses":
            return await _stream_responses(gpt, model)
        return await _stream_chat(gpt, model)


async def _stream_messages(provider: ScriptedProvider, model: str) -> Streamed:
    out = Streamed()
    tools: Any = [{"name": n, "input_schema": {"type": "object"}} for n in NAMES]
    async with anthropic.AsyncAnthropic(
        base_url=provider.anthropic_base_url, api_key="scripted", max_retries=0
    ) as claude:
        events = await claude.messages.create(
            model=model, max_tokens=256, messages=[cast("Any", USER)], tools=tools, stream=True
        )
        ids: dict[int, str] = {}
        async for event in events:
            out.kinds.append(event.type)
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                ids[event.index] = event.content_block.id
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                out.fragments.append((ids[event.index], event.delta.partial_json))
    return out


async def _stream_responses(gpt: openai.AsyncOpenAI, model: str) -> Streamed:
    out = Streamed()
    tools: Any = [{"type": "function", "name": n, "parameters": {}} for n in NAMES]
    events = await gpt.responses.create(
        model=model, input=[cast("Any", USER)], tools=tools, stream=True
    )
    call_ids: dict[str, str] = {}
    async for event in events:
        out.kinds.append(event.type)
        if event.type == "response.output_item.added" and event.item.type == "function_call":
            call_ids[event.item.id or ""] = event.item.call_id
        elif event.type == "response.function_call_arguments.delta":
            out.fragments.append((call_ids[event.item_id], event.delta))
    return out


async def _stream_chat(gpt: openai.AsyncOpenAI, model: str) -> Streamed:
    out = Streamed()
    tools: Any = [{"type": "function", "function": {"name": n}} for n in NAMES]
    chunks = await gpt.chat.completions.create(
        model=model, messages=[cast("Any", USER)], tools=tools, stream=True
    )
    by_index: dict[int, str] = {}
    async for chunk in chunks:
        choice = chunk.choices[0]
        out.kinds.append(f"finish:{choice.finish_reason}" if choice.finish_reason else "chunk")
        for delta in choice.delta.tool_calls or []:
            by_index.setdefault(delta.index, delta.id or "")
            arguments = delta.function.arguments if delta.function else None
            out.fragments.append((by_index[delta.index], arguments or ""))
    return out


COMPLETION = {"openai-chat": "finish:tool_calls", "openai-responses": "response.completed"}


def completed(protocol: str, streamed: Streamed) -> bool:
    return COMPLETION.get(protocol, "message_stop") in streamed.kinds


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_rate_limit_is_retried_after_retry_after(
    provider: ScriptedProvider, protocol: str
) -> None:
    model = play(
        provider,
        "limited",
        ScriptTurn(text="ok", errors=[ScriptedError(status=429, retry_after="0.3")]),
    )

    assert await ask(provider, protocol, model, retries=2) == "ok"
    first, second = [r["received_at"] for r in provider.requests]
    assert second - first >= 0.3
    assert {r["protocol"] for r in provider.requests} == {protocol}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_exactly_the_scripted_errors_then_the_turn(
    provider: ScriptedProvider, protocol: str
) -> None:
    errors = [
        ScriptedError(status=429, retry_after="7"),
        ScriptedError(status=500, retry_after_ms="20", message="boom"),
    ]
    model = play(provider, "flaky", ScriptTurn(text="ok", errors=errors))
    sdk: Any = anthropic if protocol == "anthropic" else openai

    with pytest.raises(sdk.RateLimitError) as limited:
        await ask(provider, protocol, model)
    with pytest.raises(sdk.InternalServerError) as failed:
        await ask(provider, protocol, model)
    assert [await ask(provider, protocol, model) for _ in range(2)] == ["ok", "ok"]

    assert limited.value.response.headers["retry-after"] == "7"
    assert failed.value.response.headers["retry-after-ms"] == "20"
    assert "boom" in failed.value.message
    header = "request-id" if protocol == "anthropic" else "x-request-id"
    assert failed.value.response.headers[header].startswith("req_")
    assert [r["turn"] for r in provider.requests] == [0, 0, 0, 0]

    provider.reset()  # the counters start over, as they do when the script is registered
    with pytest.raises(sdk.RateLimitError):
        await ask(provider, protocol, model)
    play(provider, "flaky", ScriptTurn(text="ok", errors=errors))
    with pytest.raises(sdk.RateLimitError):
        await ask(provider, protocol, model)


async def test_overloaded_is_anthropics_own_error(provider: ScriptedProvider) -> None:
    model = play(provider, "busy", ScriptTurn(text="ok", errors=[ScriptedError(status=529)]))

    with pytest.raises(anthropic.OverloadedError) as error:
        await ask(provider, "anthropic", model)
    assert cast("dict[str, Any]", error.value.body)["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_delay_ms_waits_before_answering(provider: ScriptedProvider, protocol: str) -> None:
    model = play(provider, "slow", ScriptTurn(text="ok", delay_ms=250))

    started = time.monotonic()
    assert await ask(provider, protocol, model) == "ok"
    assert time.monotonic() - started >= 0.25


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_parallel_call_fragments_interleave_and_reassemble(
    provider: ScriptedProvider, protocol: str
) -> None:
    model = play(provider, "parallel", ScriptTurn(text="Both.", tool_calls=CALLS))
    streamed = await ask_streamed(provider, protocol, model)

    assert [call_id for call_id, _ in streamed.fragments[:4]] == ["call_train", "call_weather"] * 2
    assert streamed.arguments() == ARGUMENTS
    assert completed(protocol, streamed)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_one_character_fragments_call_by_call(
    provider: ScriptedProvider, protocol: str
) -> None:
    turn = ScriptTurn(tool_calls=CALLS, fragment_chars=1, interleave=False)
    streamed = await ask_streamed(provider, protocol, play(provider, "fine", turn))

    assert {len(fragment) for _, fragment in streamed.fragments} == {1}
    order = [call_id for call_id, _ in streamed.fragments]
    assert order == ["call_train"] * len(ARGUMENTS["call_train"]) + ["call_weather"] * len(
        ARGUMENTS["call_weather"]
    )
    assert streamed.arguments() == ARGUMENTS


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cut_after_events_never_completes(provider: ScriptedProvider, protocol: str) -> None:
    turn = ScriptTurn(text="Looking it up.", tool_calls=CALLS, cut_stream_after_events=4)
    streamed = await ask_streamed(provider, protocol, play(provider, "cut", turn))

    assert not completed(protocol, streamed)
    # The anthropic client drops the `ping` event, one of the four sent.
    assert len(streamed.kinds) == (3 if protocol == "anthropic" else 4)
    assert streamed.kinds[-1] not in ("message_delta", "response.incomplete")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cut_after_chars_stops_inside_the_arguments(
    provider: ScriptedProvider, protocol: str
) -> None:
    turn = ScriptTurn(tool_calls=CALLS, cut_stream_after_chars=12)
    streamed = await ask_streamed(provider, protocol, play(provider, "chars", turn))

    sent = "".join(fragment for _, fragment in streamed.fragments)
    assert len(sent) == 12
    assert streamed.arguments()["call_train"] == ARGUMENTS["call_train"][:7]
    assert not completed(protocol, streamed)
    with pytest.raises(ValueError):
        json.loads(streamed.arguments()["call_weather"])
