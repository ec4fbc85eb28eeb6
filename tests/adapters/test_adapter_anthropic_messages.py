"""Anthropic Messages adapter: golden dicts both ways, streams, pause_turn, SDK error mapping.

Messages and stream events are written as the API sends them (wire JSON). A whole message is
passed through the SDK's own type (`dump`) to get exactly what a non-streamed `complete` sees,
`Message.model_dump()`; stream events are fed as they are, as a streamed `complete` reads them.
No network: the `complete` tests drive the real `AsyncAnthropic` client over an
`httpx2.MockTransport`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.adapters.anthropic_messages import (
    DEFAULT_MAX_TOKENS,
    MAX_PAUSE_CONTINUATIONS,
    AnthropicMessagesAdapter,
    MessagesStreamAssembler,
    build_request,
    parse_response,
)
from agentloop.adapters.base import ModelRequest, ProviderError, UnsupportedEventError
from agentloop.contract import ModelSettings
from agentloop.digests import args_digest
from agentloop.envelope import ENVELOPE_NOTE, enveloped, unwrapped
from agentloop.events import (
    Event,
    Instruction,
    ModelOutput,
    ProviderRef,
    StateUpdate,
    ToolCall,
    ToolResult,
    ToolStatus,
    UserInput,
)
from agentloop.tool_spec import ToolSpec

Json = dict[str, Any]


def request(*events: Event, tools: list[ToolSpec] | None = None, **kw: Any) -> ModelRequest:
    return ModelRequest(
        provider="anthropic",
        model="claude-test",
        events=list(events),
        tools=tools or [],
        settings=ModelSettings(**kw),
    )


def messages(*events: Event) -> list[Json]:
    result: list[Json] = build_request(request(*events))["messages"]
    return result


# wire-format content blocks and messages


def text(value: str) -> Json:
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str = "get_weather", **arguments: Any) -> Json:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def thinking(value: str, signature: str) -> Json:
    return {"type": "thinking", "thinking": value, "signature": signature}


REDACTED: Json = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


def wire(
    *content: Json, stop: str | None = "end_turn", msg_id: str = "msg_1", **usage: int
) -> Json:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-test-2025",
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 7, **usage},
    }


def dump(message: Json) -> Json:
    """What `complete` hands `parse_response`: the SDK's `Message.model_dump()`."""
    return Message.model_validate(message).model_dump()


def parsed(*content: Json, stop: str | None = "end_turn", request_id: str = "") -> ModelOutput:
    return parse_response(dump(wire(*content, stop=stop)), request_id)


def tool_turn(*ids: str) -> ModelOutput:
    return parsed(*[tool_use(i, city=i) for i in ids], stop="tool_use")


def result(call_id: str, content: str = "ok", status: ToolStatus = "succeeded") -> ToolResult:
    return ToolResult(call_id=call_id, tool="get_weather", content=content, status=status)


def tool_result(call_id: str, content: str = "ok", error: bool = False) -> Json:
    """A `tool_result` block as sent: the result in its provenance envelope."""
    wrapped = enveloped(ToolResult(call_id=call_id, tool="get_weather", content=content))
    block = {"type": "tool_result", "tool_use_id": call_id, "content": wrapped}
    return {**block, "is_error": True} if error else block


def test_wire_helpers_match_the_sdk_shapes() -> None:
    body = wire(thinking("hmm", "sig"), REDACTED, text("Hi"), tool_use("t1", city="Oslo"))
    assert Message.model_validate(body).model_dump(exclude_unset=True) == body


# ----------------------------------------------------------------------- build_request


def test_system_is_top_level_and_defaults() -> None:
    kwargs = build_request(
        request(Instruction(text="be brief"), UserInput(text="weather?"), Instruction(text="no"))
    )
    assert kwargs == {
        "model": "claude-test",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "system": "be brief\n\nno",
        "messages": [{"role": "user", "content": [text("weather?")]}],
        "stream": True,
    }


