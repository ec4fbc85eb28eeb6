"""OpenAI Responses adapter: round trips both ways, statuses, streams, failures.

Provider payloads are written as the API sends them (wire JSON) and passed through the SDK's own
models and `model_dump()`, as the adapter receives them. No network: the `complete` tests drive
the real `AsyncOpenAI` client over an `httpx2.MockTransport`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from agentloop.adapters.base import ModelRequest, ProviderError, UnsupportedEventError
from agentloop.adapters.openai_responses import (
    OpenAIResponsesAdapter,
    ResponsesStreamAssembler,
    build_request,
    classify_failure,
    parse_response,
)
from agentloop.contract import ModelSettings
from agentloop.digests import args_digest
from agentloop.envelope import enveloped, unwrapped
from agentloop.events import (
    Event,
    Instruction,
    ModelOutput,
    ProviderRef,
    StateUpdate,
    ToolCall,
    ToolResult,
    UserInput,
)
from agentloop.tool_spec import ToolSpec

Wire = dict[str, Any]

REASONING: Wire = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA=="}


def request(*events: Event, tools: list[ToolSpec] | None = None, **kw: Any) -> ModelRequest:
    return ModelRequest(
        provider="openai-responses",
        model="gpt-test",
        events=list(events),
        tools=tools or [],
        settings=ModelSettings(**kw),
    )


def inputs(*events: Event) -> list[Wire]:
    result: list[Wire] = build_request(request(*events))["input"]
    return result


def fc(call_id: str, name: str, arguments: str, status: str = "completed") -> Wire:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def msg(*texts: str, refusal: str | None = None, item_id: str = "msg_1") -> Wire:
    content: list[Wire] = [
        {"type": "output_text", "text": t, "annotations": [], "logprobs": []} for t in texts
    ]
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": content,
    }


def wire_response(
    *output: Wire,
    status: str = "completed",
    reason: str | None = None,
    error: Wire | None = None,
    usage: bool = True,
) -> Wire:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-test-2025",
        "status": status,
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "incomplete_details": {"reason": reason} if reason else None,
        "error": error,
        "usage": {
            "input_tokens": 11,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": 18,
        }
        if usage
        else None,
    }


def dumped(wire: Wire) -> Wire:
    """What the adapter receives: the SDK's `Response` for that body, `.model_dump()`ed."""
    return Response.model_validate(wire).model_dump()


def parsed(*output: Wire, request_id: str = "", **kw: Any) -> ModelOutput:
    return parse_response(dumped(wire_response(*output, **kw)), request_id)


def tool_turn(*ids: str) -> ModelOutput:
    return parsed(REASONING, *(fc(i, "get_weather", json.dumps({"city": i})) for i in ids))


def result(call_id: str, content: str = "ok") -> ToolResult:
    return ToolResult(call_id=call_id, tool="get_weather", content=content)


def output_of(call_id: str, content: str = "ok") -> Wire:
    """A result as sent: in its provenance envelope."""
    wrapped = enveloped(ToolResult(call_id=call_id, tool="get_weather", content=content))
    return {"type": "function_call_output", "call_id": call_id, "output": wrapped}


# ----------------------------------------------------------------------- build_request


def test_instructions_user_input_and_defaults() -> None:
    kwargs = build_request(
        request(Instruction(text="be brief"), UserInput(text="weather?"), Instruction(text="json"))
    )
    assert kwargs == {
        "model": "gpt-test",
        "input": [{"type": "message", "role": "user", "content": "weather?"}],
        "instructions": "be brief\n\njson",
        "stream": True,
        "store": False,
    }
    assert "instructions" not in build_request(request(UserInput(text="x")))


@pytest.mark.parametrize(
    ("model", "included"),
    [
        ("o4-mini", True),
        ("gpt-5", True),
        ("o3", True),
        ("gpt-5-chat-latest", False),
        ("gpt-4o", False),
        ("gpt-4.1-mini", False),
    ],
)
def test_encrypted_reasoning_is_asked_for_only_from_reasoning_models(
    model: str, included: bool
) -> None:
    kwargs = build_request(request(UserInput(text="x")).model_copy(update={"model": model}))
    assert ("include" in kwargs) is included
    if included:
        assert kwargs["include"] == ["reasoning.encrypted_content"]


