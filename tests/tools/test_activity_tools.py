"""A tool that is an existing Temporal activity on another task queue (`agentloop.activity_tool`),
served by a plain `temporalio` worker process that imports nothing of agentloop
(`tests/team_plugin/plain_worker.py`): the run schedules it there with the call id, the
idempotency key and the principal; its refusals reach the model; when that worker is killed
mid-write, its own lookup activity decides, and the write exists once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RawValue
from temporalio.worker import Interceptor, Worker

import agentloop
from agentloop.client import start_run
from agentloop.contract import AgentRunInput, AgentRunResult, Limits, Principal
from agentloop.envelope import unwrapped
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.store import load_artifact_text
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.testing.turns import call as scripted_call
from agentloop.tools.plugins import Plugin, Toolset, build_toolbox
from agentloop.worker import running_worker
from tests.crash.test_crash_phases import requests_to, reservations
from tests.live import Servers, agent_input, scripted
from tests.loop.test_hardening import assert_never_wedged
from tests.loop.test_large_output import history_sizes
from tests.operations.test_platform import sent_result
from tests.support import result_of, wait_until, worker_process

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

PLAIN_WORKER = Path(__file__).parents[1] / "team_plugin" / "plain_worker.py"
PLAIN_READY = "plain worker polling"
BOOK = {"workshop_id": "ws-101", "participant_id": "p-carol"}


class BookArgs(BaseModel):
    workshop_id: str
    participant_id: str


def plain_worker(
    servers: Servers, queue: str
) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    env = {
        "TEMPORAL_ADDRESS": servers.client.service_client.config.target_host,
        "TEAM_QUEUE": queue,
        "TEAM_SERVICE_URL": servers.service.base_url,
    }
    return worker_process(env, command=[sys.executable, str(PLAIN_WORKER)], ready=PLAIN_READY)


@pytest.fixture
async def agentloop_queue(
    client: Client, worker_settings: Settings, tmp_path: Path
) -> AsyncIterator[tuple[str, str]]:
    """An agentloop worker (in this process) whose only team tool is the activity tool
    `book_seat` on a queue of its own; yields (agentloop's queue, the team's queue)."""
    team_queue = f"team-activities-{uuid.uuid4().hex[:8]}"
    book = agentloop.activity_tool(
        "book_seat",
        activity="book_seat",
        task_queue=team_queue,
        parameters=BookArgs,
        description="Book a seat in a workshop.",
        effect="write",
        lookup_activity="booking_outcome",
        heartbeat_seconds=2,
        timeout_seconds=60,
    )
    toolbox = build_toolbox([Plugin("remote_team", Toolset(tools=[book]))])
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"agentloop-{uuid.uuid4().hex[:8]}",
            "store_url": f"sqlite:///{tmp_path / 'store.db'}",
        }
    )
    async with running_worker(client, settings, toolbox):
        yield settings.task_queue, team_queue


async def start_booking(
    client: Client,
    provider: ScriptedProvider,
    queue: str,
    run_id: str,
    arguments: dict[str, str] = BOOK,
) -> Any:
    provider.register(
        scripted(
            run_id,
            [ScriptedToolCall(id="c_book", name="book_seat", arguments=arguments)],
            "Done.",
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Book Carol a seat.",
        ["book_seat"],
        principal=Principal(subject="p-alice", tenant="acme"),
    )
    return await start_run(client, run_input, id=run_id, task_queue=queue)


async def test_an_activity_tool_runs_on_its_own_queue_with_the_key_and_principal(
    servers: Servers, agentloop_queue: tuple[str, str], run_id: str
) -> None:
    queue, team_queue = agentloop_queue
    async with plain_worker(
        servers,
        team_queue,
    ):
        handle = await start_booking(servers.client, servers.provider, queue, run_id)
        result: AgentRunResult = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    [booked] = result.calls
    assert (booked.call_id, booked.status, booked.attempts) == ("c_book", "succeeded", 1)
    told = sent_result(servers.provider, run_id, "c_book")
    assert (told["served_by"], told["for"]) == ("plain worker", "p-alice")
    assert told["booked"]["operation_id"] == booked.idempotency_key
    assert reservations(servers.service) == 1
    # The activity ran on the team's queue: agentloop's own run_tool never did.
    history = await handle.fetch_history()
    scheduled = [
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            e.activity_task_scheduled_event_attributes.task_queue.name,
        )
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert ("book_seat", team_queue) in scheduled
    assert all(name != "run_tool" for name, _ in scheduled)


async def test_an_activity_tools_refusal_reaches_the_model_and_nothing_is_looked_up(
    servers: Servers, agentloop_queue: tuple[str, str], run_id: str
) -> None:
    queue, team_queue = agentloop_queue
    full = {"workshop_id": "ws-102", "participant_id": "p-carol"}  # ws-102 has no seats left
    async with plain_worker(
        servers,
        team_queue,
    ):
        handle = await start_booking(servers.client, servers.provider, queue, run_id, full)
        result: AgentRunResult = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    [booked] = result.calls
    assert booked.status == "failed"  # refused: not unknown, no lookup
    assert sent_result(servers.provider, run_id, "c_book")["error"]["class"] == "business"
    assert requests_to(servers.service, "workshops.operation") == []
    assert result.side_effects == []


async def test_the_plain_worker_killed_mid_write_its_lookup_decides_and_the_write_exists_once(
    servers: Servers, agentloop_queue: tuple[str, str], run_id: str
) -> None:
    queue, team_queue = agentloop_queue
    servers.service.inject_fault("workshops.reserve", "commit_then_hang", hang_ms=120_000)
    async with plain_worker(
        servers,
        team_queue,
    ) as first:
        handle = await start_booking(servers.client, servers.provider, queue, run_id)
        await wait_until(lambda: reservations(servers.service) == 1, "the write to commit")
        first.send_signal(signal.SIGKILL)
        await first.wait()
    # Its heartbeats stop: the write's outcome is unknown, and the lookup waits for a worker.
    async with plain_worker(
        servers,
        team_queue,
    ):
        result: AgentRunResult = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    [booked] = result.calls
    assert (booked.status, booked.attempts) == ("confirmed_after_query", 1)
    [effect] = result.side_effects
    assert (effect.call_id, effect.status) == ("c_book", "confirmed_after_query")
    assert len(requests_to(servers.service, "workshops.reserve")) == 1
    assert len(requests_to(servers.service, "workshops.operation")) == 1
    assert reservations(servers.service) == 1


class CityArgs(BaseModel):
    city: str


async def one_call_to_a_team_tool(
    client: Client,
    worker_settings: Settings,
    provider: ScriptedProvider,
    run_id: str,
    activities: list[Any],
    **tool: Any,
) -> tuple[AgentRunResult, str]:
    """A run whose model calls the activity tool `tool` once (call id `c_1`), served by an
    in-process team worker running `activities` (none: no worker polls the team's queue): its
    result, and what the model was told."""
    result, [told], _ = await calls_to_a_team_tool(
        client, worker_settings, provider, run_id, activities, **tool
    )
    return result, told


async def calls_to_a_team_tool(
    client: Client,
    worker_settings: Settings,
    provider: ScriptedProvider,
    run_id: str,
    activities: list[Any],
    *,
    calls: int = 1,
    interceptors: Sequence[Interceptor] = (),
    wedge_free: bool = True,
    run_fields: dict[str, Any] | None = None,
    **tool: Any,
) -> tuple[AgentRunResult, list[str], WorkflowHandle[Any, AgentRunResult]]:
    """`one_call_to_a_team_tool` with `calls` parallel calls (ids `c_1`...; city `x1`...),
    the team's worker running `interceptors`: the result, what the model was told of each
    call, in order, and the run (with `wedge_free`, never a failed workflow task in its
    history). `run_fields`: more of the run's input (its status, and what the model was
    told, are then not checked)."""
    team_queue = f"team-{uuid.uuid4().hex[:8]}"
    spec = agentloop.activity_tool(task_queue=team_queue, parameters=CityArgs, **tool)
    toolbox = build_toolbox([Plugin("team", Toolset(tools=[spec]))])
    settings = worker_settings.model_copy(
        update={"task_queue": f"agentloop-{uuid.uuid4().hex[:8]}"}
    )
    name = tool["name"]
    called = [scripted_call(name, f"c_{n}", city=f"x{n}") for n in range(1, calls + 1)]
    provider.register(scripted(run_id, ScriptTurn(tool_calls=called), "Done."))
    run_input = AgentRunInput(
        task="Go.",
        provider="openai-chat",
        model=run_id,
        tools=[name],
        limits=Limits(max_tool_calls=max(calls, 32)),
        **(run_fields or {}),
    )
    team_worker = (
        Worker(client, task_queue=team_queue, activities=activities, interceptors=interceptors)
        if activities
        else contextlib.nullcontext()
    )
    async with team_worker, running_worker(client, settings, toolbox):
        handle = await start_run(client, run_input, id=run_id, task_queue=settings.task_queue)
        result: AgentRunResult = await result_of(handle, CEILING_SECONDS + calls * 3)
    if run_fields is None:
        assert result.status == "completed", result.stop_reason
    if wedge_free:
        await assert_never_wedged(handle)
    if run_fields is not None:
        return result, [], handle
    _, second = [r for r in provider.requests if r["script"] == run_id]
    told = {
        m["tool_call_id"]: unwrapped(m["content"])
        for m in second["body"]["messages"]
        if m["role"] == "tool"
    }
    return result, [told[c.id] for c in called], handle


@activity.defn(name="deep_forecast")
async def deep_forecast(request: dict[str, Any]) -> RawValue:
    """A team's activity answering with JSON nested past every JSON parser's limit."""
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"[" * 300 + b"]" * 300))


async def test_an_activity_tools_result_no_parser_reads_is_told_to_the_model_not_wedging(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """Before, decoding such a result in the workflow failed every workflow task."""
    result, told = await one_call_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [deep_forecast],
        name="deep_forecast",
        activity="deep_forecast",
        description="A forecast, deeply nested.",
        effect="read",
    )
    assert [(c.call_id, c.status) for c in result.calls] == [("c_1", "succeeded")]
    assert "not JSON agentloop can read" in told and "recursion limit exceeded" in told, told


@activity.defn(name="send_note_lost")
async def send_note_lost(request: dict[str, Any]) -> dict[str, Any]:
    """A team's write whose answer is lost: its outcome is unknown, so it is looked up."""
    ANSWERED.append("send_note_lost")
    raise RuntimeError("connection reset after the request was sent")


