"""OpenAI Chat Completions adapter: golden dicts both ways, streams, SDK error mapping.

No network: the few `complete` tests drive the real `AsyncOpenAI` client over an
`httpx2.MockTransport`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.adapters._openai import OPENAI_ERRORS
from agentloop.adapters._shared import SdkErrors, map_sdk_errors, parse_arguments
from agentloop.adapters.anthropic_messages import ANTHROPIC_ERRORS
from agentloop.adapters.base import ModelRequest, ProviderError, UnsupportedEventError
from agentloop.adapters.openai_chat import (
    ChatStreamAssembler,
    OpenAIChatAdapter,
    build_request,
    parse_response,
)
from agentloop.contract import ModelSettings
from agentloop.digests import args_digest
from agentloop.envelope import ENVELOPE_NOTE, enveloped
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

URL = "https://api.openai.com/v1/chat/completions"


def request(*events: Event, tools: list[ToolSpec] | None = None, **kw: Any) -> ModelRequest:
    return ModelRequest(
        provider="openai-chat",
        model="gpt-test",
        events=list(events),
        tools=tools or [],
        settings=ModelSettings(**kw),
    )


def messages(*events: Event) -> list[dict[str, Any]]:
    """The conversation as sent, without the envelope note (said once, after the run's own
    instructions, whenever a result is sent: `test_envelope_note_once_after_instructions`)."""
    result: list[dict[str, Any]] = build_request(request(*events))["messages"]
    return without_note(result)


NOTE = {"role": "system", "content": ENVELOPE_NOTE}


def without_note(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if NOTE not in sent:
        return sent
    assert sent.count(NOTE) == 1
    return [m for m in sent if m != NOTE]


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    """A `tool` message as sent: the result in its provenance envelope."""
    wrapped = enveloped(ToolResult(call_id=call_id, tool="get_weather", content=content))
    return {"role": "tool", "tool_call_id": call_id, "content": wrapped}


def completion(
    message: dict[str, Any], finish_reason: str | None = "stop", usage: bool = True
) -> dict[str, Any]:
    """A non-streamed chat.completion body, shaped like `ChatCompletion.model_dump()`."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test-2025",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "annotations": [],
                    "audio": None,
                    "function_call": None,
                    "tool_calls": None,
                    **message,
                },
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if usage
        else None,
    }
    return body


def fn_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_turn(*ids: str) -> ModelOutput:
    calls = [fn_call(i, "get_weather", json.dumps({"city": i})) for i in ids]
    return parse_response(completion({"tool_calls": calls}, "tool_calls"))


def result(call_id: str, content: str = "ok") -> ToolResult:
    return ToolResult(call_id=call_id, tool="get_weather", content=content)


# ----------------------------------------------------------------------- build_request


def test_instructions_user_input_and_defaults() -> None:
    kwargs = build_request(request(Instruction(text="be brief"), UserInput(text="weather?")))
    assert kwargs == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_settings_only_when_set() -> None:
    kwargs = build_request(
        request(UserInput(text="x"), stream=False, max_output_tokens=256, temperature=0.2)
    )
    assert kwargs["stream"] is False
    assert "stream_options" not in kwargs
    assert kwargs["max_completion_tokens"] == 256
    assert kwargs["temperature"] == 0.2
    assert "parallel_tool_calls" not in kwargs
    assert "tools" not in kwargs


