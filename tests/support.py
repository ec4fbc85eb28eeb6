"""Helpers the integration tests share: starting runs, waiting on real conditions, running a
worker as a separate OS process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agentloop import search
from agentloop.activities.tools import ToolActivities
from agentloop.contract import (
    APPROVE_SIGNAL,
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    PendingApproval,
    RunStatusView,
)
from agentloop.run_results import read_result
from agentloop.runtime.config import Settings
from agentloop.store import Store
from agentloop.testing.harness import waiting_for
from agentloop.testing.patience import CEILING_SECONDS, status_or_why_not
from agentloop.tools.contract import Tool
from agentloop.tools.plugins import OpenedToolbox, Plugin, Toolset, build_toolbox
from agentloop.workflows.deadline import DEADLINE_TIMER_SUMMARY

WORKER_READY_LINE = "agentloop worker polling"
STOP_SECONDS = 10
"""How long a process asked to stop (SIGTERM) has before it is killed: cleanup, asserting
nothing."""
T = TypeVar("T")


def write_key(handle: WorkflowHandle[Any, Any], call_id: str) -> str:
    """The idempotency key a run's write `call_id` is sent under: unique per run chain."""
    return f"{handle.id}/{handle.first_execution_run_id}/{call_id}"


def tool_activities(tools: Sequence[Tool], store: Store, deps: Any = None) -> ToolActivities:
    """The tool activities of a worker serving `tools` beside the built-ins, the tools'
    dependencies (`ctx.deps`) being `deps`."""
    box = build_toolbox([Plugin("tests", Toolset(tools=tuple(tools)))])
    return ToolActivities(OpenedToolbox(box, {"tests": deps}), store)


async def start_run(
    client: Client,
    settings: Settings,
    workflow_id: str,
    run_input: AgentRunInput | dict[str, Any],
    *,
    indexed: bool = True,
    task_timeout: timedelta | None = None,
) -> WorkflowHandle[Any, AgentRunResult]:
    """Start a run as the CLI does: with its UI summary and, unless `indexed` is False (a
    server without agentloop's search attributes), its search attributes; its workflow tasks
    time out after `task_timeout` (Temporal's 10 s when None)."""
    return await client.start_workflow(
        WORKFLOW_NAME,
        run_input,
        id=workflow_id,
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
        task_timeout=task_timeout,
        static_summary=run_input.summary() if isinstance(run_input, AgentRunInput) else None,
        search_attributes=search.initial(run_input)
        if isinstance(run_input, AgentRunInput) and indexed
        else None,
    )


async def deadline_timers(handle: WorkflowHandle[Any, Any]) -> dict[str, int]:
    """How many of the run's deadline timers (by their UI summary) were started, fired and
    cancelled; other timers (a wait for humans' own timeout) are not counted."""
    events = [e async for e in handle.fetch_history_events()]
    started = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        and e.user_metadata.summary.data
        and json.loads(e.user_metadata.summary.data) == DEADLINE_TIMER_SUMMARY
    }
    fired = [
        e.timer_fired_event_attributes.started_event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
    ]
    cancelled = [
        e.timer_canceled_event_attributes.started_event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_CANCELED
    ]
    return {
        "started": len(started),
        "fired": len(started.intersection(fired)),
        "cancelled": len(started.intersection(cancelled)),
    }


def scheduled_activity_types(events: Sequence[HistoryEvent]) -> list[str]:
    """The types of the activities a history scheduled, in order."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


def activity_result(events: Sequence[HistoryEvent], activity_type: str) -> Any:
    """The JSON result of the one completed activity of `activity_type` in a history."""
    scheduled = {
        e.event_id
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    }
    (completed,) = [
        e.activity_task_completed_event_attributes
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
        and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
    ]
    return json.loads(completed.result.payloads[0].data)


async def wait_until(
    predicate: Callable[[], bool], what: str, seconds: float = CEILING_SECONDS
) -> None:
    """Poll a cheap condition until it holds (bounded): never a bare sleep."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {seconds:g} s waiting for {what}")
        await asyncio.sleep(0.05)


