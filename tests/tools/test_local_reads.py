"""Reads a tool declares `local` run as Temporal local activities: inside the workflow task, no
activity task round trip. Real dev server, the official openai client against the scripted
provider, the example service over HTTP; the history says how each call ran."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult, Limits
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.tool_spec import LOCAL_DEFAULT_TIMEOUT_SECONDS, LOCAL_MAX_TIMEOUT_SECONDS, ToolSpec
from agentloop.workflows import loop
from tests.support import local_activity_type, start_run

WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}


# --- the contract and the rule (pure) ---------------------------------------------------------


def test_only_a_short_read_may_be_local() -> None:
    spec = ToolSpec(name="weather", local=True)
    assert spec.local and spec.timeout_seconds == LOCAL_DEFAULT_TIMEOUT_SECONDS
    with pytest.raises(ValidationError, match="only a read may be local"):
        ToolSpec(name="reserve", effect="write", local=True)
    with pytest.raises(ValidationError, match="must finish within"):
        ToolSpec(name="slow", local=True, timeout_seconds=LOCAL_MAX_TIMEOUT_SECONDS + 1)


def test_a_batch_runs_locally_only_when_every_call_in_it_may() -> None:
    state = loop.LoopState.model_construct()
    local = ToolSpec(name="weather", local=True)
    remote = ToolSpec(name="train")
    assert loop.runs_locally(state, [local, local])
    # A mixed batch: the activity would only be scheduled once the local one is done.
    assert not loop.runs_locally(state, [local, remote])


# --- end to end ---------------------------------------------------------------------------------


def run_input(model: str) -> AgentRunInput:
    return AgentRunInput(
        task="Weather and trains",
        provider="openai-chat",
        model=model,
        tools=["get_train_status", "get_weather"],
    )


def tool_runs(history: WorkflowHistory) -> tuple[list[str], int]:
    """The call ids run as activities, and how many tool calls ran as local activities (their
    markers name a sequence number, not the call), from the history."""
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    as_activity = [
        json.loads(a.input.payloads[0].data)["call_id"]
        for a in scheduled
        if a.activity_type.name == "run_tool"
    ]
    as_local = sum(local_activity_type(event) == "run_tool" for event in history.events)
    return as_activity, as_local


def tool_messages(provider: ScriptedProvider) -> dict[str, str]:
    """The tool messages of the last request the model got, by tool_call_id."""
    last = provider.requests[-1]["body"]["messages"]
    return {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}


def register(
    provider: ScriptedProvider, name: str, turns: list[list[tuple[str, str, Any]]]
) -> None:
    provider.register(
        Script(
            name=name,
            turns=[
                *(
                    ScriptTurn(
                        tool_calls=[
                            ScriptedToolCall(id=call_id, name=tool, arguments=args)
                            for call_id, tool, args in calls
                        ]
                    )
                    for calls in turns
                ),
                ScriptTurn(text="done"),
            ],
        )
    )


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_batch_of_local_reads_runs_inside_the_workflow_task(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    other_city = {"city": "Beijing", "date": "2026-12-01"}
    register(
        scripted_provider,
        run_id,
        [[("call_sh", "get_weather", WEATHER), ("call_bj", "get_weather", other_city)]],
    )
    handle = await start_run(client, worker, run_id, run_input(run_id))
    result = await handle.result()

    assert result.status == "completed", result.stop_reason
    as_activity, as_local = tool_runs(await handle.fetch_history())
    assert as_activity == []
    assert as_local == 2
    assert example_service.stats()["counts"]["weather"] == 2
    # Each result went back under its own call id.
    messages = tool_messages(scripted_provider)
    assert set(messages) == {"call_sh", "call_bj"}
    assert "Shanghai" in messages["call_sh"] and "Beijing" in messages["call_bj"]
    assert {c.call_id: c.status for c in result.calls} == {
        "call_sh": "succeeded",
        "call_bj": "succeeded",
    }


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_mixed_batch_runs_every_call_as_an_activity(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    register(
        scripted_provider,
        run_id,
        [
            [("call_train", "get_train_status", TRAIN), ("call_weather", "get_weather", WEATHER)],
            [("call_alone", "get_weather", WEATHER)],
        ],
    )
    handle = await start_run(client, worker, run_id, run_input(run_id))
    result = await handle.result()

    assert result.status == "completed", result.stop_reason
    as_activity, as_local = tool_runs(await handle.fetch_history())
    # Side by side as activities; the weather read alone in its batch ran locally.
    assert sorted(as_activity) == ["call_train", "call_weather"]
    assert as_local == 1
    counts = example_service.stats()["counts"]
    assert counts["trains"] == 1 and counts["weather"] == 2
    assert set(tool_messages(scripted_provider)) == {"call_train", "call_weather", "call_alone"}


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_local_read_that_fails_transiently_is_retried(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    register(scripted_provider, run_id, [[("call_w", "get_weather", WEATHER)]])
    example_service.inject_fault("weather", "unavailable", count=1)
    handle = await start_run(client, worker, run_id, run_input(run_id))
    result = await handle.result()

    assert result.status == "completed", result.stop_reason
    requests = [r for r in example_service.stats()["requests"] if r["endpoint"] == "weather"]
    assert [r["status"] for r in requests] == [503, 200]
    assert [c.status for c in result.calls] == ["succeeded"]
    assert "Shanghai" in tool_messages(scripted_provider)["call_w"]
    _, as_local = tool_runs(await handle.fetch_history())
    assert as_local == 1  # one marker: the attempts are the local activity's own affair


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_local_batch_is_not_raced_against_a_deadline_timer(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    """A timer started beside local reads, and cancelled by their result, reaches history or
    not depending on whether the result comes back in the same workflow task, and a replay
    that decides otherwise diverges. A read that outlasts the workflow task (Temporal then
    completes the task to keep it alive) shows whether such a timer was started."""
    register(scripted_provider, run_id, [[("call_w", "get_weather", WEATHER)]])
    example_service.set_delay("weather", 1_500)
    handle = await client.start_workflow(
        WORKFLOW_NAME,
        run_input(run_id).model_copy(update={"limits": Limits(deadline_seconds=600)}),
        id=run_id,
        task_queue=worker.task_queue,
        result_type=AgentRunResult,
        task_timeout=timedelta(seconds=1),
    )
    result = await handle.result()

    assert result.status == "completed", result.stop_reason
    history = await handle.fetch_history()
    marker = next(e.event_id for e in history.events if local_activity_type(e) == "run_tool")
    before_the_read = [
        e.event_id
        for e in history.events
        if e.event_id < marker and e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    cancelled = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_CANCELED]
    started = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    # One timer for the run's deadline, started with the first model call and never
    # cancelled; none raced the read.
    assert len(started) == len(before_the_read) == 1
    assert cancelled == []
    assert example_service.stats()["counts"]["weather"] == 1


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_local_read_failing_on_every_attempt_is_told_to_the_model_not_failing_the_run(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    """The SDK raises a local activity's own ApplicationError (not an ActivityError) once its
    retries run out: before it was handled, a weather outage failed the whole run."""
    weather = {"city": "Oslo", "date": "2026-12-01"}
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        ScriptedToolCall(id="call_w", name="get_weather", arguments=weather)
                    ],
                    expect_tool_results={"call_w": "service error 503"},
                ),
                ScriptTurn(text="The weather service is down."),
            ],
        )
    )
    example_service.inject_fault("weather", "unavailable", count=10)
    run_input = AgentRunInput(
        task="Weather in Oslo?", provider="openai-chat", model=run_id, tools=["get_weather"]
    )
    handle = await start_run(client, worker, run_id, run_input)
    result = await handle.result()
    assert result.status == "completed", result.stop_reason
    [record] = result.calls
    assert (record.status, record.activity_attempts) == ("failed", 3)
    assert example_service.stats()["counts"]["weather"] == 3
    history = await handle.fetch_history()
    patches = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert any(b"local-activity-failures-handled" in e.SerializeToString() for e in patches)
