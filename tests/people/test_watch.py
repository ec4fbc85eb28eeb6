"""Watching a run as it happens (`agentloop.watch`, the run's Workflow Stream): the model's
text while the scripted provider still streams it, each call before its result, waits and
their end, a retried call's text superseded, a late subscriber, and a run that publishes
nothing when its input says so."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.worker import Replayer

import agentloop
from agentloop.cli.parser import build_parser
from agentloop.cli.starting import build_run_input
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    RunStatusView,
)
from agentloop.run_events import MAX_FOREIGN_ITEMS, MAX_RETAINED_ITEMS, TOPIC, RunEvent
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import (
    ScriptedError,
    ScriptedToolCall,
    ScriptTurn,
)
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from agentloop.workflows.agent_run import AgentRun
from tests.cli.test_cli import agentloop as agentloop_cli
from tests.cli.test_cli import process_env
from tests.cli.test_cli_runs import cli_process
from tests.live import Live, Servers, scripted
from tests.support import (
    read_until,
    result_of,
    signal_approval,
    start_run,
    wait_for_status,
    waited_for,
    worker_env,
    worker_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER_CALL = scripted_call("get_weather", "call_w", **WEATHER)
CITIES = ["Beijing", "Shanghai", "Oslo", "Paris", "Rome", "Lima"]
ANSWER = "The train is on time, and Shanghai is " + "sunny and mild today. " * 12


def run_input(model: str, **fields: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Is G1234 late, and the weather in Shanghai?",
            "provider": "openai-chat",
            "model": model,
            "tools": ["get_train_status", "get_weather"],
            **fields,
        }
    )


async def collect(client: Client, run_id: str, **kwargs: Any) -> list[RunEvent]:
    return [event async for event in agentloop.watch(client, run_id, **kwargs)]


def shown_text(events: list[RunEvent]) -> str:
    """What a client shows: each turn's text since its last `retry`."""
    by_turn: dict[int, str] = {}
    for event in events:
        if event.kind == "retry":
            by_turn[event.turn] = ""
        elif event.kind == "text":
            by_turn[event.turn] = by_turn.get(event.turn, "") + (event.delta or "")
    return "".join(by_turn[turn] for turn in sorted(by_turn))


async def test_a_subscriber_sees_the_text_while_it_streams_then_each_call_and_the_end(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [
                scripted_call("get_train_status", "call_t", **TRAIN),
                scripted_call("get_weather", "call_w", **WEATHER),
            ],
            ScriptTurn(text=ANSWER, event_delay_ms=60),
        )
    )
    release_end = live.provider.hold_stream_ends(run_id, turn=1)
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    events: list[RunEvent] = []
    first_text_while_streaming: bool | None = None
    try:
        async for event in agentloop.watch(live.client, run_id):
            if event.kind == "text" and first_text_while_streaming is None:
                first_text_while_streaming = live.provider.streaming > 0
                release_end()
            events.append(event)
    finally:
        release_end()
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert first_text_while_streaming is True  # the provider had not sent its last chunk
    assert shown_text(events) == result.output == ANSWER
    assert [e.offset for e in events] == list(range(len(events)))
    texts = [e for e in events if e.kind == "text"]
    assert 1 < len(texts) < len(ANSWER) // 10  # batched: neither one item nor one per chunk
    kinds = [(e.kind, e.call_id) for e in events if e.kind in ("call", "result")]
    calls = [c for k, c in kinds if k == "call"]
    assert calls == ["call_t", "call_w"]  # the model's order
    for call_id in calls:  # each call before its result, under its own id
        assert kinds.index(("call", call_id)) < kinds.index(("result", call_id))
    assert {e.call_id: e.status for e in events if e.kind == "result"} == {
        "call_t": "succeeded",
        "call_w": "succeeded",
    }
    [call_w] = [e for e in events if e.kind == "call" and e.call_id == "call_w"]
    assert (call_w.tool, call_w.arguments) == ("get_weather", WEATHER)
    assert events[-1].kind == "done"
    assert (events[-1].status, events[-1].stop_reason) == ("completed", result.stop_reason)

    # Attached after the end, from offset 0: what the run kept, ending with `done`.
    late = await collect(live.client, run_id)
    assert [e.model_dump() for e in late] == [e.model_dump() for e in events]