def test_settings_only_when_set() -> None:
    kwargs = build_request(
        request(UserInput(text="x"), stream=False, max_output_tokens=256, temperature=0.2)
    )
    assert kwargs["stream"] is False
    assert kwargs["max_output_tokens"] == 256
    assert kwargs["temperature"] == 0.2
    assert "include" not in kwargs  # models without reasoning refuse it
    assert "tools" not in kwargs
    assert "previous_response_id" not in kwargs


def test_tools_shape() -> None:
    spec = ToolSpec(
        name="get_weather",
        description="Weather for a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    assert build_request(request(UserInput(text="x"), tools=[spec]))["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": False,
        }
    ]


def test_state_update_note_is_a_prefixed_user_message_and_empty_is_dropped() -> None:
    assert inputs(
        UserInput(text="go"),
        StateUpdate(kind="budget", data={"left": 3}),
        StateUpdate(kind="verdict", text="answer rejected: not JSON"),
    ) == [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "message", "role": "user", "content": "[agentloop] answer rejected: not JSON"},
    ]


def test_round_trip_of_every_event_kind() -> None:
    """The provider's items come back exactly (reasoning, message, function_call with id AND
    call_id); outputs follow in the model's call order whatever order results arrived in."""
    first = (
        REASONING,
        msg("Checking both."),
        fc("call_a", "f", '{ "x" : 1 }'),
        fc("call_b", "g", "{}"),
    )
    final = ({**REASONING, "id": "rs_2"}, msg("Done.", item_id="msg_2"))
    sent = inputs(
        Instruction(text="sys"),
        UserInput(text="q"),
        parsed(*first),
        StateUpdate(kind="approval", text="approved by ops"),
        result("call_b", "B"),
        UserInput(text="also this"),
        result("call_a", "A"),
        parsed(*final),
        UserInput(text="thanks"),
    )
    assert sent == [
        {"type": "message", "role": "user", "content": "q"},
        *first,
        output_of("call_a", "A"),
        output_of("call_b", "B"),
        {"type": "message", "role": "user", "content": "[agentloop] approved by ops"},
        {"type": "message", "role": "user", "content": "also this"},
        *final,
        {"type": "message", "role": "user", "content": "thanks"},
    ]


def test_echo_is_what_the_provider_sent() -> None:
    turn = tool_turn("call_a")
    sent = inputs(UserInput(text="q"), turn, result("call_a"))
    assert sent[1:3] == turn.provider_ref.raw_items


def test_model_dump_padding_and_output_only_fields_are_not_echoed() -> None:
    reasoning = {
        **REASONING,
        "status": "completed",
        "content": [{"type": "reasoning_text", "text": "hmm"}],
        "summary": [{"type": "summary_text", "text": "Thinking."}],
    }
    call = {**fc("call_a", "f", "{}"), "async": True, "namespace": "ns"}
    raw = dumped(wire_response(reasoning, call))
    assert raw["output"][1]["async_"] is True and raw["output"][1]["caller"] is None
    output = parse_response(raw)
    assert output.provider_ref.raw_items == [
        {**REASONING, "summary": [{"type": "summary_text", "text": "Thinking."}]},
        {**fc("call_a", "f", "{}"), "async": True, "namespace": "ns"},
    ]
    assert inputs(UserInput(text="q"), output, result("call_a"))[1:3] == (
        output.provider_ref.raw_items
    )


def test_rebuilt_without_raw_items() -> None:
    output = ModelOutput(
        text="Checking.",
        tool_calls=[
            ToolCall(call_id="c1", name="f", arguments={"b": 1, "a": "é"}),
            ToolCall(call_id="c2", name="g", arguments={"x": 1}, raw_arguments='{"x":  1}'),
        ],
        stop="tool_calls",
        provider_ref=ProviderRef(provider="openai-chat", raw_items=[{"role": "assistant"}]),
    )
    sent = inputs(UserInput(text="q"), output, result("c2"), result("c1"))
    assert sent[1:] == [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":"é","b":1}'},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x":  1}'},
        output_of("c1"),
        output_of("c2"),
    ]
    assert inputs(UserInput(text="q"), ModelOutput(stop="final")) == inputs(UserInput(text="q"))