def test_settings_tools_and_no_system_but_the_envelope_note_when_none() -> None:
    spec = ToolSpec(
        name="get_weather",
        description="Weather for a city on a date.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    kwargs = build_request(
        request(
            UserInput(text="x"), tools=[spec], stream=False, max_output_tokens=256, temperature=0.2
        )
    )
    # Offering tools, the request says what their results' envelope means; nothing else.
    assert kwargs["system"] == ENVELOPE_NOTE
    assert (kwargs["stream"], kwargs["max_tokens"]) == (False, 256)
    # API version 2026-10-21 answers 400 to any sampling parameter: none is sent.
    assert "temperature" not in kwargs and "top_p" not in kwargs
    assert kwargs["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city on a date.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]


def test_tool_results_first_in_call_order_then_notes_and_user_input() -> None:
    turn = parsed(
        thinking("need both", "sig_1"),
        text("Checking."),
        tool_use("toolu_a", city="Oslo"),
        tool_use("toolu_b", city="Bergen"),
        stop="tool_use",
    )
    sent = messages(
        Instruction(text="sys"),
        UserInput(text="q"),
        StateUpdate(kind="budget", text="3 calls left"),
        turn,
        StateUpdate(kind="approval", text="approved by ops"),
        result("toolu_b", "B", status="failed"),
        UserInput(text="also this"),
        StateUpdate(kind="bookkeeping"),
        result("toolu_a", "A"),
    )
    assert sent == [
        {"role": "user", "content": [text("q"), text("[agentloop] 3 calls left")]},
        {
            "role": "assistant",
            "content": [
                thinking("need both", "sig_1"),
                text("Checking."),
                tool_use("toolu_a", city="Oslo"),
                tool_use("toolu_b", city="Bergen"),
            ],
        },
        {
            "role": "user",
            "content": [
                tool_result("toolu_a", "A"),
                tool_result("toolu_b", "B", error=True),
                text("[agentloop] approved by ops"),
                text("also this"),
            ],
        },
    ]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        ("succeeded", False),
        ("confirmed_after_query", False),
        ("failed", True),
        ("rejected", True),
        ("denied", True),
        ("unknown", True),
    ],
)
def test_is_error_for_every_status_but_success(status: ToolStatus, error: bool) -> None:
    sent = messages(UserInput(text="q"), tool_turn("toolu_a"), result("toolu_a", status=status))
    assert sent[2]["content"] == [tool_result("toolu_a", error=error)]