async def test_an_approval_wait_is_published_and_its_end_before_the_write_result(
    live: Live, run_id: str
) -> None:
    """Watched and asked for its status all the while (as `run --follow` and the inbox do),
    the run publishes its wait and its end, and its history replays: a watcher writes nothing
    to it. (A watch by the stream's poll update did, one update a poll; and while runs took
    local activities, a status query that split a workflow task with one in flight let the
    next task accept a poll before commands that replay then put first, TMPRL1100.)"""
    book = {"workshop_id": "ws-101", "participant_id": "p-carol"}
    live.provider.register(
        scripted(
            run_id,
            [ScriptedToolCall(id="call_res", name="reserve_seat", arguments=book)],
            "Booked.",
        )
    )
    handle = await start_run(
        live.client,
        live.worker,
        run_id,
        run_input(
            run_id,
            tools=["reserve_seat"],
            principal={"subject": "p-alice", "scopes": ["workshops:write"]},
        ),
    )
    watching = asyncio.create_task(collect(live.client, run_id))
    asking = asyncio.create_task(ask_status_until_done(handle))
    view = await wait_for_status(handle, lambda v: bool(v.pending_approvals), "the approval")
    [pending] = view.pending_approvals
    await signal_approval(handle, "call_res", pending.args_digest, "workshop-lead")
    result = await result_of(handle)
    events = await waited_for(watching, "the watcher's events")
    assert await waited_for(asking, "the status questions") >= 1

    assert result.status == "completed", result.stop_reason
    history = await handle.fetch_history()
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    assert [e for e in history.events if e.event_type == accepted] == []
    replayer = Replayer(workflows=[AgentRun], data_converter=live.client.data_converter)
    await replayer.replay_workflow(history)
    seen = [(e.kind, e.reason, tuple(e.call_ids or ()), e.call_id) for e in events]
    waiting = seen.index(("waiting", "approval", ("call_res",), None))
    resumed = seen.index(("resumed", "approval", ("call_res",), None))
    outcome = seen.index(("result", None, (), "call_res"))
    assert seen.index(("call", None, (), "call_res")) < waiting < resumed < outcome
    assert events[outcome].status == "succeeded"


async def ask_status_until_done(handle: Any) -> int:
    """Ask the run for its status as often as a busy client would, until it ends; how many
    times it was asked."""
    asked = 0
    while True:
        view = await handle.query("status", result_type=RunStatusView)
        asked += 1
        if view.phase == "finished":
            return asked
        await asyncio.sleep(0.02)


async def test_a_retried_model_call_says_so_and_its_text_is_replaced(
    live: Live, run_id: str
) -> None:
    """The first answer's connection is lost mid-text: the call is retried, the subscriber
    is told, and what it shows is the final output exactly once."""
    live.provider.register(
        scripted(run_id, ScriptTurn(text=ANSWER, drop_stream_after_events=12, event_delay_ms=30))
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, tools=[]))
    events = await collect(live.client, run_id)
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    [retry] = [e for e in events if e.kind == "retry"]
    assert (retry.turn, retry.attempt) == (1, 2)
    before = [e for e in events[: events.index(retry)] if e.kind == "text"]
    assert before and "".join(e.delta or "" for e in before) != ANSWER  # cut mid-text
    assert shown_text(events) == ANSWER
    assert len(live.provider.requests) == 2