INBOX_REFRESH = timedelta(seconds=0.25)
"""How often an inbox under test lists the waiting runs again (`InboxOptions.refresh`): a run
waiting shows in it well within a page's poll."""


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, seconds: float = CEILING_SECONDS
) -> None:
    """Poll an async condition until it holds (bounded): never a bare sleep."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def waited_for(awaitable: Awaitable[T], what: str, seconds: float = CEILING_SECONDS) -> T:
    """What `awaitable` gives (a process's exit, a task's end, a read), waited for at most
    `seconds`: past that, fails saying what it waited for."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise AssertionError(f"gave up after {seconds:g} s waiting for {what}") from None


async def result_of(
    handle: WorkflowHandle[Any, AgentRunResult], seconds: float = CEILING_SECONDS
) -> AgentRunResult:
    """The run's result, waited for at most `seconds`: past that, fails saying what the run
    waits for instead."""
    try:
        return await asyncio.wait_for(read_result(handle), seconds)
    except TimeoutError:
        raise AssertionError(
            f"gave up after {seconds:g} s waiting for the result of run {handle.id}: "
            f"{await _what_it_waits_for(handle)}"
        ) from None


async def _what_it_waits_for(handle: WorkflowHandle[Any, AgentRunResult]) -> str:
    """`waiting_for` of the run's status, for a failure's message."""
    view = await status_or_why_not(handle)
    return view if isinstance(view, str) else waiting_for(view)


async def wait_for_status(
    handle: WorkflowHandle[Any, AgentRunResult],
    predicate: Callable[[RunStatusView], bool],
    what: str,
    seconds: float = CEILING_SECONDS,
) -> RunStatusView:
    """Poll the `status` query until `predicate` holds (bounded); returns that view. A query
    not answered this time (a busy worker, a query buffer full) is asked again
    (`status_or_why_not`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        view = await status_or_why_not(handle)
        if not isinstance(view, str) and predicate(view):
            return view
        if loop.time() > deadline:
            last = view if isinstance(view, str) else f"last phase: {view.phase}"
            if not isinstance(view, str) and view.phase == "finished":
                last += f" ({view.stop_reason})"
            raise AssertionError(f"gave up after {seconds:g} s waiting for {what}; {last}")
        await asyncio.sleep(0.05)


async def wait_for_phase(
    handle: WorkflowHandle[Any, AgentRunResult], phase: str, seconds: float = CEILING_SECONDS
) -> RunStatusView:
    return await wait_for_status(handle, lambda v: v.phase == phase, f"phase {phase}", seconds)


STREAM_KEY = "tests: the stream key every worker process shares"


async def read_until(
    stream: asyncio.StreamReader | None,
    seen: list[str],
    done: Callable[[str], bool],
    what: str,
    seconds: float = CEILING_SECONDS,
) -> str:
    """Read lines into `seen` until their text satisfies `done` (bounded); that text."""
    assert stream is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not done(text := "".join(seen)):
        try:
            line = await asyncio.wait_for(stream.readline(), deadline - loop.time())
        except TimeoutError:
            raise AssertionError(
                f"gave up after {seconds:g} s waiting for {what}; output so far:\n{text}"
            ) from None
        if not line:
            raise AssertionError(f"the output ended before {what}:\n{text}")
        seen.append(line.decode())
    return text


def worker_env(client: Client, settings: Settings, store: Path) -> dict[str, str]:
    """The environment of a worker process serving `settings` on `client`'s server."""
    env = {
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "AGENT_LOOP_TASK_QUEUE": settings.task_queue,
        "AGENTLOOP_STORE_URL": f"sqlite:///{store}",
        "AGENTLOOP_EXAMPLE_SERVICE_URL": settings.example_service_url,
        "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS": str(settings.tool_http_timeout_seconds),
        "AGENTLOOP_TOOLS": settings.tools or "",
        "AGENTLOOP_STICKY_TIMEOUT_SECONDS": str(settings.sticky_timeout_seconds),
        # One key for every worker process of a test: a run moved to another worker reads
        # the text its first worker sealed as its own.
        "AGENTLOOP_STREAM_KEY": STREAM_KEY,
    }
    for name, value in (
        ("OPENAI_API_KEY", settings.openai_api_key),
        ("OPENAI_BASE_URL", settings.openai_base_url),
        ("ANTHROPIC_API_KEY", settings.anthropic_api_key),
        ("ANTHROPIC_BASE_URL", settings.anthropic_base_url),
    ):
        if value:
            env[name] = value
    return env