def test_empty_tool_output_is_sent_without_content() -> None:
    sent = messages(UserInput(text="q"), tool_turn("toolu_a"), result("toolu_a", ""))
    assert sent[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_a"}]


def test_exact_echo_of_thinking_redacted_and_tool_use_without_null_fields() -> None:
    content = [thinking("Let me think.", "EqQBCkYIARgCIkD"), REDACTED, tool_use("toolu_a", x=None)]
    turn = parsed(*content, stop="tool_use")
    raw = turn.provider_ref.raw_items[0]
    assert raw["content"][2]["caller"] is None  # model_dump() fills in fields never sent
    sent = messages(UserInput(text="q"), turn, result("toolu_a"))
    assert sent[1] == {"role": "assistant", "content": content}  # null *inside* input is kept
    assert "caller" in raw["content"][2]  # the echo left out the null; the transcript keeps it


def test_assistant_rebuilt_without_anthropic_raw_items() -> None:
    output = ModelOutput(
        text="Checking.",
        tool_calls=[ToolCall(call_id="c1", name="f", arguments={"b": 1, "a": "é"})],
        stop="tool_calls",
        provider_ref=ProviderRef(provider="openai-chat", raw_items=[{"role": "assistant"}]),
    )
    sent = messages(UserInput(text="q"), output, result("c1"))
    assert sent[1] == {
        "role": "assistant",
        "content": [text("Checking."), tool_use("c1", "f", b=1, a="é")],
    }


def test_another_providers_call_ids_are_written_as_this_api_takes_them() -> None:
    """A run that fell back here carries another provider's calls: an id this API would
    refuse (`^[a-zA-Z0-9_-]+$`) is rewritten, the same for its call and its result, and two
    such ids stay apart; an id it takes is sent as it is."""
    odd = ["functions.get_weather:0", "functions.get_weather:1"]
    output = ModelOutput(
        tool_calls=[ToolCall(call_id=c, name="get_weather", arguments={}) for c in [*odd, "c_2"]],
        stop="tool_calls",
        provider_ref=ProviderRef(provider="openai-chat"),
    )
    sent = messages(UserInput(text="q"), output, *(result(c) for c in [*odd, "c_2"]))
    used = [block["id"] for block in sent[1]["content"]]
    answered = [block["tool_use_id"] for block in sent[2]["content"]]
    assert used == answered and used[2] == "c_2" and len(set(used)) == 3
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", call_id) for call_id in used)


def test_calls_of_a_truncated_output_are_not_sent_and_empty_turns_vanish() -> None:
    cut = parsed(thinking("t", "s"), tool_use("toolu_a"), stop="max_tokens")
    assert cut.stop == "truncated"
    sent = messages(UserInput(text="q"), cut, UserInput(text="continue"))
    assert sent[1] == {"role": "assistant", "content": [thinking("t", "s")]}
    only_call = parsed(tool_use("toolu_a"), stop="max_tokens")
    assert messages(UserInput(text="q"), only_call, StateUpdate(text="retry"), UserInput()) == [
        {"role": "user", "content": [text("q"), text("[agentloop] retry")]}
    ]
    with pytest.raises(UnsupportedEventError, match="toolu_a"):
        messages(UserInput(text="q"), cut, result("toolu_a"))


@pytest.mark.parametrize("reused", [False, True], ids=["repeated", "reused"])
def test_an_output_refused_for_its_call_ids_is_sent_without_its_calls(reused: bool) -> None:
    """The runner stopped the run on it; a run continuing that one answers each of its calls
    `not_run`: they are told to the model as notes, never as a second `tool_result`."""
    earlier = [tool_turn("toolu_a"), result("toolu_a")] if reused else []
    tools = ["get_train_status"] if reused else ["get_weather", "get_train_status"]
    refused = parsed(
        thinking("both", "sig_1"),
        text("Checking."),
        *[tool_use("toolu_a", tool) for tool in tools],
        stop="tool_use",
    )
    answers = [
        ToolResult(call_id="toolu_a", tool=tool, status="rejected", content="not run")
        for tool in tools
    ]
    continued = StateUpdate(kind="continued", text="This run continues run r1.")
    sent = messages(
        UserInput(text="q"), *earlier, refused, *answers, continued, UserInput(text="Go on.")
    )
    assert sent[-2] == {
        "role": "assistant",
        "content": [thinking("both", "sig_1"), text("Checking.")],
    }
    *notes, note, go_on = sent[-1]["content"]
    assert [note, go_on] == [text("[agentloop] This run continues run r1."), text("Go on.")]
    assert [block["type"] for block in notes] == ["text"] * len(tools)
    for block, tool in zip(notes, tools, strict=True):
        assert block["text"].startswith(f"[agentloop] Your call toolu_a ({tool}) never ran")
        assert unwrapped(block["text"].split("Its result: ")[1]) == "not run"


@pytest.mark.parametrize(
    ("events", "match"),
    [
        ((UserInput(text="q"), result("toolu_x")), "toolu_x.*answers no call"),
        ((tool_turn("toolu_a"), result("toolu_a"), result("toolu_a")), "duplicate.*toolu_a"),
        ((tool_turn("toolu_a", "toolu_b"), result("toolu_a"), tool_turn("toolu_c")), "toolu_b"),
        ((UserInput(text="q"), tool_turn("toolu_a"), UserInput(text="go")), "toolu_a.*end"),
        ((UserInput(text="q"), ToolCall(call_id="c", name="f")), "standalone ToolCall"),
        ((Instruction(text="sys"),), "must start with user"),
        ((Instruction(text="s"), parsed(text("hi")), UserInput(text="q")), "must start with user"),
    ],
)
def test_invalid_conversations_are_refused(events: tuple[Event, ...], match: str) -> None:
    with pytest.raises(UnsupportedEventError, match=match):
        messages(*events)


def test_round_trip_of_every_event_kind() -> None:
    """events -> request -> the provider's message -> parse -> request again: nothing lost."""
    answer = wire(
        thinking("plan", "sig"), text("Looking."), tool_use("toolu_1", city="Oslo"), stop="tool_use"
    )
    turn = parse_response(dump(answer))
    assert turn.tool_calls[0].arguments == {"city": "Oslo"}
    final = parse_response(dump(wire(text("Sunny."), msg_id="msg_2")))
    events: list[Event] = [
        Instruction(text="sys"),
        UserInput(text="weather in Oslo?"),
        turn,
        result("toolu_1", '{"sky": "clear"}'),
        final,
        StateUpdate(kind="verdict", text="answer rejected: not JSON"),
    ]
    kwargs = build_request(request(*events))
    assert kwargs["system"] == "sys\n\n" + ENVELOPE_NOTE
    assert kwargs["messages"] == [
        {"role": "user", "content": [text("weather in Oslo?")]},
        {"role": "assistant", "content": answer["content"]},
        {"role": "user", "content": [tool_result("toolu_1", '{"sky": "clear"}')]},
        {"role": "assistant", "content": [text("Sunny.")]},
        {"role": "user", "content": [text("[agentloop] answer rejected: not JSON")]},
    ]


@st.composite
def transcripts(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = [UserInput(text=draw(st.sampled_from(["task", "go"])))]
    for turn in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "note", "final", "tools", "cut"]))
        if kind in ("user", "note"):
            said = draw(st.sampled_from(["", "more"]))
            events.append(UserInput(text=said) if kind == "user" else StateUpdate(text=said))
        elif kind in ("final", "cut"):
            blocks = draw(st.lists(st.sampled_from([text("a"), thinking("t", "s")]), max_size=2))
            blocks += [tool_use(f"toolu_{turn}_x")] if kind == "cut" else []
            stop = "max_tokens" if kind == "cut" else "end_turn"
            events.append(parse_response(dump(wire(*blocks, stop=stop))))
        else:
            ids = [f"toolu_{turn}_{i}" for i in range(draw(st.integers(1, 3)))]
            events.append(tool_turn(*ids))
            for call_id in draw(st.permutations(ids)):
                if draw(st.booleans()):
                    events.append(StateUpdate(text=draw(st.sampled_from(["", "note"]))))
                failed = draw(st.booleans())
                events.append(result(call_id, status="failed" if failed else "succeeded"))
    return events


