"""Counted apart (issue #19 item 3, seed 003: model requests, tool executions and runtime
steps are counted separately): retries by Temporal are counted where they happen, and the
counts agree with what the scripted provider and the example service saw."""

from __future__ import annotations

import pytest

from agentloop.contract import RunStatusView
from agentloop.scripted_provider import ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptedError
from tests.live import Live, agent_input, scripted
from tests.support import result_of, start_run

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


async def test_retries_are_counted_where_they_happen_and_agree_with_the_systems(
    live: Live, run_id: str
) -> None:
    weather = {"city": "Oslo", "date": "2026-12-01"}
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[ScriptedToolCall(id="call_w", name="get_weather", arguments=weather)],
                errors=[ScriptedError(status=500)],  # the first request fails, retried
            ),
            "{{call_w.condition}}",
        )
    )
    live.service.inject_fault("weather", "unavailable", count=2)  # third attempt answers
    run_input = agent_input(run_id, "openai-chat", "Weather in Oslo?", ["get_weather"])
    handle = await start_run(live.client, live.worker, run_id, run_input)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    usage = result.usage
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    at_service = live.service.stats()["counts"]["weather"]
    assert (usage.model_calls, usage.model_requests, len(requests)) == (2, 3, 3)
    assert (usage.tool_calls, usage.tool_attempts, at_service) == (1, 3, 3)
    [record] = result.calls
    assert (record.attempts, record.activity_attempts) == (1, 3)
    assert (usage.steps, usage.human_waits) == (3, 0)  # model call, tool step, model call
    view = await handle.query("status", result_type=RunStatusView)
    assert view.usage == usage
    assert "Counted: 3 model requests (retries included), 3 tool executions" in result.report