async def test_a_run_with_publishing_off_publishes_nothing(live: Live, run_id: str) -> None:
    handle = await start_run(
        live.client, live.worker, run_id, run_input("travel", publish_events=False)
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    offset = await handle.query("__temporal_workflow_stream_offset", result_type=int)
    assert offset == 0
    signals = [
        e
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert signals == []
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "finished"


async def test_a_subscriber_follows_the_run_across_continue_as_new_without_a_gap(
    live: Live, run_id: str
) -> None:
    turns = [
        ScriptTurn(
            text=f"Looking at step {n}.",
            tool_calls=[scripted_call("get_weather", f"call_{n}", city=city, date="2026-12-01")],
        )
        for n, city in enumerate(CITIES)
    ]
    live.provider.register(scripted(run_id, *turns, "Done."))
    handle = await start_run(
        live.client,
        live.worker,
        run_id,
        run_input(
            run_id,
            continue_as_new_after_events=20,
            limits={"max_model_calls": 10, "max_tool_calls": 10},
        ),
    )
    events = await collect(live.client, run_id)
    result = await result_of(handle)
    view = await handle.query("status", result_type=RunStatusView)

    assert result.status == "completed", result.stop_reason
    assert len(view.run_chain) > 1  # it did continue as new
    assert [e.kind for e in events].count("continued") == len(view.run_chain) - 1
    assert [e.offset for e in events] == list(range(len(events)))
    calls = [e.call_id for e in events if e.kind == "call"]
    assert calls == [f"call_{n}" for n in range(6)]  # each once, none republished
    assert [e.call_id for e in events if e.kind == "result"] == calls
    assert shown_text(events) == "".join(f"Looking at step {n}." for n in range(6)) + "Done."
    assert events[-1].kind == "done"


async def test_what_others_publish_cannot_fail_the_run_and_what_it_keeps_is_bounded(
    live: Live, run_id: str
) -> None:
    """Anyone who may signal a run may publish to its stream: an item that is not a payload,
    and a flood of items, leave the run's workflow tasks healthy, its own items whole (the
    flood is foreign, bounded apart: nothing of the run's is evicted) and its stream within
    its bounds (`test_stream_authorship` forges the run's own kinds)."""
    live.provider.register(scripted(run_id, ScriptTurn(text="Done.", delay_ms=1_500)))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, tools=[]))
    await handle.signal(
        "__temporal_workflow_stream_publish",
        {"items": [{"topic": TOPIC, "data": "not base64 at all!"}], "publisher_id": "x"},
    )
    flood = WorkflowStreamClient.create(live.client, run_id)
    junk = flood.topic(TOPIC)
    async with flood:
        for n in range(MAX_RETAINED_ITEMS + 100):
            junk.publish({"kind": "text", "turn": 0, "delta": f"junk {n} "})
    result = await result_of(handle)
    events = await collect(live.client, run_id, from_offset=0)

    assert result.status == "completed", result.stop_reason
    assert await failed_workflow_tasks(handle) == 0
    assert [(e.kind, e.delta) for e in events] == [("text", "Done."), ("done", None)]
    offset = await handle.query("__temporal_workflow_stream_offset", result_type=int)
    assert 2 < offset <= MAX_FOREIGN_ITEMS + 2  # the newest foreign items were dropped