@settings(max_examples=200, deadline=None)
@given(transcripts())
def test_property_roles_alternate_and_results_lead_the_next_user_message(
    events: list[Event],
) -> None:
    sent = messages(*events)
    assert [m["role"] for m in sent] == ["user", "assistant"] * (len(sent) // 2) + ["user"] * (
        len(sent) % 2
    )
    for index, message in enumerate(sent):
        assert message["content"], "empty message"
        assert all(b.get("text") != "" for b in message["content"]), "empty text block"
        ids = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if ids:
            leading = sent[index + 1]["content"][: len(ids)]
            assert [b.get("tool_use_id") for b in leading] == ids
            rest = sent[index + 1]["content"][len(ids) :]
            assert all(b["type"] == "text" for b in rest)


# ----------------------------------------------------------------------- parse_response


def test_final_answer_usage_and_provider_ref() -> None:
    body = wire(
        text("It is "), text("sunny."), cache_read_input_tokens=100, cache_creation_input_tokens=20
    )
    output = parse_response(dump(body), request_id="req_123")
    assert output == ModelOutput(
        text="It is sunny.",
        stop="final",
        stop_detail="end_turn",
        usage={"input_tokens": 131, "output_tokens": 7},
        provider_ref=ProviderRef(
            provider="anthropic",
            api="messages",
            model="claude-test-2025",
            response_id="msg_1",
            request_id="req_123",
            raw_items=[{"role": "assistant", "content": dump(body)["content"]}],
        ),
    )