@activity.defn(name="note_outcome")
async def note_outcome(request: dict[str, Any]) -> dict[str, Any]:
    """The team's lookup: applied, with a record far past any tool's result cap."""
    return {"state": "applied", "record": {"note": "n" * 1_500_000}}


async def test_a_looked_up_record_is_kept_to_the_tools_result_cap(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """Before, the 1.5 MB record went whole into the model's next request, and the run failed."""
    result, told = await one_call_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [send_note_lost, note_outcome],
        name="send_note",
        activity="send_note_lost",
        description="Send a note.",
        effect="write",
        lookup_activity="note_outcome",
    )
    assert [(c.call_id, c.status) for c in result.calls] == [("c_1", "confirmed_after_query")]
    assert '"confirmed": "the system of record has it"' in told
    assert len(told) < 10_000, len(told)  # the cap is 8,000 characters of the record's JSON


async def test_a_write_no_worker_takes_fails_as_never_started_and_is_not_looked_up(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """A team queue no worker polls (a typo, a worker not deployed): before, the write waited
    for ever and the run stayed `executing_tools` for good."""
    result, told = await one_call_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [],
        name="send_note",
        activity="send_note",
        description="Send a note.",
        effect="write",
        lookup_activity="note_outcome",
        start_timeout_seconds=1,
    )
    [record] = result.calls
    assert (record.call_id, record.status, record.activity_attempts) == ("c_1", "failed", 0)
    assert result.side_effects == [] and result.unresolved_writes == []
    assert "took the call within 1 s: it never started, nothing was done" in told, told
    assert '"transient"' in told