def test_raw_items_that_miss_an_offered_call_are_not_trusted() -> None:
    output = tool_turn("call_a", "call_b")
    broken = output.model_copy(
        update={"provider_ref": output.provider_ref.model_copy(update={"raw_items": [REASONING]})}
    )
    sent = inputs(UserInput(text="q"), broken, result("call_a"), result("call_b"))
    assert [i["type"] for i in sent[1:]] == ["function_call"] * 2 + ["function_call_output"] * 2
    assert "id" not in sent[1]


def test_calls_of_a_truncated_output_are_not_sent() -> None:
    cut = fc("call_a", "send", '{"body": "Dear', status="incomplete")
    only_call = parsed(REASONING, cut, status="incomplete", reason="max_output_tokens")
    assert only_call.stop == "truncated"
    # the call needs an output it will never get, its reasoning item a following item
    assert inputs(UserInput(text="q"), only_call, UserInput(text="go on")) == [
        {"type": "message", "role": "user", "content": "q"},
        {"type": "message", "role": "user", "content": "go on"},
    ]
    with_text = parsed(
        REASONING, msg("Drafting."), cut, status="incomplete", reason="max_output_tokens"
    )
    assert inputs(UserInput(text="q"), with_text)[1:] == [REASONING, msg("Drafting.")]
    with pytest.raises(UnsupportedEventError, match="call_a"):
        inputs(UserInput(text="q"), only_call, result("call_a"))


@pytest.mark.parametrize("reused", [False, True], ids=["repeated", "reused"])
def test_an_output_refused_for_its_call_ids_is_sent_without_its_calls(reused: bool) -> None:
    """The runner stopped the run on it; a run continuing that one answers each of its calls
    `not_run`: they are told to the model as notes, never as a second output for one id."""
    earlier = [tool_turn("call_a"), result("call_a")] if reused else []
    tools = ["get_train_status"] if reused else ["get_weather", "get_train_status"]
    refused = parsed(REASONING, msg("Checking."), *[fc("call_a", tool, "{}") for tool in tools])
    answers = [
        ToolResult(call_id="call_a", tool=tool, status="rejected", content="not run")
        for tool in tools
    ]
    continued = StateUpdate(kind="continued", text="This run continues run r1.")
    sent = inputs(
        UserInput(text="q"), *earlier, refused, *answers, continued, UserInput(text="Go on.")
    )
    tail = sent[-len(tools) - 4 :]
    assert tail[:2] == [REASONING, msg("Checking.")]  # the reasoning item: the message follows
    assert tail[-2:] == [
        {"type": "message", "role": "user", "content": "[agentloop] This run continues run r1."},
        {"type": "message", "role": "user", "content": "Go on."},
    ]
    for item, tool in zip(tail[2:-2], tools, strict=True):
        assert item["role"] == "user"
        assert item["content"].startswith(f"[agentloop] Your call call_a ({tool}) never ran")
        assert unwrapped(item["content"].split("Its result: ")[1]) == "not run"


@pytest.mark.parametrize(
    ("events", "match"),
    [
        ((UserInput(text="q"), result("call_x")), "call_x.*answers no call"),
        ((tool_turn("call_a"), result("call_a"), result("call_a")), "duplicate.*call_a"),
        ((tool_turn("call_a", "call_b"), result("call_a"), tool_turn("call_c")), "call_b"),
        ((tool_turn("call_a"), UserInput(text="go on")), "no tool result.*call_a.*end"),
        ((UserInput(text="q"), ToolCall(call_id="c", name="f")), "standalone ToolCall"),
    ],
)
def test_invalid_conversations_are_refused(events: tuple[Event, ...], match: str) -> None:
    with pytest.raises(UnsupportedEventError, match=match):
        inputs(*events)