@pytest.mark.parametrize(
    "publish",
    [
        {"items": [{"topic": TOPIC, "data": "not base64 at all!"}], "publisher_id": "x"},
        {"items": [], "publisher_id": "x", "sequence": 1},
        "not a publish",
    ],
)
async def test_a_publish_sent_with_the_start_never_wedges_the_run(
    publish: Any, live: Live, run_id: str
) -> None:
    """A publish signal that comes with the start (signal-with-start) reaches the run before
    its stream exists: the SDK took it as a dynamic signal and then gave it to the stream's
    own handler, which failed every workflow task for ever. The run takes it (or drops it)
    and goes on."""
    run = run_input("travel")
    handle = await live.client.start_workflow(
        WORKFLOW_NAME,
        run,
        id=run_id,
        task_queue=live.worker.task_queue,
        result_type=AgentRunResult,
        start_signal="__temporal_workflow_stream_publish",
        start_signal_args=[publish],
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert await failed_workflow_tasks(handle) == 0
    events = await collect(live.client, run_id)
    assert events[-1].kind == "done"


async def failed_workflow_tasks(handle: Any) -> int:
    return len(
        [
            e
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
    )


async def test_a_worker_killed_mid_stream_the_subscriber_sees_retry_then_the_text_once(
    servers: Servers, worker_settings: Settings, run_id: str, tmp_path: Path
) -> None:
    """SIGKILL of the worker while the model's text streams: the model call runs again on the
    next worker, the subscriber is told (`retry`), and what it shows is the output once."""
    settings = worker_settings.model_copy(update={"task_queue": f"watch-{uuid.uuid4().hex[:8]}"})
    env = worker_env(servers.client, settings, tmp_path / "store.db")
    servers.provider.register(scripted(run_id, ScriptTurn(text=ANSWER, event_delay_ms=150)))
    events: list[RunEvent] = []
    first_text = asyncio.Event()

    async def follow() -> None:
        async for event in agentloop.watch(servers.client, run_id):
            events.append(event)
            if event.kind == "text":
                first_text.set()

    async with worker_process(env) as first:
        handle = await start_run(servers.client, settings, run_id, run_input(run_id, tools=[]))
        following = asyncio.create_task(follow())
        await waited_for(first_text.wait(), "the first streamed text")
        first.send_signal(signal.SIGKILL)
        await first.wait()
    async with worker_process(env):
        result = await result_of(handle)
        await waited_for(following, "the follower to end")

    assert result.status == "completed", result.stop_reason
    [retry] = [e for e in events if e.kind == "retry"]
    assert retry.attempt == 2
    assert shown_text(events) == result.output == ANSWER
    assert [e.offset for e in events] == list(range(len(events)))
    assert events[-1].kind == "done"


async def test_agentloop_watch_prints_the_text_as_it_streams_and_exits_with_the_run(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("get_weather", "call_w", **WEATHER)],
            ScriptTurn(text=ANSWER, event_delay_ms=40),
        )
    )
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    release_end = live.provider.hold_stream_ends(run_id, turn=1)
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    seen: list[str] = []
    async with cli_process("watch", run_id, env=env, cwd=Path.cwd()) as watching:
        try:
            await read_until(watching.stdout, seen, lambda text: "<- call_w" in text, "the result")
            assert watching.stdout is not None
            first = await waited_for(watching.stdout.read(20), "the watch's first output")
            # Part of the answer is on the screen while the provider still sends the rest.
            assert live.provider.streaming == 1
        finally:
            release_end()
        rest = await waited_for(watching.stdout.read(), "the watch's output to end")
        code = await watching.wait()
    printed = "".join(seen) + (first + rest).decode()
    result = await result_of(handle)
    assert code == 0
    assert '-> call_w get_weather {"city": "Shanghai", "date": "2026-12-01"}' in printed
    assert "<- call_w get_weather: succeeded" in printed
    assert ANSWER in printed
    assert printed.rstrip().endswith(f"== completed: {result.stop_reason}")

    as_json = await agentloop_cli("watch", run_id, "--json", env=env)
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert as_json.returncode == 0, as_json.explain()
    assert [line["offset"] for line in lines] == list(range(len(lines)))
    assert lines[-1]["kind"] == "done"