def test_tools_mapping() -> None:
    spec = ToolSpec(
        name="get_weather",
        description="Weather for a city on a date.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        effect="read",
    )
    assert build_request(request(UserInput(text="x"), tools=[spec]))["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city on a date.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]


def test_state_update_note_is_a_prefixed_user_message_and_empty_is_dropped() -> None:
    assert messages(
        UserInput(text="go"),
        StateUpdate(kind="budget", data={"left": 3}),
        StateUpdate(kind="verdict", text="answer rejected: not JSON"),
    ) == [
        {"role": "user", "content": "go"},
        {"role": "user", "content": "[agentloop] answer rejected: not JSON"},
    ]


def test_raw_assistant_message_is_echoed_exactly() -> None:
    raw = {
        "role": "assistant",
        "content": None,
        "tool_calls": [fn_call("call_a", "get_weather", '{ "city" : "Oslo" }')],
        "provider_extra": {"kept": True},
    }
    output = ModelOutput(
        tool_calls=[ToolCall(call_id="call_a", name="get_weather", arguments={"city": "Oslo"})],
        stop="tool_calls",
        provider_ref=ProviderRef(provider="openai-chat", raw_items=[raw]),
    )
    sent = messages(UserInput(text="q"), output, result("call_a"))
    assert sent[1] == raw


def test_parsed_output_round_trips_to_the_message_the_provider_sent() -> None:
    message = {"content": "Checking.", "tool_calls": [fn_call("call_a", "f", '{"x": 1}')]}
    output = parse_response(completion(message, "tool_calls"))
    sent = messages(UserInput(text="q"), output, result("call_a"))
    assert sent[1] == {"role": "assistant", **message}


def test_assistant_rebuilt_without_raw_items() -> None:
    output = ModelOutput(
        tool_calls=[
            ToolCall(call_id="c1", name="f", arguments={"b": 1, "a": "é"}),
            ToolCall(call_id="c2", name="g", arguments={"x": 1}, raw_arguments='{"x":  1}'),
        ],
        stop="tool_calls",
        provider_ref=ProviderRef(provider="anthropic", raw_items=[{"type": "tool_use"}]),
    )
    sent = messages(UserInput(text="q"), output, result("c1"), result("c2"))
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [fn_call("c1", "f", '{"a":"é","b":1}'), fn_call("c2", "g", '{"x":  1}')],
    }
    final = ModelOutput(text="Done.", stop="final")
    assert messages(UserInput(text="q"), final)[1] == {"role": "assistant", "content": "Done."}


def test_tool_messages_follow_their_assistant_turn_and_notes_wait() -> None:
    sent = messages(
        Instruction(text="sys"),
        UserInput(text="q"),
        tool_turn("call_a", "call_b"),
        StateUpdate(kind="approval", text="approved by ops"),
        result("call_b", "B"),
        UserInput(text="also this"),
        StateUpdate(kind="bookkeeping"),
        result("call_a", "A"),
        tool_turn("call_c"),
        result("call_c", "C"),
    )
    assert [m["role"] for m in sent] == [
        "system", "user", "assistant", "tool", "tool", "user", "user", "assistant", "tool",
    ]  # fmt: skip
    # results keyed by call id and sent in the model's call order, whatever order they arrived in
    assert sent[3] == tool_message("call_a", "A")
    assert sent[4] == tool_message("call_b", "B")
    assert sent[5] == {"role": "user", "content": "[agentloop] approved by ops"}
    assert sent[6] == {"role": "user", "content": "also this"}
    assert sent[8] == tool_message("call_c", "C")


@pytest.mark.parametrize(
    ("events", "match"),
    [
        ((UserInput(text="q"), result("call_x")), "call_x.*answers no call"),
        ((tool_turn("call_a"), result("call_a"), result("call_a")), "duplicate.*call_a"),
        ((tool_turn("call_a", "call_b"), result("call_a"), tool_turn("call_c")), "call_b"),
        ((tool_turn("call_a"), UserInput(text="go on")), "no tool result.*call_a.*end"),
        ((tool_turn("call_a"),), "no tool result.*call_a"),
        ((tool_turn("call_a"), result("call_a"), result("call_z")), "call_z"),
        ((UserInput(text="q"), ToolCall(call_id="c", name="f")), "standalone ToolCall"),
    ],
)
def test_invalid_conversations_are_refused(events: tuple[Event, ...], match: str) -> None:
    with pytest.raises(UnsupportedEventError, match=match):
        messages(*events)


def not_run(call_id: str, tool: str) -> ToolResult:
    """What a run continuing a stopped one says of a call the stop left without a result."""
    content = '{"error": {"class": "not_run", "message": "the run stopped"}}'
    return ToolResult(call_id=call_id, tool=tool, status="rejected", content=content)


CONTINUED = StateUpdate(kind="continued", text="This run continues run r1, which stopped.")