# ----------------------------------------------------------------------- parse_response


def test_final_answer_usage_and_provider_ref() -> None:
    output = parsed(REASONING, msg("It is ", "sunny."), request_id="req_123")
    assert output == ModelOutput(
        text="It is sunny.",
        stop="final",
        stop_detail="completed",
        usage={"input_tokens": 11, "output_tokens": 7},
        provider_ref=ProviderRef(
            provider="openai-responses",
            api="responses",
            model="gpt-test-2025",
            response_id="resp_1",
            request_id="req_123",
            raw_items=[REASONING, msg("It is ", "sunny.")],
        ),
    )


def test_missing_usage_counts_zero() -> None:
    output = parsed(msg("x"), usage=False)
    assert (output.usage.input_tokens, output.usage.output_tokens) == (0, 0)


def test_tool_calls_parsed_with_digest_and_raw_arguments() -> None:
    output = parsed(fc("call_a", "get_weather", '{"city": "Oslo"}'), fc("call_b", "now", ""))
    assert (output.stop, output.stop_detail) == ("tool_calls", "completed")
    assert output.tool_calls == [
        ToolCall(
            call_id="call_a",
            name="get_weather",
            arguments={"city": "Oslo"},
            raw_arguments='{"city": "Oslo"}',
            args_digest=args_digest("get_weather", {"city": "Oslo"}),
        ),
        ToolCall(call_id="call_b", name="now", args_digest=args_digest("now", {})),
    ]
    assert [i["id"] for i in output.provider_ref.raw_items] == ["fc_call_a", "fc_call_b"]


@pytest.mark.parametrize(
    ("output", "status", "reason", "stop", "detail"),
    [
        ([msg("hi")], "completed", None, "final", "completed"),
        ([msg("long")], "incomplete", "max_output_tokens", "truncated", "max_output_tokens"),
        (
            [msg("Sending."), fc("c", "f", '{"a": "par', status="incomplete")],
            "incomplete",
            "max_output_tokens",
            "truncated",
            "max_output_tokens while emitting tool arguments",
        ),
        ([msg("bad")], "incomplete", "content_filter", "content_filtered", "content_filter"),
        ([fc("c", "f", "{}")], "incomplete", "content_filter", "content_filtered", "content_f"),
        ([msg("x")], "incomplete", "max_messages", "truncated", "max_messages"),
        ([msg("x")], "incomplete", None, "truncated", "incomplete without a reason"),
        ([fc("c", "f", "{}")], "in_progress", None, "truncated", "response status 'in_progress'"),
        ([msg("x")], "cancelled", None, "truncated", "response status 'cancelled'"),
    ],
)
def test_statuses(
    output: list[Wire], status: str, reason: str | None, stop: str, detail: str
) -> None:
    result = parsed(*output, status=status, reason=reason)
    assert result.stop == stop
    assert result.stop_detail.startswith(detail)


@pytest.mark.parametrize(
    ("code", "error_class", "retryable"),
    [
        ("rate_limit_exceeded", "transient", True),
        ("server_error", "transient", True),
        ("invalid_prompt", "bad_request", False),
        ("image_too_large", "bad_request", False),
    ],
)
def test_failed_response_raises_classified(code: str, error_class: str, retryable: bool) -> None:
    error = {"code": code, "message": "it went wrong"}
    with pytest.raises(ProviderError) as caught:
        parsed(status="failed", error=error)
    e = caught.value
    assert (e.error_class, e.retryable, e.status_code) == (error_class, retryable, None)
    assert code in str(e) and "it went wrong" in str(e)


def test_classify_failure() -> None:
    assert classify_failure(None).retryable  # no code: a server failure
    assert classify_failure("invalid_prompt", "context length exceeded").error_class == (
        "context_length_exceeded"
    )


def test_refusal() -> None:
    output = parsed(msg(refusal="I can't help with that."))
    assert (output.stop, output.stop_detail) == ("refused", "refusal (completed)")
    assert output.text == "I can't help with that."
    assert output.provider_ref.raw_items == [msg(refusal="I can't help with that.")]