def test_tool_calls_parsed_with_digest_and_canonical_raw_arguments() -> None:
    output = parsed(
        text("Checking."),
        tool_use("toolu_a", city="Oslo", days=2),
        tool_use("toolu_b", "now"),
        stop="tool_use",
    )
    assert (output.stop, output.stop_detail, output.text) == ("tool_calls", "tool_use", "Checking.")
    assert output.tool_calls == [
        ToolCall(
            call_id="toolu_a",
            name="get_weather",
            arguments={"city": "Oslo", "days": 2},
            raw_arguments='{"city":"Oslo","days":2}',
            args_digest=args_digest("get_weather", {"city": "Oslo", "days": 2}),
        ),
        ToolCall(
            call_id="toolu_b", name="now", raw_arguments="{}", args_digest=args_digest("now", {})
        ),
    ]


@pytest.mark.parametrize(
    ("content", "stop_reason", "stop", "detail"),
    [
        ([text("hi")], "end_turn", "final", "end_turn"),
        ([text("hi")], "stop_sequence", "final", "stop_sequence"),
        ([tool_use("t")], "end_turn", "tool_calls", "end_turn with tool calls"),
        ([tool_use("t")], "tool_use", "tool_calls", "tool_use"),
        ([text("x")], "tool_use", "truncated", "tool_use without calls"),
        ([text("long")], "max_tokens", "truncated", "max_tokens"),
        ([tool_use("t")], "max_tokens", "truncated", "max_tokens while emitting tool input"),
        ([text("x")], "model_context_window_exceeded", "truncated", "model_context_window"),
        ([text("I can")], "refusal", "refused", "refusal"),
        ([text("x")], "pause_turn", "truncated", "pause_turn: turn still paused"),
        ([text("x")], None, "truncated", "response without a stop reason"),
        ([text("x")], "compaction", "truncated", "unknown stop reason 'compaction'"),
    ],
)
def test_stop_reasons(content: list[Json], stop_reason: str | None, stop: str, detail: str) -> None:
    body = wire(*content, stop=stop_reason)
    # The SDK does not validate a response: a stop reason it does not know arrives as is.
    output = parse_response(body if stop_reason == "compaction" else dump(body))
    assert output.stop == stop
    assert output.stop_detail.startswith(detail)


def test_refusal_keeps_partial_text_and_category() -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": None}
    body = {**wire(text("I can't help"), stop="refusal"), "stop_details": details}
    output = parse_response(dump(body))
    assert (output.stop, output.stop_detail, output.text) == (
        "refused",
        "refusal (cyber)",
        "I can't help",
    )


def test_call_without_id_truncates() -> None:
    output = parsed(tool_use(""), stop="tool_use")
    assert output.stop == "truncated"
    assert "#0: call has no id" in output.stop_detail


# -------------------------------------------------------------------- stream assembler


def stream_events(body: Json, pieces: dict[int, list[str]] | None = None) -> list[Json]:
    """The events the API streams for `body`: each tool_use input as the given fragments
    (default: the JSON in 3-character pieces), text and thinking in two halves."""
    pieces = pieces or {}
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "usage": {**body["usage"], "output_tokens": 1},
    }
    events: list[Json] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(body["content"]):
        deltas: list[Json] = []
        if block["type"] == "tool_use":
            raw = json.dumps(block["input"])
            parts = pieces.get(i) or [raw[n : n + 3] for n in range(0, len(raw), 3)]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in parts]
            block = {**block, "input": {}}
        elif block["type"] in ("text", "thinking"):
            key = block["type"]
            half = len(block[key]) // 2
            deltas = [
                {"type": f"{key}_delta", key: block[key][:half]},
                {"type": f"{key}_delta", key: block[key][half:]},
            ]
            if key == "thinking":
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
                block = {**block, "signature": ""}
            block = {**block, key: ""}
        events.append({"type": "content_block_start", "index": i, "content_block": block})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    usage = {"output_tokens": body["usage"]["output_tokens"]}
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    events.append({"type": "message_delta", "usage": usage, "delta": delta})
    return [*events, {"type": "message_stop"}]


