"""The scripted provider, driven over real HTTP by the official `openai` client (no mocks)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError, omit
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam

from agentloop.scripted_provider import Script, ScriptedProvider, ScriptTurn
from agentloop.scripted_provider.scripts import render_placeholders
from agentloop.testing.turns import call as scripted_call
from tests.live import scripted

Message = dict[str, Any]

GREETING_TEXT = "Hello from the scripted provider: same words, streamed or not (°C ok)."
GREETING = scripted("greeting", ScriptTurn(text=GREETING_TEXT))
COUNTING = Script(name="counting", turns=[ScriptTurn(text=w) for w in ("one", "two", "three")])
LOOKUP = {"query": "a fairly long query string", "limit": 10}
CUT = scripted(
    "cut",
    ScriptTurn(
        text="Looking it up.",
        tool_calls=[scripted_call("lookup", "call_lookup", **LOOKUP)],
        cut_stream_after_chars=12,
    ),
)

USER: Message = {"role": "user", "content": "Is train G1234 late, and how is the weather?"}
TRAVEL_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_train_status", "get_weather", "lookup")
]
TRAIN_RESULT = {"train_number": "G1234", "status": "delayed", "delay_minutes": 15}
WEATHER_RESULT = {"city": "Shanghai", "condition": "light rain", "high_c": 12, "low_c": 7}
TRAVEL_ANSWER = (
    "Train G1234 on 2026-12-01 is delayed (15 min delay). "
    "Weather in Shanghai: light rain, 12°C high."
)


@dataclass
class Assembled:
    """A streamed answer put back together the way a careful client must: by `index`."""

    text: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reasons: list[str] = field(default_factory=list)
    fragment_indices: list[int] = field(default_factory=list)
    ids_per_index: dict[int, int] = field(default_factory=dict)


def assemble(chunks: list[ChatCompletionChunk]) -> Assembled:
    out = Assembled()
    for chunk in chunks:
        for choice in chunk.choices:
            out.text += choice.delta.content or ""
            if choice.finish_reason is not None:
                out.finish_reasons.append(choice.finish_reason)
            for fragment in choice.delta.tool_calls or []:
                call = out.calls.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
                out.fragment_indices.append(fragment.index)
                if fragment.id is not None:
                    call["id"] = fragment.id
                    out.ids_per_index[fragment.index] = out.ids_per_index.get(fragment.index, 0) + 1
                if fragment.function is not None:
                    call["name"] += fragment.function.name or ""
                    call["arguments"] += fragment.function.arguments or ""
    return out


@pytest.fixture
async def provider() -> AsyncIterator[ScriptedProvider]:
    provider = ScriptedProvider([GREETING, COUNTING, CUT])
    await provider.start(host="127.0.0.1", port=0)
    yield provider
    await provider.stop()


@pytest.fixture
async def client(provider: ScriptedProvider) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=provider.base_url, api_key="scripted", max_retries=0) as client:
        yield client


def _wire(messages: list[Message]) -> list[ChatCompletionMessageParam]:
    # Tests build messages as plain dicts, broken ones included, exactly as sent on the wire.
    return cast("list[ChatCompletionMessageParam]", messages)


async def complete(
    client: AsyncOpenAI, model: str, messages: list[Message], *, tools: bool = True
) -> ChatCompletion:
    return await client.chat.completions.create(
        model=model, messages=_wire(messages), tools=TRAVEL_TOOLS if tools else omit
    )


async def stream(
    client: AsyncOpenAI, model: str, messages: list[Message]
) -> list[ChatCompletionChunk]:
    chunks = await client.chat.completions.create(
        model=model,
        messages=_wire(messages),
        tools=TRAVEL_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    return [chunk async for chunk in chunks]


async def travel_history(client: AsyncOpenAI) -> list[Message]:
    """User question plus turn 0 (two tool calls), echoed back exactly as the client got it."""
    completion = await complete(client, "travel", [USER])
    assistant = completion.choices[0].message.model_dump(exclude_none=True, exclude={"annotations"})
    return [USER, assistant]


def tool_message(call_id: str, content: dict[str, Any]) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content)}


TRAIN = tool_message("call_train", TRAIN_RESULT)
WEATHER = tool_message("call_weather", WEATHER_RESULT)


async def test_final_text_is_the_same_streamed_and_not(client: AsyncOpenAI) -> None:
    completion = await complete(client, "greeting", [USER])
    chunks = await stream(client, "greeting", [USER])
    streamed = assemble(chunks)

    assert completion.id == "chatcmpl-greeting-0"
    assert completion._request_id is not None and completion._request_id.startswith("req_")
    assert completion.choices[0].message.content == GREETING_TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert streamed.text == GREETING_TEXT
    assert streamed.finish_reasons == ["stop"]
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 3
    assert {chunk.id for chunk in chunks} == {completion.id}
    assert chunks[-1].choices == [] and chunks[-1].usage == completion.usage


async def test_parallel_tool_calls_stream_interleaved(client: AsyncOpenAI) -> None:
    streamed = assemble(await stream(client, "travel", [USER]))

    assert streamed.fragment_indices[:4] == [0, 1, 0, 1]  # interleaved, not call by call
    assert streamed.ids_per_index == {0: 1, 1: 1}  # id (and name) only on the first fragment
    assert streamed.calls == {
        0: {
            "id": "call_train",
            "name": "get_train_status",
            "arguments": '{"train_number":"G1234","date":"2026-12-01"}',
        },
        1: {
            "id": "call_weather",
            "name": "get_weather",
            "arguments": '{"city":"Shanghai","date":"2026-12-01"}',
        },
    }
    assert streamed.finish_reasons == ["tool_calls"]


async def test_turn_index_follows_assistant_messages(
    client: AsyncOpenAI, provider: ScriptedProvider
) -> None:
    def after(answered: int) -> list[Message]:
        return [USER, *[{"role": "assistant", "content": "..."}, USER] * answered]

    for answered, word in enumerate(["one", "two", "three"]):
        completion = await complete(client, "counting", after(answered))
        assert completion.choices[0].message.content == word

    with pytest.raises(BadRequestError) as error:
        await complete(client, "counting", after(3))
    assert error.value.code == "script_exhausted"
    assert [v["turn"] for v in provider.violations] == [3]


async def test_tool_round_trip_has_no_violations_and_fills_placeholders(
    client: AsyncOpenAI, provider: ScriptedProvider
) -> None:
    history = await travel_history(client)
    # Results may come back in any order, as long as each sits under its own call id.
    chunks = await stream(client, "travel", [*history, WEATHER, TRAIN])

    assert assemble(chunks).text == TRAVEL_ANSWER
    assert provider.violations == []
    assert [(r["turn"], r["stream"]) for r in provider.requests] == [(0, False), (1, True)]


def _missing(history: list[Message]) -> list[Message]:
    return [*history, TRAIN]


def _wrong_id(history: list[Message]) -> list[Message]:
    return [*history, TRAIN, {**WEATHER, "tool_call_id": "call_bogus"}]


def _duplicate(history: list[Message]) -> list[Message]:
    return [*history, TRAIN, WEATHER, TRAIN]


def _user_in_between(history: list[Message]) -> list[Message]:
    return [*history, TRAIN, USER, WEATHER]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (_missing, "no tool result for call id(s) ['call_weather']"),
        (_wrong_id, "answers tool call id 'call_bogus', which messages[1] did not issue"),
        (_duplicate, "duplicate tool result for call id 'call_train'"),
        (_user_in_between, "messages[3] (user) comes before them"),
    ],
)
async def test_broken_tool_results_are_rejected(
    client: AsyncOpenAI,
    provider: ScriptedProvider,
    build: Callable[[list[Message]], list[Message]],
    expected: str,
) -> None:
    messages = build(await travel_history(client))
    with pytest.raises(BadRequestError) as error:
        await complete(client, "travel", messages)

    assert error.value.code == "protocol_violation"
    assert expected in error.value.message
    assert any(
        expected in v["message"] and (v["script"], v["turn"]) == ("travel", 1)
        for v in provider.violations
    ), provider.violations


async def test_results_under_swapped_ids_break_expectations(
    client: AsyncOpenAI, provider: ScriptedProvider
) -> None:
    swapped = [{**TRAIN, "tool_call_id": "call_weather"}, {**WEATHER, "tool_call_id": "call_train"}]
    with pytest.raises(BadRequestError):
        await complete(client, "travel", [*await travel_history(client), *swapped])

    messages = [v["message"] for v in provider.violations]
    assert any("'call_train' should contain 'G1234'" in m for m in messages), messages
    assert any("'call_weather' should contain 'Shanghai'" in m for m in messages), messages


async def test_echo_must_match_the_script(client: AsyncOpenAI, provider: ScriptedProvider) -> None:
    user, assistant = await travel_history(client)
    call = assistant["tool_calls"][0]
    reformatted = json.dumps(json.loads(call["function"]["arguments"]), indent=1)
    call["function"]["arguments"] = reformatted
    with pytest.raises(BadRequestError):
        await complete(client, "travel", [user, assistant, TRAIN, WEATHER])

    assert any("must be echoed verbatim" in v["message"] for v in provider.violations)


async def test_tools_called_must_be_declared(client: AsyncOpenAI) -> None:
    with pytest.raises(BadRequestError) as error:
        await complete(client, "travel", [USER], tools=False)

    assert "turn 0 calls tool 'get_weather'" in error.value.message


async def test_cut_stream_ends_cleanly_without_finish_reason(client: AsyncOpenAI) -> None:
    chunks = await stream(client, "cut", [USER])
    streamed = assemble(chunks)

    full_arguments = json.dumps(LOOKUP, separators=(",", ":"))
    assert streamed.text == "Looking it up."
    assert streamed.calls[0]["arguments"] == full_arguments[:12]
    assert streamed.finish_reasons == []
    assert all(chunk.choices for chunk in chunks)  # no usage chunk after a cut either


async def test_unknown_model_is_not_found(client: AsyncOpenAI) -> None:
    with pytest.raises(NotFoundError) as error:
        await complete(client, "no-such-script", [USER])

    assert (error.value.code, error.value.param) == ("model_not_found", "model")


async def test_missing_placeholder_renders_marker_and_is_recorded(
    client: AsyncOpenAI, provider: ScriptedProvider
) -> None:
    no_status = tool_message("call_train", {"train_number": "G1234", "delay_minutes": 15})
    completion = await complete(
        client, "travel", [*await travel_history(client), no_status, WEATHER]
    )

    assert "is <missing call_train.status> (15 min" in (completion.choices[0].message.content or "")
    assert [v["message"] for v in provider.violations] == [
        "placeholder {{call_train.status}} has no value"
    ]


async def test_control_endpoints_over_http(client: AsyncOpenAI, provider: ScriptedProvider) -> None:
    root = provider.base_url.removesuffix("/v1")
    script = scripted("hello", "hi")
    async with aiohttp.ClientSession() as http:
        put = await http.put(f"{root}/_scripts/hello", data=script.model_dump_json())
        assert put.status == 200
        completion = await complete(client, "hello", [USER])
        assert completion.choices[0].message.content == "hi"
        with pytest.raises(BadRequestError):
            await complete(client, "hello", [USER, WEATHER])  # a stray tool message

        requests = await (await http.get(f"{root}/_requests")).json()
        violations = (await (await http.get(f"{root}/_violations")).json())["violations"]
        assert [(r["script"], r["turn"]) for r in requests] == [("hello", 0), ("hello", 0)]
        assert violations == provider.violations and len(violations) == 1

        assert (await http.post(f"{root}/_reset")).status == 200
        assert await (await http.get(f"{root}/_requests")).json() == []
        assert provider.violations == []


def test_placeholder_forms() -> None:
    results = {"call_a": '{"x": {"y": [1, "two"]}, "ok": true}', "call_b": "plain text"}
    text = "{{call_b}} | {{call_a.x.y.1}} | {{call_a.x.y.0}} | {{call_a.ok}} | {{call_b.k}}"

    rendered, missing = render_placeholders(text, results)

    assert rendered == "plain text | two | 1 | true | <missing call_b.k>"
    assert missing == ["call_b.k"]


async def test_an_answer_past_the_requests_output_limit_is_cut_there(client: AsyncOpenAI) -> None:
    whole = await complete(client, "greeting", [USER])
    assert whole.usage is not None and whole.usage.completion_tokens > 3
    cut = await client.chat.completions.create(
        model="greeting", messages=_wire([USER]), max_completion_tokens=3
    )
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage is not None and cut.usage.completion_tokens == 3
    assert GREETING_TEXT.startswith(cut.choices[0].message.content or "")
    assert len(cut.choices[0].message.content or "") < len(GREETING_TEXT)
    # Tool calls past the limit are never half-sent: the output has none.
    travel = await client.chat.completions.create(
        model="travel", messages=_wire([USER]), tools=TRAVEL_TOOLS, max_completion_tokens=2
    )
    assert travel.choices[0].finish_reason == "length"
    assert not travel.choices[0].message.tool_calls


# --- script files ---------------------------------------------------------------------------


async def test_script_files_are_played_and_read_again_when_they_change(tmp_path: Path) -> None:
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "hello.toml").write_text('[[turns]]\ntext = "Hello from TOML."\n')
    (folder / "named.json").write_text(json.dumps({"name": "other", "turns": [{"text": "J"}]}))
    (folder / "broken.json").write_text('{"turns": []}')
    provider = ScriptedProvider(builtin=False, scripts_dir=folder)
    await provider.start(host="127.0.0.1", port=0)
    try:
        async with AsyncOpenAI(
            base_url=provider.base_url, api_key="scripted", max_retries=0
        ) as client:
            first = await complete(client, "hello", [USER])
            named = await complete(client, "other", [USER])
            (folder / "hello.toml").write_text('[[turns]]\ntext = "Changed."\n')
            os.utime(folder / "hello.toml", ns=(1, 1))  # a new mtime, however coarse the clock
            (folder / "named.json").unlink()
            changed = await complete(client, "hello", [USER])
            with pytest.raises(NotFoundError) as missing:
                await complete(client, "notes", [USER])
    finally:
        await provider.stop()
    assert first.choices[0].message.content == "Hello from TOML."  # named after the file
    assert named.choices[0].message.content == "J"  # named by its `name`
    assert changed.choices[0].message.content == "Changed."
    message = str(missing.value)
    assert f"no such script in {folder}" in message, message
    assert "known: ['hello']" in message  # the removed file's script is gone
    assert f"skipped: {folder / 'broken.json'}:1: turns: " in message, message


async def test_without_a_folder_no_such_script_says_where_scripts_come_from(
    client: AsyncOpenAI,
) -> None:
    with pytest.raises(NotFoundError) as missing:
        await complete(client, "notes", [USER])
    assert "no script folder (`agentloop dev --scripts DIR`)" in str(missing.value)
    assert "known: ['counting', 'cut', 'greeting'" in str(missing.value)
