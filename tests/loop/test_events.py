"""The canonical event model round-trips through Temporal's pydantic data converter, and
payloads written by older code (fewer fields) still decode."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter

from agentloop.digests import args_digest
from agentloop.events import (
    Event,
    Instruction,
    ModelOutput,
    ProviderRef,
    StateUpdate,
    ToolCall,
    ToolResult,
    Usage,
    UserInput,
)

CALL = ToolCall(
    call_id="call_1",
    name="get_weather",
    arguments={"city": "上海", "date": "2026-12-01"},
    raw_arguments='{"city":"上海","date":"2026-12-01"}',
    args_digest=args_digest("get_weather", {"city": "上海", "date": "2026-12-01"}),
)
EVENTS: list[Event] = [
    Instruction(text="be brief"),
    UserInput(text="weather?", sender="alice"),
    ModelOutput(
        text="",
        tool_calls=[CALL],
        stop="tool_calls",
        usage=Usage(input_tokens=10, output_tokens=5),
        provider_ref=ProviderRef(
            provider="openai-chat",
            api="chat.completions",
            model="m",
            response_id="r1",
            raw_items=[{"role": "assistant", "content": None, "tool_calls": []}],
        ),
    ),
    CALL,
    ToolResult(
        call_id="call_1",
        tool="get_weather",
        content='{"condition": "rain"}',
        state={"forecast_known": True},
    ),
    StateUpdate(kind="verification", text="try again", data={"round": 1}),
]


async def test_events_round_trip_through_the_temporal_converter() -> None:
    converter = pydantic_data_converter.payload_converter
    payloads = converter.to_payloads([EVENTS])
    (decoded,) = converter.from_payloads(payloads, [list[Event]])
    assert decoded == EVENTS
    assert [type(e) for e in decoded] == [type(e) for e in EVENTS]


def test_old_payloads_with_only_the_type_decode_with_defaults() -> None:
    adapter: TypeAdapter[Event] = TypeAdapter(Event)
    result = adapter.validate_json('{"type": "tool_result", "call_id": "c1"}')
    assert isinstance(result, ToolResult)
    assert (result.status, result.content, result.side_effect) == ("succeeded", "", False)
    output = adapter.validate_json('{"type": "model_output", "some_future_field": 1}')
    assert isinstance(output, ModelOutput) and output.stop == "final"


def test_events_are_frozen_and_the_discriminator_is_required() -> None:
    with pytest.raises(ValidationError):
        CALL.call_id = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        TypeAdapter(Event).validate_python({"call_id": "c1"})


def test_args_digest_binds_tool_and_exact_arguments() -> None:
    same = args_digest("get_weather", {"date": "2026-12-01", "city": "上海"})
    assert same == CALL.args_digest  # key order does not matter
    assert args_digest("get_weather", {"city": "上海", "date": "2026-12-02"}) != same
    assert args_digest("get_train_status", {"city": "上海", "date": "2026-12-01"}) != same