def assemble(events: list[Json], request_id: str = "") -> ModelOutput:
    assembler = MessagesStreamAssembler(request_id)
    for event in events:
        assembler.feed(event)
    return assembler.finish()


def assert_same_turn(streamed: ModelOutput, whole: ModelOutput) -> None:
    """A streamed turn is the non-streamed one but for its raw items' null fields (the SDK's
    `model_dump()` fills in every optional field), which are never sent back (`_echo`)."""
    everything_else = {"provider_ref": {"raw_items"}}
    assert streamed.model_dump(exclude=everything_else) == whole.model_dump(exclude=everything_else)
    results = [result(call.call_id) for call in whole.tool_calls]
    sent_back = [
        build_request(request(UserInput(text="q"), turn, *results)) for turn in (streamed, whole)
    ]
    assert sent_back[0] == sent_back[1]


def test_text_thinking_and_redacted_stream_equals_non_streamed() -> None:
    body = wire(
        thinking("Let me see.", "EqQBsig"),
        REDACTED,
        text("It is sunny."),
        cache_read_input_tokens=5,
    )
    streamed = assemble(stream_events(body), request_id="req_9")
    assert streamed == parse_response(body, "req_9")
    assert_same_turn(streamed, parse_response(dump(body), "req_9"))
    assert streamed.usage.input_tokens == 16


def test_tool_use_stream_equals_non_streamed() -> None:
    body = wire(
        text("Checking."),
        tool_use("toolu_a", city="Oslo"),
        tool_use("toolu_b", "now"),
        stop="tool_use",
    )
    streamed = assemble(stream_events(body, {2: [""]}))
    assert streamed == parse_response(body)
    assert_same_turn(streamed, parse_response(dump(body)))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@st.composite
def interleaved(draw: st.DrawFn) -> tuple[Json, list[Json]]:
    """A message with 1-3 tool_use blocks and its stream, every input cut at random points
    (sometimes into single characters) and all blocks' deltas interleaved at random."""
    count = draw(st.integers(1, 3))
    inputs = st.dictionaries(st.text(max_size=5), json_values, max_size=3)
    content = [{**tool_use(f"toolu_{i}", f"tool_{i}"), "input": draw(inputs)} for i in range(count)]
    body = wire(*content, stop="tool_use")
    pieces: dict[int, list[str]] = {}
    for i, block in enumerate(content):
        raw = json.dumps(block["input"], indent=draw(st.sampled_from([None, 1])))
        if draw(st.booleans()):
            cuts = list(range(1, len(raw)))
        else:
            cuts = sorted(draw(st.sets(st.integers(1, len(raw) - 1), max_size=8)))
        pieces[i] = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    events = stream_events(body, pieces)
    head, tail = events[:1], events[-2:]
    queues = [[e for e in events[1:-2] if e.get("index") == i] for i in range(count)]
    middle: list[Json] = []
    while any(queues):
        middle.append(draw(st.sampled_from([q for q in queues if q])).pop(0))
    return body, head + middle + tail


@settings(max_examples=200, deadline=None)
@given(interleaved())
def test_property_any_split_and_interleaving_assembles_exactly(
    case: tuple[Json, list[Json]],
) -> None:
    body, events = case
    streamed = assemble(events)
    assert streamed == parse_response(body)
    assert streamed.stop == "tool_calls"
    assert [c.arguments for c in streamed.tool_calls] == [b["input"] for b in body["content"]]


def test_stream_without_message_stop_is_truncated() -> None:
    events = stream_events(wire(tool_use("toolu_a", x=1), stop="tool_use"))[:-1]
    streamed = assemble(events)
    assert streamed.stop == "truncated"
    assert streamed.stop_detail == "stream ended before message_stop"
    assert [c.arguments for c in streamed.tool_calls] == [{"x": 1}]