def test_an_empty_refusal_part_beside_the_text_is_no_refusal() -> None:
    output = parsed(msg("It is on time.", refusal=""))
    assert (output.stop, output.text) == ("final", "It is on time.")


@pytest.mark.parametrize("bad", ['{"city": "Os', "[1, 2]", '"text"', '{"x": NaN}'])
def test_arguments_that_are_not_a_json_object_truncate(bad: str) -> None:
    output = parsed(fc("call_ok", "f", '{"a": 1}'), fc("call_bad", "f", bad))
    assert output.stop == "truncated"
    assert "call_bad" in output.stop_detail and "call_ok" not in output.stop_detail
    assert [c.call_id for c in output.tool_calls] == ["call_ok", "call_bad"]
    assert (output.tool_calls[1].raw_arguments, output.tool_calls[1].arguments) == (bad, {})


def test_call_without_id_truncates() -> None:
    output = parsed({**fc("x", "f", "{}"), "call_id": ""})
    assert output.stop == "truncated"
    assert "#0: call has no id" in output.stop_detail


# ------------------------------------------------------------- ResponsesStreamAssembler

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
_seq = iter(range(1_000_000))


def ev(type: str, **fields: Any) -> Wire:
    """One stream event as the SDK hands it over: validated, then `.model_dump()`ed."""
    event = EVENTS.validate_python({"type": type, "sequence_number": next(_seq), **fields})
    dump: Wire = event.model_dump()
    return dump


def added(index: int, item: Wire) -> Wire:
    if item["type"] == "function_call":
        item = {**item, "arguments": "", "status": "in_progress"}
    elif item["type"] == "message":
        item = {**item, "content": [], "status": "in_progress"}
    return ev("response.output_item.added", output_index=index, item=item)


def done(index: int, item: Wire) -> Wire:
    return ev("response.output_item.done", output_index=index, item=item)


def args_delta(index: int, call_id: str, delta: str) -> Wire:
    return ev(
        "response.function_call_arguments.delta",
        output_index=index,
        item_id=f"fc_{call_id}",
        delta=delta,
    )


def text_delta(index: int, delta: str, content_index: int = 0) -> Wire:
    return ev(
        "response.output_text.delta",
        output_index=index,
        item_id="msg_1",
        content_index=content_index,
        delta=delta,
        logprobs=[],
    )


def terminal(response: Wire) -> Wire:
    return ev(f"response.{response['status']}", response=response)


def created() -> Wire:
    return ev("response.created", response=wire_response(status="in_progress", usage=False))


def assemble(events: list[Wire], request_id: str = "") -> ModelOutput:
    assembler = ResponsesStreamAssembler(request_id)
    for event in events:
        assembler.feed(event)
    return assembler.finish()


def test_text_stream_equals_non_streamed() -> None:
    final = wire_response(REASONING, msg("It is sunny."))
    events = [
        created(),
        added(0, REASONING),
        done(0, REASONING),
        added(1, msg("It is sunny.")),
        text_delta(1, "It is "),
        text_delta(1, "sunny."),
        done(1, msg("It is sunny.")),
        terminal(final),
    ]
    assert assemble(events, "req_9") == parse_response(dumped(final), "req_9")


def test_interleaved_parallel_calls_assemble_exactly() -> None:
    calls = [fc("call_a", "get_weather", '{"city": "Oslo"}'), fc("call_b", "now", '{"tz": 1}')]
    final = wire_response(*calls)
    events = [
        created(),
        added(0, calls[0]),
        args_delta(0, "call_a", '{"ci'),
        added(1, calls[1]),
        args_delta(1, "call_b", '{"tz"'),
        args_delta(0, "call_a", 'ty": "Oslo"}'),
        args_delta(1, "call_b", ": 1}"),
        done(1, calls[1]),
        done(0, calls[0]),
        terminal(final),
    ]
    streamed = assemble(events)
    assert streamed == parse_response(dumped(final))
    assert [c.arguments for c in streamed.tool_calls] == [{"city": "Oslo"}, {"tz": 1}]


