"""History stays linear in the number of turns: the transcript travels by reference
(docs/concepts/design.md §2), so a late turn adds no more history than an early one."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType

from agentloop.activity_io import MODEL_CALLS
from agentloop.contract import Limits, Principal
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.store.artifacts import BY_REFERENCE_MIN_CHARS
from agentloop.testing.turns import call as scripted_call
from tests.live import Live, agent_input, scripted
from tests.support import result_of, start_run

pytestmark = pytest.mark.integration

TURNS = 30


def weather_turn(i: int) -> ScriptTurn:
    call_id = f"call_{i:03d}"
    return ScriptTurn(
        tool_calls=[
            scripted_call("get_weather", call_id, city="Shanghai", date=f"2026-12-{i:02d}")
        ],
        expect_tool_results={call_id: f"2026-12-{i:02d}"},
    )


async def test_history_bytes_per_turn_do_not_grow(live: Live, run_id: str) -> None:
    turns = [weather_turn(i) for i in range(1, TURNS + 1)] + [ScriptTurn(text="done")]
    live.provider.register(Script(name=run_id, turns=turns))
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Weather in Shanghai every day of December, please.",
        ["get_weather"],
        limits=Limits(max_model_calls=TURNS + 1, max_tool_calls=TURNS),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert result.usage.model_calls == TURNS + 1
    assert [c.status for c in result.calls] == ["succeeded"] * TURNS

    per_turn: list[int] = []
    async for event in handle.fetch_history_events():
        scheduled = event.activity_task_scheduled_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and scheduled.activity_type.name in MODEL_CALLS
        ):
            per_turn.append(0)
        if per_turn:
            per_turn[-1] += event.ByteSize()
    assert len(per_turn) == TURNS + 1
    first, last = per_turn[:10], per_turn[TURNS - 10 : TURNS]
    ratio = sum(last) / sum(first)
    assert 0.8 <= ratio <= 1.2, f"bytes per turn grew: first {first}, last {last}"


async def test_a_tool_results_content_is_in_history_once(live: Live, run_id: str) -> None:
    """The model gets the whole result, but the model call's input carries only the
    reference `run_tool` stored it under: the content is in history once, not twice."""
    search = scripted_call("search_policy", "call_s", query="refund")
    live.provider.register(scripted(run_id, [search], "done"))
    run_input = agent_input(
        run_id,
        "openai-chat",
        "What is the refund policy?",
        ["search_policy"],
        principal=Principal(subject="agent", scopes=["tickets:read"]),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason

    phrase = "escalate to billing"
    sent = live.provider.requests[-1]["body"]["messages"]
    [answer] = [m["content"] for m in sent if m.get("tool_call_id") == "call_s"]
    assert phrase in answer and len(answer) >= BY_REFERENCE_MIN_CHARS
    history = await handle.fetch_history()
    found = [e.event_type for e in history.events if phrase.encode() in e.SerializeToString()]
    assert found == [EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]  # run_tool's result