@pytest.mark.parametrize("bad", ['{"city": "Os', "[1, 2]", '{"x": NaN}', '{"a": 1}}'])
def test_invalid_tool_input_truncates_without_raising(bad: str) -> None:
    body = wire(tool_use("toolu_ok", a=1), tool_use("toolu_bad"), stop="tool_use")
    streamed = assemble(stream_events(body, {1: [bad[:3], bad[3:]]}))
    assert streamed.stop == "truncated"
    assert "toolu_bad" in streamed.stop_detail and "toolu_ok" not in streamed.stop_detail
    assert streamed.tool_calls[1].raw_arguments == bad
    assert streamed.tool_calls[1].arguments == {}


def test_max_tokens_mid_input_is_truncated() -> None:
    body = wire(text("Sending."), tool_use("toolu_a", body="Dear customer"), stop="max_tokens")
    streamed = assemble(stream_events(body, {1: ['{"body": "Dear cu']}))
    assert streamed.stop == "truncated"
    assert streamed.stop_detail.startswith("max_tokens while emitting tool input; call toolu_a")
    assert streamed.usage.output_tokens == 7


def test_delta_without_block_start_is_a_protocol_fault() -> None:
    events = stream_events(wire(text("hi")))
    events.insert(
        1, {"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta", "text": "x"}}
    )
    assert assemble(events).stop_detail == "text_delta for block 5 before its content_block_start"


def test_error_event_raises_provider_error() -> None:
    assembler = MessagesStreamAssembler()
    assembler.feed(stream_events(wire(text("x")))[0])
    with pytest.raises(ProviderError) as caught:
        assembler.feed({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    assert (caught.value.error_class, caught.value.retryable) == ("transient", True)


# --------------------------------------------------- complete() over the real client


def sse(events: list[Json]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


Handler = Callable[[httpx2.Request], httpx2.Response]


def adapter(handler: Handler) -> AnthropicMessagesAdapter:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    client = anthropic.AsyncAnthropic(
        api_key="test", base_url="http://provider.test", max_retries=0, http_client=http
    )
    return AnthropicMessagesAdapter(client)


def replying(bodies: list[Json], sent: list[Json], stream: bool = False) -> Handler:
    def handler(req: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(req.content))
        body = bodies[min(len(sent), len(bodies)) - 1]
        headers = {"request-id": f"req_{len(sent)}"}
        if stream:
            headers["content-type"] = "text/event-stream"
            return httpx2.Response(200, headers=headers, content=sse(stream_events(body)))
        return httpx2.Response(200, headers=headers, json=body)

    return handler


async def test_complete_non_streamed() -> None:
    sent: list[Json] = []
    body = wire(text("Hi."))
    output = await adapter(replying([body], sent)).complete(
        request(Instruction(text="sys"), UserInput(text="hello"), stream=False)
    )
    assert sent == [
        {
            "model": "claude-test",
            "max_tokens": DEFAULT_MAX_TOKENS,
            "system": "sys",
            "messages": [{"role": "user", "content": [text("hello")]}],
            "stream": False,
        }
    ]
    assert output == parse_response(dump(body), request_id="req_1")


async def test_complete_streamed() -> None:
    sent: list[Json] = []
    body = wire(thinking("hmm", "sig"), tool_use("toolu_a", a=1), stop="tool_use")
    reply = replying([body], sent, stream=True)
    headers: list[httpx2.Headers] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        headers.append(req.headers)
        return reply(req)

    output = await adapter(handler).complete(request(UserInput(text="go")))
    assert sent[0]["stream"] is True
    # Sent through the client's own `post`: its credentials and API version still go along.
    credentials = headers[0].get("x-api-key", "") + headers[0].get("authorization", "")
    assert "test" in credentials and headers[0]["anthropic-version"]
    assert output == parse_response(body, "req_1")  # the events as sent, never SDK objects
    assert output.stop == "tool_calls"


async def test_complete_streamed_without_message_stop_is_truncated() -> None:
    events = stream_events(wire(tool_use("toolu_a", a=1), stop="tool_use"))[:-1]

    def handler(req: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=sse(events))

    output = await adapter(handler).complete(request(UserInput(text="go")))
    assert (output.stop, output.stop_detail) == ("truncated", "stream ended before message_stop")


SEARCH: list[Json] = [
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.test",
                "title": "T",
                "encrypted_content": "enc",
                "page_age": "1 day",
            }
        ],
    },
]