@pytest.mark.parametrize("reused", [False, True], ids=["repeated", "reused"])
def test_an_output_refused_for_its_call_ids_is_sent_without_its_calls(reused: bool) -> None:
    """The runner stopped the run on it; a run continuing that one answers each of its calls
    `not_run`: they are told to the model as notes, never as a second result for one id."""
    earlier = [tool_turn("call_a"), result("call_a")] if reused else []
    tools = ["get_train_status"] if reused else ["get_weather", "get_train_status"]
    calls = [fn_call("call_a", tool, "{}") for tool in tools]
    refused = parse_response(
        completion({"content": "Checking.", "tool_calls": calls}, "tool_calls")
    )
    answers = [not_run("call_a", tool) for tool in tools]
    sent = messages(
        UserInput(text="q"), *earlier, refused, *answers, CONTINUED, UserInput(text="Go on.")
    )
    refused_at = 1 + len(earlier)  # an earlier turn: one message for each event
    assert sent[refused_at] == {"role": "assistant", "content": "Checking."}
    notes = sent[refused_at + 1 : refused_at + 1 + len(tools)]
    for note, tool in zip(notes, tools, strict=True):
        assert note["role"] == "user"
        assert note["content"].startswith(f"[agentloop] Your call call_a ({tool}) never ran")
        assert '"not_run"' in note["content"]
    assert sent[-2:] == [
        {"role": "user", "content": "[agentloop] " + CONTINUED.text},
        {"role": "user", "content": "Go on."},
    ]


def test_call_ids_are_unique_per_run_not_per_transcript() -> None:
    refused = tool_turn("call_a", "call_a")
    answers = [not_run("call_a", "get_weather")] * 2
    # The continuing run's runner never saw call_a: its own call_a is a call of its own...
    sent = messages(
        UserInput(text="q"), refused, *answers, CONTINUED, tool_turn("call_a"), result("call_a")
    )
    assert [m.get("tool_call_id") for m in sent] == [None] * 6 + ["call_a"]
    # ...but one it ran under the id of an earlier run's call cannot be told apart from it.
    with pytest.raises(UnsupportedEventError, match=r"duplicate.*call_a"):
        messages(
            tool_turn("call_a"), result("call_a"), CONTINUED, tool_turn("call_a"), result("call_a")
        )


def test_calls_of_a_truncated_output_are_not_sent() -> None:
    body = completion({"tool_calls": [fn_call("call_a", "f", '{"x": ')]}, "length")
    truncated = parse_response(body)
    assert truncated.stop == "truncated"
    sent = messages(UserInput(text="q"), truncated, UserInput(text="continue"))
    assert sent[1] == {"role": "assistant", "content": ""}
    with pytest.raises(UnsupportedEventError, match="call_a"):
        messages(UserInput(text="q"), truncated, result("call_a"))


# ----------------------------------------------------------------------- parse_response


def test_final_answer_usage_and_provider_ref() -> None:
    output = parse_response(completion({"content": "It is sunny."}), request_id="req_123")
    assert output == ModelOutput(
        text="It is sunny.",
        stop="final",
        stop_detail="stop",
        usage={"input_tokens": 11, "output_tokens": 7},
        provider_ref=ProviderRef(
            provider="openai-chat",
            api="chat.completions",
            model="gpt-test-2025",
            response_id="chatcmpl-1",
            request_id="req_123",
            raw_items=[{"role": "assistant", "content": "It is sunny."}],
        ),
    )


def test_missing_usage_counts_zero() -> None:
    output = parse_response(completion({"content": "x"}, usage=False))
    assert (output.usage.input_tokens, output.usage.output_tokens) == (0, 0)


def test_tool_calls_parsed_with_digest_and_raw_arguments() -> None:
    calls = [fn_call("call_a", "get_weather", '{"city": "Oslo"}'), fn_call("call_b", "now", "")]
    output = parse_response(completion({"tool_calls": calls}, "tool_calls"))
    assert output.stop == "tool_calls"
    assert output.stop_detail == "tool_calls"
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
    assert output.provider_ref.raw_items == [
        {"role": "assistant", "content": None, "tool_calls": calls}
    ]