def test_stream_without_terminal_event_is_truncated() -> None:
    call = fc("call_a", "f", '{"a": 1}')
    streamed = assemble(
        [created(), added(0, call), args_delta(0, "call_a", '{"a": 1}'), done(0, call)]
    )
    assert (streamed.stop, streamed.stop_detail) == (
        "truncated", "stream ended before response.completed",
    )  # fmt: skip
    assert [c.call_id for c in streamed.tool_calls] == ["call_a"]  # recorded, never offered


def test_incomplete_mid_arguments_is_truncated() -> None:
    cut = fc("call_a", "send_reply", '{"body": "Dear cust', status="incomplete")
    final = wire_response(cut, status="incomplete", reason="max_output_tokens")
    events = [added(0, cut), args_delta(0, "call_a", '{"body": "Dear cust'), done(0, cut)]
    streamed = assemble([*events, terminal(final)])
    assert streamed.stop == "truncated"
    assert streamed.stop_detail.startswith("max_output_tokens while emitting tool arguments")
    assert "call_a" in streamed.stop_detail
    assert streamed.usage.output_tokens == 7


def test_stream_that_disagrees_with_the_final_response_is_truncated() -> None:
    call = fc("call_a", "f", '{"a": 1}')
    events = [added(0, call), args_delta(0, "call_a", '{"a": 2}'), terminal(wire_response(call))]
    streamed = assemble(events)
    assert streamed.stop == "truncated"
    assert streamed.stop_detail == "stream and final response disagree on item #0 arguments"


def test_empty_final_output_falls_back_to_the_streamed_items() -> None:
    items = [REASONING, msg("Hi."), fc("call_a", "f", "{}")]
    events = [e for i, item in enumerate(items) for e in (added(i, item), done(i, item))]
    streamed = assemble([*events, terminal(wire_response())])
    assert streamed == parse_response(dumped(wire_response(*items)))


def test_refusal_stream() -> None:
    final = wire_response(msg(refusal="I can't do that."))
    events = [
        added(0, msg()),
        ev(
            "response.refusal.delta",
            output_index=0,
            item_id="msg_1",
            content_index=0,
            delta="I can't ",
        ),
        ev(
            "response.refusal.delta",
            output_index=0,
            item_id="msg_1",
            content_index=0,
            delta="do that.",
        ),
        terminal(final),
    ]
    assert assemble(events) == parse_response(dumped(final))


