"""Counted apart (issue #19 item 3, seed 003: model requests, tool executions and runtime
steps are counted separately): retries by Temporal are counted where they happen, and the
counts agree with what the scripted provider and the example service saw."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from agentloop.contract import AgentRunInput, RunStatusView
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptedError
from tests.support import result_of, start_run

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


async def test_retries_are_counted_where_they_happen_and_agree_with_the_systems(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    weather = {"city": "Oslo", "date": "2026-12-01"}
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        ScriptedToolCall(id="call_w", name="get_weather", arguments=weather)
                    ],
                    errors=[ScriptedError(status=500)],  # the first request fails, retried
                ),
                ScriptTurn(text="{{call_w.condition}}"),
            ],
        )
    )
    example_service.inject_fault("weather", "unavailable", count=2)  # third attempt answers
    run_input = AgentRunInput(
        task="Weather in Oslo?", provider="openai-chat", model=run_id, tools=["get_weather"]
    )
    handle = await start_run(client, worker, run_id, run_input)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    usage = result.usage
    requests = [r for r in scripted_provider.requests if r["script"] == run_id]
    at_service = example_service.stats()["counts"]["weather"]
    assert (usage.model_calls, usage.model_requests, len(requests)) == (2, 3, 3)
    assert (usage.tool_calls, usage.tool_attempts, at_service) == (1, 3, 3)
    [record] = result.calls
    assert (record.attempts, record.activity_attempts) == (1, 3)
    assert (usage.steps, usage.human_waits) == (3, 0)  # model call, tool step, model call
    view = await handle.query("status", result_type=RunStatusView)
    assert view.usage == usage
    assert "Counted: 3 model requests (retries included), 3 tool executions" in result.report