@pytest.mark.parametrize(
    ("message", "finish", "stop", "detail"),
    [
        ({"content": "hi"}, "stop", "final", "stop"),
        ({"tool_calls": [fn_call("c", "f", "{}")]}, "function_call", "tool_calls", "function_call"),
        ({"tool_calls": [fn_call("c", "f", "{}")]}, "stop", "tool_calls", "stop with tool calls"),
        ({"content": "long ans"}, "length", "truncated", "length"),
        (
            {"tool_calls": [fn_call("c", "f", '{"a": "par')]},
            "length",
            "truncated",
            "length while emitting tool arguments",
        ),
        ({"content": "bad"}, "content_filter", "content_filtered", "content_filter"),
        ({"content": "x"}, "tool_calls", "truncated", "tool_calls without any tool call"),
        ({"content": "x"}, "eos", "truncated", "unknown finish reason 'eos'"),
        ({"content": "x"}, None, "truncated", "response without a finish reason"),
    ],
)
def test_finish_reasons(
    message: dict[str, Any], finish: str | None, stop: str, detail: str
) -> None:
    output = parse_response(completion(message, finish))
    assert output.stop == stop
    assert output.stop_detail.startswith(detail)


def test_refusal() -> None:
    output = parse_response(completion({"refusal": "I can't help with that."}))
    assert output.stop == "refused"
    assert output.text == "I can't help with that."
    assert output.provider_ref.raw_items == [
        {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    ]


@pytest.mark.parametrize("bad", ['{"city": "Os', "[1, 2]", '"text"', '{"x": NaN}'])
def test_arguments_that_are_not_a_json_object_truncate(bad: str) -> None:
    calls = [fn_call("call_ok", "f", '{"a": 1}'), fn_call("call_bad", "f", bad)]
    output = parse_response(completion({"tool_calls": calls}, "tool_calls"))
    assert output.stop == "truncated"
    assert "call_bad" in output.stop_detail
    assert "call_ok" not in output.stop_detail
    assert [c.call_id for c in output.tool_calls] == ["call_ok", "call_bad"]
    assert output.tool_calls[1].raw_arguments == bad
    assert output.tool_calls[1].arguments == {}


def test_call_without_id_truncates() -> None:
    output = parse_response(completion({"tool_calls": [fn_call("", "f", "{}")]}, "tool_calls"))
    assert output.stop == "truncated"
    assert "#0: call has no id" in output.stop_detail


def test_parse_arguments_empty_is_empty_object() -> None:
    assert parse_arguments("") == {}
    assert parse_arguments("  ") == {}


# ------------------------------------------------------------------- ChatStreamAssembler


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test-2025",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}],
        "usage": None,
    }


USAGE_CHUNK: dict[str, Any] = {
    **chunk(),
    "choices": [],
    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
}


def assemble(chunks: list[dict[str, Any]], request_id: str = "") -> ModelOutput:
    assembler = ChatStreamAssembler(request_id)
    for c in chunks:
        assembler.feed(c)
    return assembler.finish()


def frag(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> Any:
    first = call_id is not None
    return {
        "index": index,
        "id": call_id,
        "type": "function" if first else None,
        "function": {"name": name, "arguments": arguments},
    }


def test_text_stream_equals_non_streamed() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "", "refusal": None}),
        chunk({"content": "It is "}),
        chunk({"content": "sunny."}),
        chunk(finish="stop"),
        USAGE_CHUNK,
    ]
    streamed = assemble(chunks, request_id="req_9")
    assert streamed == parse_response(completion({"content": "It is sunny."}), "req_9")


def test_interleaved_parallel_calls_assemble_exactly() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "", "refusal": None}),
        chunk({"tool_calls": [frag(0, "", "call_a", "get_weather")]}),
        chunk({"tool_calls": [frag(1, '{"ci', "call_b", "get_train_status")]}),
        chunk({"tool_calls": [frag(0, '{"city": ')]}),
        chunk({"tool_calls": [frag(1, 'ty": "Bergen"}'), frag(0, '"Oslo"}')]}),
        chunk(finish="tool_calls"),
        USAGE_CHUNK,
    ]
    streamed = assemble(chunks)
    calls = [
        fn_call("call_a", "get_weather", '{"city": "Oslo"}'),
        fn_call("call_b", "get_train_status", '{"city": "Bergen"}'),
    ]
    assert streamed == parse_response(completion({"tool_calls": calls}, "tool_calls"))
    assert [c.arguments for c in streamed.tool_calls] == [{"city": "Oslo"}, {"city": "Bergen"}]


