"""How the crash tests (`tests/crash/test_crash_phases.py`) bring a run down and read what
happened: a `Phase` starts a run on a worker process, kills it at the moment the phase names
and lets a second worker finish the run (`Phase.crash`); a `ServerRestart` restarts the
Temporal dev server under a worker instead; and the readers of histories, the example service
and the scripted model's requests the cases check with.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from agentloop import search
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    CallRecord,
    Principal,
)
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import FAST_DEV_SERVER, free_port, temporal_binary
from agentloop.runtime.queue_peers import TOOLS_MARK
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.testing.patience import CEILING_SECONDS
from tests.support import (
    STOP_SECONDS,
    result_of,
    start_run,
    wait_for_phase,
    worker_env,
    worker_process,
    write_key,
)

ALL_SCOPES = ["workshops:read", "workshops:write", "tickets:read", "tickets:write"]
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
SLOW_HTTP = 30.0
"""The tool HTTP timeout of workers that must still be waiting when they are killed."""
STICKY_TIMEOUT = "TIMEOUT_TYPE_SCHEDULE_TO_START"
"""A workflow task that waited on a dead worker's sticky queue (none was lost half done)."""
TASK_TIMEOUT = timedelta(seconds=60)
"""The workflow task timeout of every run the cases start (a continued run inherits it): a
live worker starved of CPU (the suite beside six busy processes, `make test-under-load`) may
take longer than Temporal's 10 s over a task, replaying a history it took over, and the check
that no task timed out but a killed worker's (`lost_workflow_tasks`) would take that for a
lost task. No case kills a worker holding a started task, so no case waits this out; and it
stays under the ceiling of a wait for a result (`CEILING_SECONDS`), so one that did would
still finish in time."""
STARVED_WORKER = {"TEMPORAL_DEBUG": "1"}
"""The environment that turns the Python SDK's deadlock detector off in a case's worker
processes (`debug_mode`; activations then run on the worker's event loop instead of a thread).
The detector fails a workflow task whose activation took over 2 s, which a worker replaying a
history at load 13 on two cores does without any deadlock; a failed workflow task is what the
cases' histories must never hold (`lost_workflow_tasks`), so it stays a failure for every
other cause (a nondeterministic replay above all). A real deadlock would still show: its task
would time out held by a live worker (`TASK_TIMEOUT`), which `lost_workflow_tasks` refuses."""


def identity(process: asyncio.subprocess.Process) -> str:
    """A worker process's Temporal identity (its client's default, `PID@HOST`), as history
    names who started a workflow or activity task (`process_of`)."""
    return f"{process.pid}@{socket.gethostname()}"


def process_of(named: str) -> str:
    """The `PID@HOST` of a worker identity in history: an agentloop worker names its tool set
    after it (`queue_peers.identity`)."""
    return named.split(TOOLS_MARK)[0]


async def kill(process: asyncio.subprocess.Process) -> str:
    """SIGKILL the worker; returns its identity."""
    process.send_signal(signal.SIGKILL)
    await process.wait()
    assert process.returncode == -signal.SIGKILL
    return identity(process)


async def history(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [e async for e in handle.fetch_history_events()]


async def chain_of(
    client: Client, handle: WorkflowHandle[Any, Any]
) -> list[tuple[str, list[HistoryEvent]]]:
    """Each run of the workflow's chain (continue-as-new), first to last: its run id and its
    history."""
    chain: list[tuple[str, list[HistoryEvent]]] = []
    run_id = handle.first_execution_run_id
    while run_id:
        events = await history(client.get_workflow_handle(handle.id, run_id=run_id))
        chain.append((run_id, events))
        last = events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else None
        )
    return chain