RAW = b"\xff\xfe a forecast \x80 not UTF-8"
ANSWERED: list[str] = []
"""The team activities' executions, by activity type."""


@activity.defn(name="raw_forecast")
async def raw_forecast(request: dict[str, Any]) -> bytes:
    ANSWERED.append("raw_forecast")
    return RAW


@activity.defn(name="send_note_bytes")
async def send_note_bytes(request: dict[str, Any]) -> bytes:
    ANSWERED.append("send_note_bytes")
    return RAW


@activity.defn(name="send_note_protobuf")
async def send_note_protobuf(request: dict[str, Any]) -> WorkflowExecution:
    """Written by Temporal's converter as `json/protobuf` with its message type."""
    ANSWERED.append("send_note_protobuf")
    return WorkflowExecution(workflow_id="note-1", run_id="r-1")


@activity.defn(name="send_note_binary_protobuf")
async def send_note_binary_protobuf(request: dict[str, Any]) -> RawValue:
    """A message of a type agentloop's worker does not have, as binary protobuf."""
    ANSWERED.append("send_note_binary_protobuf")
    metadata = {"encoding": b"binary/protobuf", "messageType": b"team.NoteReceipt"}
    return RawValue(Payload(metadata=metadata, data=RAW))


@activity.defn(name="send_note_lone_surrogate")
async def send_note_lone_surrogate(request: dict[str, Any]) -> RawValue:
    """JSON holding a lone surrogate escape: a string no payload or store can encode."""
    ANSWERED.append("send_note_lone_surrogate")
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b'"\\ud800 noted"'))