def test_stream_without_finish_reason_is_truncated() -> None:
    streamed = assemble(
        [chunk({"content": "Let me"}), chunk({"tool_calls": [frag(0, "{}", "call_a", "f")]})]
    )
    assert streamed.stop == "truncated"
    assert streamed.stop_detail == "stream ended before a finish reason"
    assert [c.call_id for c in streamed.tool_calls] == ["call_a"]


def test_stream_length_mid_arguments_is_truncated() -> None:
    streamed = assemble(
        [chunk({"tool_calls": [frag(0, '{"body": "Dear cust', "call_a", "send_reply")]}),
         chunk(finish="length"), USAGE_CHUNK]
    )  # fmt: skip
    assert streamed.stop == "truncated"
    assert streamed.stop_detail.startswith("length while emitting tool arguments")
    assert "call_a" in streamed.stop_detail
    assert streamed.usage.output_tokens == 7


def test_usage_chunk_after_finish_and_refusal_stream() -> None:
    streamed = assemble(
        [chunk({"role": "assistant", "content": ""}), chunk({"refusal": "I can't "}),
         chunk({"refusal": "do that."}), chunk(finish="stop"),
         USAGE_CHUNK]
    )  # fmt: skip
    assert streamed == parse_response(completion({"refusal": "I can't do that."}))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@st.composite