def test_failed_and_error_events_raise() -> None:
    failed = wire_response(
        status="failed", error={"code": "rate_limit_exceeded", "message": "slow"}
    )
    with pytest.raises(ProviderError) as caught:
        assemble([created(), ev("response.failed", response=failed)])
    assert (caught.value.error_class, caught.value.retryable) == ("transient", True)
    error = ev("error", code="invalid_prompt", message="bad input", param=None)
    with pytest.raises(ProviderError) as caught:
        assemble([created(), error])
    assert (caught.value.error_class, caught.value.retryable) == ("bad_request", False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@st.composite
def interleaved_stream(draw: st.DrawFn) -> tuple[list[Wire], list[Wire]]:
    """1-3 calls' argument strings cut at random points (1-char pieces included), their deltas
    interleaved at random (each call's own stay in order); also the calls as final items."""
    count = draw(st.integers(1, 3))
    calls, queues = [], []
    for index in range(count):
        args = json.dumps(draw(st.dictionaries(st.text(max_size=5), json_values, max_size=3)))
        if draw(st.booleans()):
            cuts = sorted(draw(st.sets(st.integers(1, len(args) - 1), max_size=8)))
        else:
            cuts = list(range(1, len(args)))  # one character per delta
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        call = fc(f"call_{index}", f"tool_{index}", args)
        calls.append(call)
        queues.append(
            [added(index, call)] + [args_delta(index, call["call_id"], p) for p in pieces]
        )
    events = [created()]
    while any(queues):
        events.append(draw(st.sampled_from([q for q in queues if q])).pop(0))
    return events, calls


@settings(max_examples=200, deadline=None)
@given(interleaved_stream(), st.booleans(), st.booleans())
def test_property_interleaved_fragments_assemble_exactly(
    case: tuple[list[Wire], list[Wire]], with_done: bool, empty_final: bool
) -> None:
    events, calls = case
    if with_done:
        events += [done(i, call) for i, call in enumerate(calls)]
    final = wire_response(*calls)
    streamed = assemble([*events, terminal(wire_response() if empty_final else final)])
    expected = parse_response(dumped(final))
    if with_done or not empty_final:
        assert streamed == expected
    else:  # nothing but the deltas to go on: the items still say `in_progress`
        assert streamed.model_dump(exclude={"provider_ref"}) == expected.model_dump(
            exclude={"provider_ref"}
        )
    assert streamed.stop == "tool_calls"
    assert [c.raw_arguments for c in streamed.tool_calls] == [c["arguments"] for c in calls]


# --------------------------------------------------- complete() over the real client


def sse(*events: Wire) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def adapter(handler: Callable[[httpx2.Request], httpx2.Response]) -> OpenAIResponsesAdapter:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    client = openai.AsyncOpenAI(
        api_key="test", base_url="http://provider.test/v1", max_retries=0, http_client=http
    )
    return OpenAIResponsesAdapter(client)


async def test_complete_non_streamed() -> None:
    sent: list[Wire] = []
    body = wire_response(REASONING, msg("Hi."))

    def handler(req: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(req.content))
        return httpx2.Response(200, headers={"x-request-id": "req_1"}, json=body)

    output = await adapter(handler).complete(request(UserInput(text="hello"), stream=False))
    assert sent == [
        {
            "model": "gpt-test",
            "input": [{"type": "message", "role": "user", "content": "hello"}],
            "stream": False,
            "store": False,
        }
    ]
    assert output == parse_response(dumped(body), request_id="req_1")
    assert output.text == "Hi."


async def test_complete_streamed_and_echoed_back() -> None:
    call = fc("call_a", "f", '{"a": 1}')
    final = wire_response(REASONING, call)
    body = sse(
        created(),
        added(0, REASONING),
        done(0, REASONING),
        added(1, call),
        args_delta(1, "call_a", '{"a"'),
        args_delta(1, "call_a", ": 1}"),
        done(1, call),
        terminal(final),
    )
    sent: list[Wire] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(req.content))
        headers = {"content-type": "text/event-stream", "x-request-id": "req_s"}
        return httpx2.Response(200, headers=headers, content=body)

    model = adapter(handler)
    output = await model.complete(request(UserInput(text="go")))
    assert output == parse_response(dumped(final), "req_s")
    transcript = [UserInput(text="go"), output, result("call_a", "A")]
    as_it_was = [event.model_dump() for event in transcript]
    await model.complete(request(*transcript))
    assert sent[1]["input"][1:] == [REASONING, call, output_of("call_a", "A")]
    # The body shared the output's own items; sending it changed none of them.
    assert [event.model_dump() for event in transcript] == as_it_was


async def test_complete_streamed_failure() -> None:
    failed = wire_response(status="failed", error={"code": "server_error", "message": "oops"})
    body = sse(created(), ev("response.failed", response=failed))

    def handler(req: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    with pytest.raises(ProviderError) as caught:
        await adapter(handler).complete(request(UserInput(text="go")))
    assert (caught.value.error_class, caught.value.retryable) == ("transient", True)


async def test_complete_rate_limited() -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        error = {
            "error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}
        }
        return httpx2.Response(429, headers={"retry-after-ms": "1500"}, json=error)

    with pytest.raises(ProviderError) as caught:
        await adapter(handler).complete(request(UserInput(text="go"), stream=False))
    e = caught.value
    assert (e.error_class, e.retryable, e.status_code, e.retry_after_seconds) == (
        "transient", True, 429, 1.5,
    )  # fmt: skip


def test_wire_fixtures_are_not_mutated() -> None:
    before = copy.deepcopy(REASONING)
    inputs(UserInput(text="q"), tool_turn("call_a"), result("call_a"))
    assert before == REASONING