@activity.defn(name="count_lookups")
async def count_lookups(request: dict[str, Any]) -> dict[str, Any]:
    ANSWERED.append("count_lookups")
    return {"state": "applied"}


async def test_an_activity_tools_answer_of_bytes_not_utf8_is_told_as_base64_not_wedging(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """Before, every workflow task failed: "Error
    serializing to JSON: invalid utf-8"."""
    ANSWERED.clear()
    result, told = await one_call_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [raw_forecast],
        name="raw_forecast",
        activity="raw_forecast",
        description="A forecast, as bytes.",
    )
    assert [(c.call_id, c.status) for c in result.calls] == [("c_1", "succeeded")]
    assert json.loads(told) == to_jsonable_python(RAW, bytes_mode="base64")
    assert list(ANSWERED) == ["raw_forecast"]


@pytest.mark.parametrize(
    "answering",
    [send_note_bytes, send_note_protobuf, send_note_binary_protobuf, send_note_lone_surrogate],
)
async def test_a_write_answering_bytes_or_protobuf_succeeds_once_and_is_never_looked_up(
    servers: Servers, worker_settings: Settings, run_id: str, answering: Any
) -> None:
    """Before, a protobuf message failed every workflow task ("Unable to serialize unknown
    type"), bytes likewise: the write was made once and the run stayed running for good."""
    ANSWERED.clear()
    name = answering.__name__
    result, told = await one_call_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [answering, count_lookups],
        name="send_note",
        activity=name,
        description="Send a note.",
        effect="write",
        lookup_activity="count_lookups",
    )
    [record] = result.calls
    assert (record.call_id, record.status, record.activity_attempts) == ("c_1", "succeeded", 1)
    assert [e.call_id for e in result.side_effects] == ["c_1"]
    assert list(ANSWERED) == [name]  # sent once, never looked up
    if answering is send_note_protobuf:
        assert json.loads(told) == {"workflowId": "note-1", "runId": "r-1"}
    elif answering is send_note_lone_surrogate:
        assert told == "? noted"
    else:
        assert RAW not in told.encode() and len(told) < 200, told


BIG_ANSWER_CHARS = 1_500_000


@activity.defn(name="city_report")
async def city_report(request: dict[str, Any]) -> dict[str, Any]:
    """A team's read answering 1.5 MB."""
    city = request["arguments"]["city"]
    return {"city": city, "report": city + "r" * BIG_ANSWER_CHARS}