def interleaved_stream(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """1-3 calls' argument strings, cut at random points, interleaved at random (each call's
    own fragments stay in order); also the equivalent non-streamed tool_calls list."""
    count = draw(st.integers(1, 3))
    calls, queues = [], []
    for index in range(count):
        args = json.dumps(draw(st.dictionaries(st.text(max_size=5), json_values, max_size=3)))
        cuts = sorted(draw(st.sets(st.integers(0, len(args)), max_size=6)))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        call_id, name = f"call_{index}", f"tool_{index}"
        calls.append(fn_call(call_id, name, args))
        queues.append(
            [frag(index, pieces[0], call_id, name)] + [frag(index, p) for p in pieces[1:]]
        )
    chunks = []
    while any(queues):
        live = [q for q in queues if q]
        batch = [q.pop(0) for q in draw(st.permutations(live))[: draw(st.integers(1, len(live)))]]
        chunks.append(chunk({"tool_calls": batch}))
    return chunks, calls


@settings(max_examples=200, deadline=None)
@given(interleaved_stream())
def test_property_interleaved_fragments_assemble_exactly(
    case: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    chunks, calls = case
    streamed = assemble([*chunks, chunk(finish="tool_calls"), USAGE_CHUNK])
    assert streamed == parse_response(completion({"tool_calls": calls}, "tool_calls"))
    assert streamed.stop == "tool_calls"
    assert [c.raw_arguments for c in streamed.tool_calls] == [
        c["function"]["arguments"] for c in calls
    ]


# ------------------------------------------------------------------------ SDK errors


def http_response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, headers=headers, request=httpx2.Request("POST", URL))


def mapped(error: BaseException, sdk: SdkErrors = OPENAI_ERRORS) -> ProviderError:
    with pytest.raises(ProviderError) as caught, map_sdk_errors(sdk):
        raise error
    assert caught.value.__cause__ is error
    return caught.value


def test_rate_limit_with_retry_after_ms() -> None:
    err = openai.RateLimitError(
        "Rate limit reached",
        response=http_response(429, {"retry-after-ms": "1500", "retry-after": "9"}),
        body=None,
    )
    e = mapped(err)
    assert (e.error_class, e.retryable, e.status_code) == ("transient", True, 429)
    assert e.retry_after_seconds == 1.5


def test_server_error_is_transient() -> None:
    e = mapped(openai.InternalServerError("boom", response=http_response(500), body=None))
    assert (e.error_class, e.retryable, e.status_code, e.retry_after_seconds) == (
        "transient", True, 500, None,
    )  # fmt: skip


def test_context_length_is_not_retryable() -> None:
    body = {"message": "Input is over the model's limit.", "code": "context_length_exceeded"}
    err = openai.BadRequestError("Error code: 400", response=http_response(400), body=body)
    e = mapped(err)
    assert (e.error_class, e.retryable, e.status_code) == ("context_length_exceeded", False, 400)


def test_authentication_error() -> None:
    e = mapped(openai.AuthenticationError("bad key", response=http_response(401), body=None))
    assert (e.error_class, e.retryable, e.status_code) == ("authentication", False, 401)


@pytest.mark.parametrize(
    "error",
    [
        openai.APIConnectionError(request=httpx2.Request("POST", URL)),
        openai.APITimeoutError(request=httpx2.Request("POST", URL)),
        httpx2.ReadError("peer closed connection mid-stream"),
    ],
)
def test_connection_errors_are_transient(error: Exception) -> None:
    e = mapped(error)
    assert (e.error_class, e.retryable, e.status_code) == ("transient", True, None)


@pytest.mark.parametrize(
    "error",
    [
        anthropic.APIConnectionError(request=httpx2.Request("POST", URL)),
        httpx2.ReadError("peer closed connection mid-stream"),
    ],
)
def test_anthropic_connection_errors_are_transient(error: Exception) -> None:
    e = mapped(error, ANTHROPIC_ERRORS)
    assert (e.error_class, e.retryable, e.status_code) == ("transient", True, None)


def test_error_events_inside_a_stream_are_classified_by_type() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    err = anthropic.APIStatusError("busy", response=http_response(200), body=overloaded)
    e = mapped(err, ANTHROPIC_ERRORS)
    assert (e.error_class, e.retryable, e.status_code) == ("transient", True, None)
    invalid = openai.APIError(
        "bad", httpx2.Request("POST", URL), body={"type": "invalid_request_error"}
    )
    e = mapped(invalid)
    assert (e.error_class, e.retryable) == ("bad_request", False)


def test_non_sdk_errors_pass_through() -> None:
    with pytest.raises(KeyError), map_sdk_errors(OPENAI_ERRORS):
        raise KeyError("ours")


# --------------------------------------------------- complete() over the real client


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + (
        b"data: [DONE]\n\n"
    )


class _DroppedStream(httpx2.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield sse(chunk({"content": "Hel"})).removesuffix(b"data: [DONE]\n\n")
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete body")


def adapter(handler: Callable[[httpx2.Request], httpx2.Response]) -> OpenAIChatAdapter:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    client = openai.AsyncOpenAI(
        api_key="test", base_url="http://provider.test/v1", max_retries=0, http_client=http
    )
    return OpenAIChatAdapter(client)


async def test_complete_non_streamed() -> None:
    sent: list[dict[str, Any]] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(req.content))
        return httpx2.Response(
            200, headers={"x-request-id": "req_1"}, json=completion({"content": "Hi."})
        )

    output = await adapter(handler).complete(request(UserInput(text="hello"), stream=False))
    assert sent == [
        {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}], "stream": False}
    ]
    assert output == parse_response(completion({"content": "Hi."}), request_id="req_1")


async def test_complete_streamed() -> None:
    calls = [fn_call("call_a", "f", '{"a": 1}')]
    body = sse(
        chunk({"tool_calls": [frag(0, '{"a"', "call_a", "f")]}),
        chunk({"tool_calls": [frag(0, ": 1}")]}),
        chunk(finish="tool_calls"),
        USAGE_CHUNK,
    )

    sent: list[dict[str, Any]] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(req.content))
        headers = {"content-type": "text/event-stream", "x-request-id": "req_s"}
        return httpx2.Response(200, headers=headers, content=body)

    model = adapter(handler)
    output = await model.complete(request(UserInput(text="go")))
    assert output == parse_response(completion({"tool_calls": calls}, "tool_calls"), "req_s")
    transcript = [UserInput(text="go"), output, result("call_a", "A")]
    as_it_was = [event.model_dump() for event in transcript]
    await model.complete(request(*transcript))
    assert without_note(sent[1]["messages"])[1] == output.provider_ref.raw_items[0]
    # The body shared the output's own message; sending it changed nothing in the transcript.
    assert [event.model_dump() for event in transcript] == as_it_was