def lost_workflow_tasks(events: list[HistoryEvent], *killed: str) -> list[str]:
    """The timeout type of each timed-out workflow task of a run's history, once it is checked
    that no workflow task failed (a replay that diverged) and that each one that timed out was
    held by a killed worker (`kill`'s identities): started by it and lost with it, or waiting
    on its sticky queue. Anything else would be a wedged run (`assert_never_wedged`)."""
    by_id = {e.event_id: e for e in events}
    failed = [
        e.workflow_task_failed_event_attributes.failure.message
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == [], failed
    lost = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            continue
        timed_out = event.workflow_task_timed_out_event_attributes
        if timed_out.started_event_id:
            started = by_id[timed_out.started_event_id]
            holder = process_of(started.workflow_task_started_event_attributes.identity)
        else:  # never started: it waited on a sticky queue, named `IDENTITY-UUID`
            scheduled = by_id[timed_out.scheduled_event_id]
            queue = scheduled.workflow_task_scheduled_event_attributes.task_queue.name
            holder = process_of(queue.rpartition("-")[0])
        assert holder in killed, f"workflow task {event.event_id} of {holder} timed out"
        lost.append(TimeoutType.Name(timed_out.timeout_type))
    return lost


def task_identities(events: list[HistoryEvent]) -> list[str]:
    """Who started each workflow task of a run, in order."""
    return [
        process_of(e.workflow_task_started_event_attributes.identity)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    ]


def activity_attempts(events: list[HistoryEvent], *activity_types: str) -> list[tuple[int, str]]:
    """For each activity of those types in a run's history, in order: the attempt that ended
    it and the worker that ran that attempt (history keeps only the last attempt's start)."""
    scheduled = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name in activity_types
    }
    return [
        (
            e.activity_task_started_event_attributes.attempt,
            process_of(e.activity_task_started_event_attributes.identity),
        )
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]


def call(call_id: str, name: str, arguments: dict[str, Any]) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


def run_input(model: str, tools: list[str], **overrides: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Do the thing, once.",
            "provider": "openai-chat",
            "model": model,
            "tools": tools,
            "principal": Principal(subject="p-alice", scopes=ALL_SCOPES),
            **overrides,
        }
    )


def reserve_script(
    name: str, expect: str, *, final_delay_ms: int = 0, with_read: bool = False
) -> Script:
    """Turn 1: (optionally check ws-101, then) reserve a seat; turn 2: a final text."""
    calls = [call("call_reserve", "reserve_seat", RESERVE)]
    expected = {"call_reserve": expect}
    if with_read:
        calls.insert(0, call("call_check", "check_workshop", {"workshop_id": "ws-101"}))
        expected["call_check"] = "Intro to Temporal"
    return Script(
        name=name,
        turns=[
            ScriptTurn(tool_calls=calls, expect_tool_results=expected),
            ScriptTurn(text="Booked.", delay_ms=final_delay_ms),
        ],
    )


async def approve(
    handle: WorkflowHandle[Any, AgentRunResult], call_id: str, approver: str, digest: str
) -> None:
    await handle.signal(
        "approve",
        ApprovalDecision(call_id=call_id, args_digest=digest, approved=True, approver=approver),
    )


async def approve_pending(
    handle: WorkflowHandle[Any, AgentRunResult], call_id: str, approver: str = "workshop-lead"
) -> None:
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    assert pending.call_id == call_id
    await approve(handle, call_id, approver, pending.args_digest)


def counts(example_service: ExampleService) -> dict[str, int]:
    found: dict[str, int] = example_service.stats()["counts"]
    return found


def reservations(example_service: ExampleService) -> int:
    return int(example_service.records()["reservations"])


def by_id(calls: list[CallRecord]) -> dict[str, CallRecord]:
    return {c.call_id: c for c in calls}


def requests_to(example_service: ExampleService, endpoint: str) -> list[dict[str, Any]]:
    return [r for r in example_service.stats()["requests"] if r["endpoint"] == endpoint]


async def held_under(example_service: ExampleService, domain: str, key: str) -> Any:
    """What the system of record holds under an idempotency key (read after the counts)."""
    url = f"{example_service.base_url}/{domain}/operations/{quote(key, safe='')}"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