async def test_forty_parallel_answers_of_1_5_mb_are_artifacts_and_history_stays_under_10_mb(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """The team's worker runs `agentloop.ActivityToolResults`: each answer goes to the store
    from there. Before, the 60 MB of answers went to the run's history, and Temporal
    terminated the run ("history size exceeds limit") with no result."""
    store = agentloop.open_store(worker_settings.store_url)
    try:
        result, told, handle = await calls_to_a_team_tool(
            servers.client,
            worker_settings,
            servers.provider,
            run_id,
            [city_report],
            calls=40,
            interceptors=[agentloop.ActivityToolResults(store)],
            name="city_report",
            activity="city_report",
            description="A city's report.",
            effect="read",
        )
        assert [(c.call_id, c.status) for c in result.calls] == [
            (f"c_{n}", "succeeded") for n in range(1, 41)
        ]
        first = servers.client.get_workflow_handle(run_id, run_id=handle.first_execution_run_id)
        history = await first.fetch_history()
        total, largest = history_sizes(history)
        assert total < 10_000_000 and largest < 100_000, (total, largest)
        # One run: nothing was left for a fresh history.
        last = history.events[-1].event_type
        assert last == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, last
        for n, shown in enumerate(told, start=1):
            frame = json.loads(shown)
            assert frame["truncated"] is True and len(shown) <= 8_000
            text, chars = await load_artifact_text(store, frame["artifact"])
            assert json.loads(text) == {"city": f"x{n}", "report": f"x{n}" + "r" * BIG_ANSWER_CHARS}
            assert chars == frame["total_chars"]
    finally:
        await store.close()


@activity.defn(name="huge_report")
async def huge_report(request: dict[str, Any]) -> str:
    ANSWERED.append("huge_report")
    return "h" * 3_000_000


@pytest.mark.parametrize("effect", ["read", "write"])
async def test_an_answer_over_temporals_payload_limit_without_the_store_ends_the_call(
    servers: Servers, worker_settings: Settings, run_id: str, effect: str
) -> None:
    """Temporal's worker refuses to send an answer over 2 MiB (a retryable failure of the
    attempt, `PayloadsTooLarge`): a read fails once its attempts are spent, told to the model;
    a write, given one attempt, is looked up and never sent again."""
    ANSWERED.clear()
    result, told = await one_call_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [huge_report, count_lookups],
        name="huge_report",
        activity="huge_report",
        description="A report.",
        effect=effect,
        lookup_activity="count_lookups" if effect == "write" else None,
    )
    [record] = result.calls
    if effect == "read":
        assert (record.status, record.activity_attempts) == ("failed", 3)
        assert "PayloadsTooLarge" in told and len(told) < 500, told
        assert list(ANSWERED) == ["huge_report"] * 3
    else:
        assert (record.status, record.activity_attempts) == ("confirmed_after_query", 1)
        assert list(ANSWERED) == ["huge_report", "count_lookups"]


async def test_forty_answers_of_1_5_mb_without_the_store_leave_the_run_its_history(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """A team's worker without `ActivityToolResults`: the calls start in waves the history
    has room for (each answer counted twice: the team's result, and the input of agentloop's
    reading of it), and those left are told to the model as not run, never started; without
    the waves, Temporal terminated the run at 50 MB."""
    ANSWERED.clear()
    result, told, handle = await calls_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [city_report],
        calls=40,
        wedge_free=False,  # megabytes arriving mid-task: Temporal may force-close one
        name="city_report",
        activity="city_report",
        description="A city's report.",
        effect="read",
    )
    ran = [c for c in result.calls if c.status == "succeeded"]
    not_run = [c for c in result.calls if c.status == "failed"]
    assert len(ran) + len(not_run) == 40 and 8 <= len(ran) < 40, result.calls
    assert {c.activity_attempts for c in not_run} == {0}
    assert all("not run: this run's history holds" in told[int(c.call_id[2:]) - 1] for c in not_run)
    first = servers.client.get_workflow_handle(run_id, run_id=handle.first_execution_run_id)
    history = await first.fetch_history()
    assert history_sizes(history)[0] < 45_000_000
    # The final answer came in a fresh history.
    last = history.events[-1].event_type
    assert last == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, last


@activity.defn(name="bytes_outcome")
async def bytes_outcome(request: dict[str, Any]) -> bytes:
    """The team's lookup answering bytes that are not UTF-8: no outcome at all."""
    ANSWERED.append("bytes_outcome")
    return RAW


async def test_a_lookup_answering_bytes_leaves_the_write_unknown_not_wedging(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """Before, the lookup's answer was decoded in
    the workflow; now agentloop's worker reads it: no outcome, so the write stays unknown for
    an operator, and is never sent again."""
    ANSWERED.clear()
    result, _, _ = await calls_to_a_team_tool(
        servers.client,
        worker_settings,
        servers.provider,
        run_id,
        [send_note_lost, bytes_outcome],
        run_fields={"reconciliation_timeout_seconds": 1},
        name="send_note",
        activity="send_note_lost",
        description="Send a note.",
        effect="write",
        lookup_activity="bytes_outcome",
    )
    assert result.status == "unresolved", result.stop_reason
    assert [(c.call_id, c.status) for c in result.calls] == [("c_1", "unknown")]
    assert [w.call_id for w in result.unresolved_writes] == ["c_1"]
    assert list(ANSWERED) == ["send_note_lost", "bytes_outcome"]  # sent once, looked up once