def ollama_call(call_id: str, name: str, arguments: str, index: int | None) -> dict[str, Any]:
    """A call whole in one fragment, as Ollama streams each of parallel calls."""
    fragment = fn_call(call_id, name, arguments)
    return fragment if index is None else {"index": index, **fragment}


OLLAMA_CALLS = [
    ("call_oslo", "get_weather", '{"city": "Oslo"}'),
    ("call_train", "get_train_status", '{"train": "G1234"}'),
    ("call_bergen", "get_weather", '{"city": "Bergen"}'),
]


@pytest.mark.parametrize(
    "shape",
    [
        # every call on index 0, each in a chunk of its own; then all in one chunk
        [chunk({"tool_calls": [ollama_call(*call, index=0)]}) for call in OLLAMA_CALLS],
        [chunk({"tool_calls": [ollama_call(*call, index=0) for call in OLLAMA_CALLS]})],
        # no index at all
        [chunk({"tool_calls": [ollama_call(*call, index=None)]}) for call in OLLAMA_CALLS],
    ],
    ids=["index-0-chunk-each", "index-0-one-chunk", "no-index"],
)
async def test_parallel_calls_a_compatible_server_streams_on_one_index_stay_apart(
    shape: list[dict[str, Any]],
) -> None:
    body = sse(chunk({"role": "assistant", "content": ""}), *shape, chunk(finish="stop"))
    sent: list[dict[str, Any]] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(req.content))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    model = adapter(handler)
    output = await model.complete(request(UserInput(text="go")))
    assert output.stop == "tool_calls"
    assert [(c.call_id, c.name, c.raw_arguments) for c in output.tool_calls] == OLLAMA_CALLS
    # Results pair with their calls by id, whatever order they come in.
    answers = [result(call_id, f"answer to {call_id}") for call_id, _, _ in OLLAMA_CALLS]
    await model.complete(request(UserInput(text="go"), output, *reversed(answers)))
    assistant, *tool_messages = without_note(sent[1]["messages"])[1:]
    assert [c["id"] for c in assistant["tool_calls"]] == [i for i, _, _ in OLLAMA_CALLS]
    assert tool_messages == [
        tool_message(call_id, f"answer to {call_id}") for call_id, _, _ in OLLAMA_CALLS
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_empty_refusal_is_no_refusal(stream: bool) -> None:
    """Some compatible servers send `refusal: ""` with every answer (streamed: beside the
    opening `content: ""`)."""
    answer = completion({"content": "It is sunny.", "refusal": ""})
    body = sse(
        chunk({"role": "assistant", "content": "", "refusal": ""}),
        chunk({"content": "It is sunny."}),
        chunk(finish="stop"),
        USAGE_CHUNK,
    )

    def handler(req: httpx2.Request) -> httpx2.Response:
        if stream:
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)
        return httpx2.Response(200, json=answer)

    output = await adapter(handler).complete(request(UserInput(text="hello"), stream=stream))
    assert output == parse_response(completion({"content": "It is sunny."}))


async def test_complete_maps_a_connection_dropped_mid_stream() -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, stream=_DroppedStream())

    with pytest.raises(ProviderError) as caught:
        await adapter(handler).complete(request(UserInput(text="go")))
    assert (caught.value.error_class, caught.value.retryable) == ("transient", True)


async def test_complete_maps_http_errors() -> None:
    def handler(req: httpx2.Request) -> httpx2.Response:
        error = {"error": {"message": "slow down", "type": "requests", "code": "rate_limit"}}
        return httpx2.Response(429, headers={"retry-after": "2"}, json=error)

    with pytest.raises(ProviderError) as caught:
        await adapter(handler).complete(request(UserInput(text="go"), stream=False))
    e = caught.value
    assert (e.error_class, e.retryable, e.status_code, e.retry_after_seconds) == (
        "transient", True, 429, 2.0,
    )  # fmt: skip