@pytest.mark.parametrize("stream", [False, True])
async def test_complete_continues_a_paused_turn(stream: bool) -> None:
    sent: list[Json] = []
    paused = wire(text("Searching."), *SEARCH, stop="pause_turn", msg_id="msg_1")
    done = wire(text("Found it."), msg_id="msg_2", input_tokens=30, output_tokens=5)
    events: list[Event] = [UserInput(text="search"), tool_turn("toolu_a"), result("toolu_a")]
    as_it_was = [event.model_dump() for event in events]
    output = await adapter(replying([paused, done], sent, stream)).complete(
        request(*events, stream=stream)
    )
    # The bodies shared the transcript's own blocks; building the continuation and sending
    # both changed none of them.
    assert [event.model_dump() for event in events] == as_it_was
    assert len(sent) == 2
    assert sent[1]["messages"] == [
        *sent[0]["messages"],
        {"role": "assistant", "content": paused["content"]},
    ]
    assert output.text == "Searching.Found it."
    assert (output.stop, output.stop_detail) == ("final", "end_turn (1 pause_turn continuation(s))")
    assert (output.usage.input_tokens, output.usage.output_tokens) == (41, 12)
    # Streamed, the blocks are as the events carried them; else as the SDK's model dumps them.
    received = [paused, done] if stream else [dump(paused), dump(done)]
    blocks = [block for message in received for block in message["content"]]
    assert output.provider_ref.raw_items == [{"role": "assistant", "content": blocks}]
    assert (output.provider_ref.response_id, output.provider_ref.request_id) == ("msg_2", "req_2")


async def test_pause_turn_continuations_are_bounded() -> None:
    sent: list[Json] = []
    paused = wire(text("."), stop="pause_turn")
    output = await adapter(replying([paused], sent)).complete(
        request(UserInput(text="go"), stream=False)
    )
    assert len(sent) == MAX_PAUSE_CONTINUATIONS + 1
    assert output.stop == "truncated"
    assert output.stop_detail == (
        f"pause_turn: turn still paused, not continued further "
        f"({MAX_PAUSE_CONTINUATIONS} pause_turn continuation(s))"
    )
    assert sent[-1]["messages"][-1] == {
        "role": "assistant",
        "content": [text(".")] * MAX_PAUSE_CONTINUATIONS,
    }


def error_body(kind: str, message: str) -> Json:
    return {"type": "error", "error": {"type": kind, "message": message}}


@pytest.mark.parametrize(
    ("status", "headers", "kind", "retry_after"),
    [(429, {"retry-after": "2"}, "rate_limit_error", 2.0), (529, {}, "overloaded_error", None)],
)
async def test_complete_maps_http_errors(
    status: int, headers: dict[str, str], kind: str, retry_after: float | None
) -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers=headers, json=error_body(kind, "slow down"))

    with pytest.raises(ProviderError) as caught:
        await adapter(handler).complete(request(UserInput(text="go"), stream=False))
    e = caught.value
    assert (e.error_class, e.retryable, e.status_code, e.retry_after_seconds) == (
        "transient",
        True,
        status,
        retry_after,
    )


async def test_complete_maps_an_error_event_inside_a_stream() -> None:
    events = stream_events(wire(text("partial")))[:3]
    events.append(error_body("overloaded_error", "Overloaded"))

    def handler(req: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=sse(events))

    with pytest.raises(ProviderError) as caught:
        await adapter(handler).complete(request(UserInput(text="go")))
    e = caught.value
    assert (e.error_class, e.retryable, e.status_code) == ("transient", True, None)


async def test_long_non_streamed_request_refused_by_the_sdk_is_a_provider_error() -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        raise AssertionError("nothing is sent")

    with pytest.raises(ProviderError) as caught:
        await adapter(handler).complete(
            request(UserInput(text="go"), stream=False, max_output_tokens=64_000)
        )
    assert (caught.value.error_class, caught.value.retryable) == ("bad_request", False)