# --- the setup every phase shares ----------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """Where a case runs: the session's server and worker settings, a folder and a run id of
    its own."""

    client: Client
    settings: Settings
    folder: Path
    run_id: str
    starting: asyncio.Semaphore
    """Held while a worker process of a case starts (see `worker`)."""


@dataclass
class Crash:
    """One case's run: the fakes only it uses, its handle, the workers it ran on, and what its
    steps keep for its checks."""

    client: Client
    model: ScriptedProvider
    service: ExampleService
    run_id: str
    handle: WorkflowHandle[Any, AgentRunResult]
    key: str
    """The idempotency key its write `call_reserve` is sent under (when it makes that write)."""
    killed: str = ""
    """The identity of the worker killed (`kill`)."""
    second: str = ""
    """The identity of the worker that finished the run."""
    kept: dict[str, Any] = field(default_factory=dict)


@asynccontextmanager
async def own_fakes(folder: Path) -> AsyncIterator[tuple[ScriptedProvider, ExampleService]]:
    """A scripted model and an example service for one case alone (no other case's requests
    or effects in their counts); the model saw no protocol violation when the case is done."""
    model = ScriptedProvider()
    service = ExampleService(folder / "example.db")
    async with AsyncExitStack() as stack:
        await model.start(host="127.0.0.1", port=0)
        stack.push_async_callback(model.stop)
        await service.start(host="127.0.0.1", port=0)
        stack.push_async_callback(service.stop)
        yield model, service
        assert model.violations == []


@asynccontextmanager
async def worker(place: Place, env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    """A worker process of the case, started once `place.starting` lets it: starting one costs
    a core seconds of imports, and on a busy machine many starting at once would each take
    longer than a start may (`worker_process`). Once it polls, the next may start."""
    async with AsyncExitStack() as stack:
        async with place.starting:
            process = await stack.enter_async_context(worker_process(env))
        yield process


def make_env(
    client: Client,
    place: Place,
    model: ScriptedProvider,
    service: ExampleService,
    *,
    slow_http: bool,
) -> tuple[Settings, dict[str, str]]:
    """Settings and environment of a case's worker processes: its own task queue, store file,
    model and service, shared by the killed worker and the one that finishes the run."""
    updates: dict[str, Any] = {
        "task_queue": f"crash-{uuid.uuid4().hex[:8]}",
        "example_service_url": service.base_url,
        "openai_base_url": model.base_url,
        "anthropic_base_url": model.anthropic_base_url,
    }
    if slow_http:
        updates["tool_http_timeout_seconds"] = SLOW_HTTP
    settings = place.settings.model_copy(update=updates)
    return settings, {**worker_env(client, settings, place.folder / "store.db"), **STARVED_WORKER}


async def start_case_run(
    client: Client, settings: Settings, workflow_id: str, started: AgentRunInput
) -> WorkflowHandle[Any, AgentRunResult]:
    """A run of a case, its workflow tasks given `TASK_TIMEOUT`."""
    return await start_run(client, settings, workflow_id, started, task_timeout=TASK_TIMEOUT)


class Phase:
    """A phase of a run a worker is killed in: its steps around the setup all phases share
    (`crash`), and what must hold once the run finished (`check`)."""

    tools: tuple[str, ...] = ("reserve_seat",)
    slow_http = False
    """The workers' tool HTTP timeout is `SLOW_HTTP`: the killed one must still be waiting on
    the service when it dies, not have given up on it."""
    alone = False
    """Run after the others, one at a time: its timing leaves no room for a busy machine."""

    def scripts(self, run_id: str) -> list[Script]:
        return [reserve_script(run_id, f"{run_id}/")]

    def run_input(self, run_id: str) -> AgentRunInput:
        return run_input(run_id, list(self.tools))

    async def measured_input(
        self, place: Place, settings: Settings, model: ScriptedProvider, service: ExampleService
    ) -> AgentRunInput:
        """The input the run starts with, asked with the first worker up and before
        `prepare`: a case may first run a run of its own on the case's worker and fakes to
        measure it, and then clear the fakes' logs and the service's records."""
        return self.run_input(place.run_id)

    def prepare(self, service: ExampleService) -> None:
        """The service's delays and faults, set before the run starts. Its delays hold the
        first worker where it is killed: they are lifted before the second one starts."""

    async def until_killed(self, run: Crash) -> None:
        """With the first worker up and the run started: on to the moment of the kill."""
        raise NotImplementedError

    async def before_second(self, run: Crash) -> None:
        """After the kill, before the second worker starts."""

    async def with_second(self, run: Crash) -> None:
        """With the second worker up, before the run's result."""

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        """What must hold once the run finished (the second worker still up)."""
        raise NotImplementedError

    async def crash(self, place: Place) -> None:
        """A worker starts the run and is killed in the phase; a second one, on the same task
        queue and store, finishes it."""
        async with own_fakes(place.folder) as (model, service):
            settings, env = make_env(place.client, place, model, service, slow_http=self.slow_http)
            for script in self.scripts(place.run_id):
                model.register(script)
            async with worker(place, env) as first:
                started = await self.measured_input(place, settings, model, service)
                self.prepare(service)
                handle = await start_case_run(place.client, settings, place.run_id, started)
                key = write_key(handle, "call_reserve")
                run = Crash(place.client, model, service, place.run_id, handle, key)
                await self.until_killed(run)
                run.killed = await kill(first)
            await self.before_second(run)
            service.set_delay(None, 0)
            async with worker(place, env) as second:
                run.second = identity(second)
                await self.with_second(run)
                await self.check(run, await result_of(run.handle))


