"""AgentRun end to end: real dev server, the official openai client over HTTP to the scripted
provider (which checks call-id pairing on every request), example tools over HTTP."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryRequest,
    QueryWorkflowRequest,
)
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agentloop.contract import AgentRunInput, Limits, RunStatusView
from agentloop.demo.services import ExampleService
from agentloop.envelope import unwrapped
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.worker import BoundedUpdatesRunner, running_worker, workflow_runner
from tests.live import Live, Servers, scripted
from tests.support import (
    deadline_timers,
    result_of,
    scheduled_activity_types,
    start_run,
    wait_for_phase,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

TRAIN_ARGS = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER_ARGS = {"city": "Shanghai", "date": "2026-12-01"}


def run_input(model: str, **overrides: Any) -> AgentRunInput:
    fields: dict[str, Any] = {
        "task": "Is train G1234 late on 2026-12-01, and what is the weather in Shanghai?",
        "provider": "openai-chat",
        "model": model,
        "tools": ["get_train_status", "get_weather"],
    }
    fields.update(overrides)
    return AgentRunInput.model_validate(fields)


def slow_train_script(name: str, final_text: str) -> Script:
    """One train read (the tests slow the service down), then a final answer."""
    return scripted(
        name,
        [tool_call("call_slow", "get_train_status", TRAIN_ARGS)],
        ScriptTurn(text=final_text),
    )


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


def tool_messages(provider: ScriptedProvider, script: str) -> dict[str, list[str]]:
    """Every tool message the model received, by tool_call_id."""
    seen: dict[str, list[str]] = {}
    last = [r for r in provider.requests if r["script"] == script][-1]
    for message in last["body"]["messages"]:
        if message["role"] == "tool":
            seen.setdefault(message["tool_call_id"], []).append(unwrapped(message["content"]))
    return seen


async def test_final_answer_without_tools(live: Live, run_id: str) -> None:
    live.provider.register(scripted(run_id, "All on time."))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    result = await result_of(handle)
    assert result.status == "completed"
    assert result.output == "All on time."
    assert (result.usage.model_calls, result.usage.tool_calls) == (1, 0)
    assert result.calls == []
    first = live.provider.requests[0]["body"]["messages"]
    assert first[-1] == {"role": "user", "content": run_input(run_id).task}


@pytest.mark.parametrize("stream", [True, False])
async def test_one_tool_call_result_comes_back_under_its_id(
    live: Live, run_id: str, stream: bool
) -> None:
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[tool_call("call_only", "get_train_status", TRAIN_ARGS)],
                expect_tool_results={"call_only": "G1234"},
            ),
            "G1234 is {{call_only.status}}.",
        )
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, stream=stream))
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert live.service.stats()["counts"]["trains"] == 1
    assert [(c.call_id, c.tool, c.status) for c in result.calls] == [
        ("call_only", "get_train_status", "succeeded")
    ]
    assert result.output == f"G1234 is {await _train_status(live.service)}."
    assert list(tool_messages(live.provider, run_id)) == ["call_only"]
    assert all(r["stream"] is stream for r in live.provider.requests)
    # Two model calls and a tool activity under the default 600 s deadline: one timer for it,
    # left running, not one started and cancelled around each of them.
    assert await deadline_timers(handle) == {"started": 1, "fired": 0, "cancelled": 0}
    history = await handle.fetch_history()
    assert [e.event_type for e in history.events].count(EventType.EVENT_TYPE_TIMER_STARTED) == 1


async def test_a_new_run_records_no_marker_and_runs_each_step_as_an_activity(
    live: Live, run_id: str
) -> None:
    """No patch marker (the first release is the baseline) and no local activity (a query
    answered while one ran could split its workflow task, and replay then diverges): the
    start, each model call and each tool call are ordinary activities. What a run with one
    tool turn costs in history is counted, with its stream off: the shape it had before
    streams (a publish from the model activity is a signal, and a workflow task)."""
    live.provider.register(
        scripted(
            run_id,
            [tool_call("call_w", "get_weather", WEATHER_ARGS)],
            "{{call_w.condition}}",
        )
    )
    handle = await start_run(
        live.client,
        live.worker,
        run_id,
        run_input(run_id).model_copy(update={"publish_events": False}),
    )
    assert (await result_of(handle)).status == "completed"
    events = (await handle.fetch_history()).events
    markers = [
        e.marker_recorded_event_attributes
        for e in events
        if e.HasField("marker_recorded_event_attributes")
    ]
    assert markers == []
    scheduled = scheduled_activity_types(events)
    assert scheduled == ["describe_run", "call_model", "run_tool", "call_model_by_ref"]
    kinds = [EventType.Name(e.event_type) for e in events]
    # One workflow task to start, then one as each activity comes back.
    assert kinds.count("EVENT_TYPE_WORKFLOW_TASK_COMPLETED") == 5
    versions = [
        e
        for e in events
        if "TemporalChangeVersion"
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
    assert versions == []
    # 23 when describe_run and the read were local activities (a marker each) and the run
    # marked its feature set (a marker and a version upsert): each activity is three events
    # and a workflow task more, the read's phase upserts two.
    assert len(events) == 33, kinds


async def test_a_worker_with_the_sandbox_on_runs_the_loop_in_it(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """`AGENTLOOP_WORKFLOW_SANDBOX=on`: the same loop, its tool activities included, runs
    inside Temporal's sandbox (which fails a workflow task on any
    access it restricts)."""
    sandboxed = worker_settings.model_copy(
        update={"workflow_sandbox": "on", "task_queue": f"{worker_settings.task_queue}-sandbox"}
    )
    sandboxed_runner = workflow_runner(sandboxed.workflow_sandbox)
    plain_runner = workflow_runner(worker_settings.workflow_sandbox)
    assert isinstance(sandboxed_runner, BoundedUpdatesRunner)
    assert isinstance(sandboxed_runner.inner, SandboxedWorkflowRunner)
    assert isinstance(plain_runner, BoundedUpdatesRunner)
    assert isinstance(plain_runner.inner, UnsandboxedWorkflowRunner)
    servers.provider.register(
        scripted(
            run_id,
            [tool_call("call_weather", "get_weather", WEATHER_ARGS)],
            [tool_call("call_train", "get_train_status", TRAIN_ARGS)],
            "{{call_train.train_number}} / {{call_weather.city}}",
        )
    )
    async with running_worker(servers.client, sandboxed):
        result = await result_of(
            await start_run(servers.client, sandboxed, run_id, run_input(run_id))
        )
    assert result.status == "completed", result.stop_reason
    assert result.output == "G1234 / Shanghai"
    assert [(c.call_id, c.status) for c in result.calls] == [
        ("call_weather", "succeeded"),
        ("call_train", "succeeded"),
    ]
    counts = servers.service.stats()["counts"]
    assert (counts["trains"], counts["weather"]) == (1, 1)


async def _train_status(example_service: ExampleService) -> str:
    # The service is the system of record: asking again returns the stored answer.
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{example_service.base_url}/travel/trains/G1234", params={"date": "2026-12-01"}
        ) as response,
    ):
        return str((await response.json())["status"])


@pytest.mark.parametrize("stream", [True, False])
async def test_parallel_reads_finishing_out_of_order_pair_by_call_id(
    live: Live, run_id: str, stream: bool
) -> None:
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[
                    tool_call("call_train", "get_train_status", TRAIN_ARGS),
                    tool_call("call_weather", "get_weather", WEATHER_ARGS),
                ],
                expect_tool_results={
                    "call_train": '"train_number": "G1234"',
                    "call_weather": '"city": "Shanghai"',
                },
            ),
            "{{call_train.train_number}} / {{call_weather.city}}",
        )
    )
    live.service.set_delay("trains", 300)
    try:
        handle = await start_run(live.client, live.worker, run_id, run_input(run_id, stream=stream))
        result = await result_of(handle)
    finally:
        live.service.set_delay("trains", 0)
    assert result.status == "completed", result.stop_reason
    assert result.output == "G1234 / Shanghai"
    stats = live.service.stats()
    assert stats["counts"]["trains"] == 1 and stats["counts"]["weather"] == 1
    by_endpoint = {r["endpoint"]: r for r in stats["requests"]}
    # Both were in flight together, and the first-requested one finished last.
    assert by_endpoint["weather"]["started_seq"] < by_endpoint["trains"]["finished_seq"]
    assert by_endpoint["trains"]["started_seq"] < by_endpoint["weather"]["finished_seq"]
    assert by_endpoint["weather"]["finished_seq"] < by_endpoint["trains"]["finished_seq"]
    results = tool_messages(live.provider, run_id)
    assert set(results) == {"call_train", "call_weather"}
    assert all(len(contents) == 1 for contents in results.values())
    assert '"city": "Shanghai"' in results["call_weather"][0]
    assert '"train_number": "G1234"' in results["call_train"][0]
    assert {c.call_id: c.status for c in result.calls} == {
        "call_train": "succeeded",
        "call_weather": "succeeded",
    }


async def test_stream_cut_inside_tool_arguments_is_incomplete_and_runs_nothing(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[tool_call("call_cut", "get_train_status", TRAIN_ARGS)],
                cut_stream_after_chars=12,
            ),
        )
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input(run_id)))
    assert result.status == "incomplete"
    assert "truncated" in result.stop_reason
    assert result.usage.tool_calls == 0
    assert sum(live.service.stats()["counts"].values()) == 0
    assert result.pending == [] or all(p.status != "succeeded" for p in result.pending)


async def test_length_stop_inside_tool_arguments_is_incomplete(live: Live, run_id: str) -> None:
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[tool_call("call_len", "get_train_status", '{"train_number": "G12')],
                finish_reason="length",
            ),
        )
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input(run_id)))
    assert result.status == "incomplete"
    assert sum(live.service.stats()["counts"].values()) == 0


async def test_unknown_tool_and_bad_arguments_go_back_to_the_model_under_their_ids(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[
                    tool_call("call_unknown", "book_flight", {"to": "Shanghai"}),
                    tool_call("call_bad", "get_weather", {"city": "Shanghai"}),
                    tool_call("call_ok", "get_weather", WEATHER_ARGS),
                ],
                expect_tool_results={
                    "call_unknown": "unknown_tool",
                    "call_bad": "invalid_arguments",
                    "call_ok": "Shanghai",
                },
                undeclared_tools=["book_flight"],
            ),
            ScriptTurn(
                tool_calls=[tool_call("call_fixed", "get_weather", WEATHER_ARGS)],
                expect_tool_results={"call_fixed": "Shanghai"},
            ),
            "done",
        )
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input(run_id)))
    assert result.status == "completed", result.stop_reason
    calls = {c.call_id: c for c in result.calls}
    assert (calls["call_unknown"].status, calls["call_unknown"].decision) == (
        "rejected",
        "unknown_tool",
    )
    assert (calls["call_bad"].status, calls["call_bad"].decision) == (
        "rejected",
        "invalid_arguments",
    )
    assert "date" in calls["call_bad"].result_summary
    assert calls["call_ok"].status == calls["call_fixed"].status == "succeeded"
    # Only the two valid calls reached the service; refused calls cost no tool budget.
    assert live.service.stats()["counts"]["weather"] == 2
    assert result.usage.tool_calls == 2


async def test_max_model_calls_stops_with_the_calls_so_far(live: Live, run_id: str) -> None:
    turns = [
        ScriptTurn(tool_calls=[tool_call(f"call_{i}", "get_weather", WEATHER_ARGS)])
        for i in range(5)
    ]
    live.provider.register(Script(name=run_id, turns=turns))
    run = run_input(run_id, limits=Limits(max_model_calls=2))
    result = await result_of(await start_run(live.client, live.worker, run_id, run))
    assert result.status == "limit_reached"
    assert "max_model_calls" in result.stop_reason
    assert result.usage.model_calls == 2
    assert result.report.startswith("Stopped: limit_reached — max_model_calls")
    assert "Side effects: none" in result.report
    assert f"To continue: agentloop continue {run_id} --max-model-calls N" in result.report
    assert [(c.call_id, c.status) for c in result.calls] == [
        ("call_0", "succeeded"),
        ("call_1", "succeeded"),
    ]
    assert live.service.stats()["counts"]["weather"] == 2
    assert len(live.provider.requests) == 2


@pytest.mark.parametrize(
    ("bad_input", "field"),
    [
        ({"provider": "cohere"}, "provider"),
        ({"task": ""}, "task"),
        ({"limits": {"max_model_calls": -1}}, "limits.max_model_calls"),
        ({"tools": ["no_such_tool"]}, "tools"),
    ],
)
async def test_bad_input_fails_the_run_at_once_naming_the_field(
    live: Live, run_id: str, bad_input: dict[str, Any], field: str
) -> None:
    raw = run_input("unused").model_dump(mode="json") | bad_input
    handle = await start_run(live.client, live.worker, run_id, raw)
    with pytest.raises(WorkflowFailureError) as failure:
        await result_of(handle)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidInput" and cause.non_retryable
    assert field in cause.message
    events = [e async for e in handle.fetch_history_events()]
    assert not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in events)


async def test_cancel_signal_stops_a_run_waiting_on_a_tool(live: Live, run_id: str) -> None:
    live.provider.register(slow_train_script(run_id, "never reached"))
    live.service.set_delay("trains", 5_000)
    try:
        handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
        await wait_for_phase(handle, "executing_tools")
        await handle.signal("cancel", {"reason": "user gave up"})
        result = await result_of(handle)
    finally:
        live.service.set_delay("trains", 0)
    assert result.status == "cancelled"
    assert "user gave up" in result.stop_reason
    assert result.usage.model_calls == 1
    assert [p.call_id for p in result.pending] == ["call_slow"]


@pytest.mark.parametrize(
    ("turn", "stop_word"),
    [
        (ScriptTurn(refusal="I can't help with that."), "refused"),
        (ScriptTurn(text="partial", finish_reason="content_filter"), "content_filter"),
    ],
)
async def test_refusal_and_content_filter_stop_the_run_refused(
    live: Live, run_id: str, turn: ScriptTurn, stop_word: str
) -> None:
    live.provider.register(scripted(run_id, turn))
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input(run_id)))
    assert result.status == "refused"
    assert stop_word in result.stop_reason
    assert result.output is None


async def test_a_non_retryable_provider_error_fails_the_run_after_one_attempt(
    live: Live, run_id: str
) -> None:
    # No script by this name: the provider answers 404 model_not_found.
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input(run_id)))
    assert result.status == "failed"
    assert result.stop_reason.startswith("model_error: Provider:not_found")
    assert "no such script; no script folder (`agentloop dev --scripts DIR`)" in result.report
    assert len(live.provider.requests) == 1


async def test_the_deadline_stops_a_run_waiting_on_a_slow_tool(live: Live, run_id: str) -> None:
    live.provider.register(slow_train_script(run_id, "never reached"))
    live.service.set_delay("trains", 5_000)
    try:
        handle = await start_run(
            live.client, live.worker, run_id, run_input(run_id, limits=Limits(deadline_seconds=1))
        )
        result = await result_of(handle)
    finally:
        live.service.set_delay("trains", 0)
    assert result.status == "limit_reached"
    assert result.stop_reason.startswith("deadline")
    assert [(p.call_id, p.status) for p in result.pending] == [("call_slow", "running")]
    assert len(live.provider.requests) == 1


async def test_status_query_reports_phase_usage_and_limits_left(live: Live, run_id: str) -> None:
    live.provider.register(slow_train_script(run_id, "ok"))
    live.service.set_delay("trains", 1_000)
    try:
        handle = await start_run(
            live.client, live.worker, run_id, run_input(run_id, limits=Limits(max_model_calls=3))
        )
        await wait_for_phase(handle, "executing_tools")
        view = await handle.query("status", result_type=RunStatusView)
        result = await result_of(handle)
    finally:
        live.service.set_delay("trains", 0)
    assert (view.turn, view.usage.model_calls, view.usage.tool_calls) == (1, 1, 1)
    assert view.limits_left is not None
    assert (view.limits_left.model_calls, view.limits_left.tool_calls) == (2, 31)
    assert [(c.call_id, c.status) for c in view.calls] == [("call_slow", "running")]
    assert result.status == "completed"
    final = await handle.query("status", result_type=RunStatusView)
    assert (final.phase, final.stop_reason) == ("finished", "final answer")


async def test_the_temporal_ui_reads_well(live: Live, run_id: str) -> None:
    """A static summary on the run, current details while it waits, activity summaries."""
    live.provider.register(
        scripted(
            run_id,
            [
                tool_call(
                    "call_w",
                    "send_reply",
                    {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "hi"},
                )
            ],
        )
    )
    run = run_input(
        run_id, tools=["send_reply"], principal={"subject": "agent", "scopes": ["tickets:write"]}
    )
    handle = await start_run(live.client, live.worker, run_id, run)
    await wait_for_phase(handle, "awaiting_approval")
    description = await handle.describe()
    assert await description.static_summary() == run.summary()
    assert run.task[:40] in run.summary() and "openai-chat" in run.summary()
    execution = WorkflowExecution(workflow_id=run_id)
    history = await live.client.workflow_service.get_workflow_execution_history(
        GetWorkflowExecutionHistoryRequest(namespace=live.client.namespace, execution=execution)
    )
    summaries = [
        json.loads(e.user_metadata.summary.data)
        for e in history.history.events
        if e.HasField("user_metadata") and e.user_metadata.HasField("summary")
    ]
    assert any(f"openai-chat {run_id} · turn 1" in s for s in summaries), summaries
    assert any(s.startswith("tools: send_reply") for s in summaries), summaries
    metadata = await live.client.workflow_service.query_workflow(
        QueryWorkflowRequest(
            namespace=live.client.namespace,
            execution=execution,
            query=WorkflowQuery(query_type="__temporal_workflow_metadata"),
        )
    )
    details = json.loads(metadata.query_result.payloads[0].data)["currentDetails"]
    assert "**awaiting_approval**" in details and "send_reply (call_w)" in details
    # What it waits for, who may decide, and how to answer: the command and the signal.
    command = f"`agentloop approve {run_id} call_w --approver NAME --digest "
    assert "approval of send_reply call_w by any approver: " + command in details, details
    assert 'update `decide_approval`: {"approved":true,"approver":"NAME","args_digest":' in details
    assert "waiting until 20" in details
    # The wait's timer says the same.
    [timer] = [s for s in summaries if s.startswith("awaiting_approval until ")]
    assert "approval of send_reply call_w by any approver: " + command in timer, timer
    await handle.cancel()