@asynccontextmanager
async def worker_process(
    env: dict[str, str],
    command: Sequence[str] = (sys.executable, "-m", "agentloop.worker"),
    ready: str = WORKER_READY_LINE,
    *,
    drained: bool = True,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A worker (`python -m agentloop.worker`, or `command`) as its own OS process, yielded
    once it prints `ready` (it polls). Unless `drained` is False (the test reads it), its
    output is read to the end all along: a pipe nobody reads fills, and a worker writing its
    audit log to it would stop in the middle of a run (and `wait()` on a killed one would
    never see the pipe close)."""
    process = await asyncio.create_subprocess_exec(
        *command,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    drain: asyncio.Task[None] | None = None
    try:
        assert process.stdout is not None
        what = f"{' '.join(command)} to print {ready!r}"
        await read_until(process.stdout, [], lambda text: ready in text, what)
        if drained:
            drain = asyncio.create_task(_drain(process.stdout))
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        if drain is not None:
            await drain


@asynccontextmanager
async def banner_process(
    command: Sequence[str],
    ready: str,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    with_stderr: bool = True,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A server process, yielded with its output up to the line holding `ready` (its
    banner); stopped with SIGTERM (then SIGKILL) on the way out unless it exited. Without
    `with_stderr` its stderr is this process's: a server logging every request there must
    not fill a pipe the test stops reading after the banner."""
    process = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if with_stderr else None,
    )
    try:
        what = f"{' '.join(command)} to print {ready!r}"
        banner = await read_until(process.stdout, [], lambda text: ready in text, what)
        yield process, banner
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()


async def approve_as_shown(
    handle: WorkflowHandle[Any, AgentRunResult], pending: PendingApproval, approver: str
) -> None:
    """Approve one of `status.pending_approvals` under the digest of the exact arguments it
    shows."""
    await signal_approval(handle, pending.call_id, pending.args_digest, approver)


async def signal_approval(
    handle: WorkflowHandle[Any, Any],
    call_id: str,
    args_digest: str,
    approver: str,
    *,
    approved: bool = True,
    **decision: Any,
) -> None:
    """Send a run one approval decision (approving unless `approved=False`) on the call
    `call_id` whose arguments have the digest `args_digest`; `decision` holds its other
    fields (`reason`, `principal`, ...)."""
    await handle.signal(
        APPROVE_SIGNAL,
        ApprovalDecision(
            call_id=call_id,
            args_digest=args_digest,
            approved=approved,
            approver=approver,
            **decision,
        ),
    )


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def register_bare_namespace(client: Client, run_id: str) -> str:
    """A namespace of the test server without agentloop's search attributes. The dev server
    has answered the registration "operation was canceled" once under load: asked again."""
    name = f"bare-{run_id[-8:]}"
    request = RegisterNamespaceRequest(
        namespace=name, workflow_execution_retention_period=Duration(seconds=86400)
    )
    for attempt in range(3):
        try:
            await client.workflow_service.register_namespace(request)
            return name
        except RPCError as exc:
            if exc.status == RPCStatusCode.ALREADY_EXISTS and attempt:
                return name  # the canceled call registered it after all
            if exc.status != RPCStatusCode.CANCELLED or attempt == 2:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")