async def lost_only_while_waiting(run: Crash) -> None:
    """No workflow task was in flight at the kill; one may have waited on the dead worker's
    sticky queue before the server handed it to the new worker."""
    assert set(lost_workflow_tasks(await history(run.handle), run.killed)) <= {STICKY_TIMEOUT}


async def heartbeat_recorded(
    handle: WorkflowHandle[Any, Any], seconds: float = CEILING_SECONDS
) -> None:
    """Until the server holds a heartbeat of the run's activity in flight (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        if any(p.HasField("last_heartbeat_time") for p in pending):
            return
        if loop.time() > deadline:
            raise AssertionError(
                f"gave up after {seconds:g} s waiting for a heartbeat of the activity in flight"
            )
        await asyncio.sleep(0.05)


# --- the dev server itself restarted -------------------------------------------------------


class DevServer:
    """`temporal server start-dev` on a fixed port with a persistent database file."""

    def __init__(self, port: int, db_file: Path) -> None:
        self.port = port
        self.db_file = db_file
        self.process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Client:
        self.process = await asyncio.create_subprocess_exec(
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--headless",
            "--log-level",
            "error",
            "--db-filename",
            str(self.db_file),
            *FAST_DEV_SERVER,
            *search.dev_server_flags(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        return await self._connect()

    async def _connect(self) -> Client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CEILING_SECONDS
        while True:
            assert self.process is not None
            if self.process.returncode is not None:
                raise AssertionError(f"temporal server exited with {self.process.returncode}")
            try:
                return await Client.connect(self.address, data_converter=pydantic_data_converter)
            except RuntimeError:
                if loop.time() > deadline:
                    raise AssertionError(
                        f"gave up after {CEILING_SECONDS:g} s waiting for the Temporal dev "
                        f"server at {self.address} to answer"
                    ) from None
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()


class ServerRestart(Phase):
    """A phase the Temporal dev server itself is restarted in (same port, same database file),
    under a worker that rides out the outage and finishes the run."""

    alone = True

    async def before_restart(self, run: Crash) -> None:
        """With the run started: on to the moment of the restart."""
        raise NotImplementedError

    async def after_restart(self, run: Crash) -> None:
        """With the restarted server (`run.client`, `run.handle`), before the run's result."""

    async def crash(self, place: Place) -> None:
        server = DevServer(free_port(), place.folder / "temporal.db")
        try:
            client = await server.start()
            async with own_fakes(place.folder) as (model, service):
                settings, env = make_env(client, place, model, service, slow_http=self.slow_http)
                for script in self.scripts(place.run_id):
                    model.register(script)
                self.prepare(service)
                async with worker(place, env) as process:
                    started = self.run_input(place.run_id)
                    handle = await start_case_run(client, settings, place.run_id, started)
                    key = write_key(handle, "call_reserve")
                    run = Crash(client, model, service, place.run_id, handle, key)
                    await self.before_restart(run)
                    await server.stop()
                    assert server.db_file.exists()
                    run.client = await server.start()  # same port, same database file
                    assert process.returncode is None  # the worker rode out the outage
                    run.handle = run.client.get_workflow_handle(
                        place.run_id, result_type=AgentRunResult
                    )
                    run.second = identity(process)
                    await self.after_restart(run)
                    await self.check(run, await result_of(run.handle))
        finally:
            await server.stop()