async def test_a_worker_configured_not_to_publish_sends_no_text_and_the_cli_starts_runs_quiet(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """AGENTLOOP_PUBLISH_EVENTS=off: the worker's model calls publish no text (no signal in
    the run's history), and `agentloop run` starts runs that publish nothing."""
    quiet = worker_settings.model_copy(
        update={"task_queue": f"quiet-{uuid.uuid4().hex[:8]}", "publish_events": "off"}
    )
    servers.provider.register(scripted(run_id, ScriptTurn(text=ANSWER)))
    async with running_worker(servers.client, quiet):
        handle = await start_run(servers.client, quiet, run_id, run_input(run_id, tools=[]))
        result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    signals = [
        e
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert signals == []
    args = build_parser().parse_args(["run", "Hi", "--model", "travel"])
    assert build_run_input(args, quiet).publish_events is False
    assert build_run_input(args, worker_settings).publish_events is True


async def test_many_subscribers_leave_the_run_and_each_other_whole(live: Live, run_id: str) -> None:
    """16 subscribers on one run at once (more than the 10 updates Temporal lets a run have
    in flight: they read by query) neither fail nor slow the run, write nothing to its
    history, and each gets every item after its offset once, ending with `done`."""
    book = {"workshop_id": "ws-101", "participant_id": "p-carol"}
    live.provider.register(
        scripted(
            run_id,
            [ScriptedToolCall(id="call_res", name="reserve_seat", arguments=book)],
            "Booked.",
        )
    )
    handle = await start_run(
        live.client,
        live.worker,
        run_id,
        run_input(
            run_id,
            tools=["reserve_seat"],
            principal={"subject": "p-alice", "scopes": ["workshops:write"]},
        ),
    )
    view = await wait_for_status(handle, lambda v: bool(v.pending_approvals), "the approval")
    # From the end of what it published: each subscriber's poll waits there, in flight.
    offset = await handle.query("__temporal_workflow_stream_offset", result_type=int)
    watchers = [
        asyncio.create_task(collect(live.client, run_id, from_offset=offset)) for _ in range(16)
    ]
    [pending] = view.pending_approvals
    await signal_approval(handle, "call_res", pending.args_digest, "workshop-lead")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    seen = await waited_for(asyncio.gather(*watchers), "every watcher to end")
    for events in seen:
        assert [e.offset for e in events] == list(range(offset, offset + len(events)))
        assert events[-1].kind == "done"
    assert len({tuple(e.kind for e in events) for events in seen}) == 1  # all saw the same
    assert await failed_workflow_tasks(handle) == 0
    updates = [
        e
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert updates == []


@pytest.mark.parametrize(
    "carried",
    [
        {"log": [{"topic": TOPIC, "data": "not base64 at all!"}], "base_offset": 0},
        {"log": "a list of items, not this", "base_offset": -1},
        [[[[["deep"]]]]],
    ],
)
async def test_a_carried_stream_that_does_not_read_starts_empty_never_wedging_the_run(
    carried: Any, live: Live, run_id: str
) -> None:
    """The stream a run carries across continue-as-new is workflow input like any other: one
    whose items do not decode, or that is not a stream at all, is dropped."""
    handle = await live.client.start_workflow(
        WORKFLOW_NAME,
        args=[run_input("travel"), None, carried],
        id=run_id,
        task_queue=live.worker.task_queue,
        result_type=AgentRunResult,
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert await failed_workflow_tasks(handle) == 0
    events = await collect(live.client, run_id)
    assert [e.offset for e in events] == list(range(len(events)))  # nothing carried over
    assert events[-1].kind == "done"


async def test_a_retried_call_made_without_streaming_still_shows_its_text_once(
    live: Live, run_id: str
) -> None:
    """A call the provider answers whole (`stream: false`) publishes its text once it is in;
    after a retry too (the `retry` item is not the turn's text)."""
    live.provider.register(
        scripted(run_id, ScriptTurn(text=ANSWER, errors=[ScriptedError(status=500)]))
    )
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, tools=[], stream=False)
    )
    events = await collect(live.client, run_id)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert [(e.kind, e.attempt) for e in events if e.kind == "retry"] == [("retry", 2)]
    assert [e.delta for e in events if e.kind == "text"] == [ANSWER]
    assert len(live.provider.requests) == 2
