"""A flood of large signals at a waiting run (issue 45): the run continues as new in time,
still waits, and completes after an approval; Temporal never terminates it for size."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from datetime import UTC, datetime

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError

from agentloop.contract import AgentRunInput, AgentRunResult, Principal
from agentloop.scripted_provider import ScriptedToolCall as call
from agentloop.scripted_provider import ScriptTurn
from agentloop.workflows.startup import CONTINUE_AS_NEW_MIN_INTERVAL
from agentloop.workflows.stream import PUBLISH_SIGNAL
from tests.live import Live, agent_input, scripted
from tests.support import (
    approve_as_shown,
    eventually,
    result_of,
    start_run,
    wait_for_phase,
    wait_for_status,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

FLOOD = 40
"""Signals sent: together 76 MB, past Temporal's 50 MB history limit for one run."""
FLOODER = """
import asyncio, os, sys
from temporalio.client import Client

async def flood(address, workflow_id, name, count):
    handle = (await Client.connect(address)).get_workflow_handle(workflow_id)
    for n in range(int(count)):
        # Each just under Temporal's 2 MiB payload limit, so the server takes every one; each
        # lands on the chain's run of the moment, and one at a terminated run fails here.
        await handle.signal(name, {"n": n, "padding": "x" * 1_900_000})
    print("sent", count, flush=True)

asyncio.run(flood(*sys.argv[1:]))
os._exit(0)  # the client's runtime once crashed the interpreter as it shut down
"""
"""Another process sends the flood, back to back, as whoever floods a run would: not the
worker's (whose workflow tasks would wait on the sender's encoding)."""


async def flood(client: Client, workflow_id: str, name: str) -> str | None:
    """None once every signal was taken; else why the sender stopped."""
    sender = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FLOODER,
        client.service_client.config.target_host,
        workflow_id,
        name,
        str(FLOOD),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    said, errors = await sender.communicate()
    if f"sent {FLOOD}" in said.decode().splitlines():  # (the client logs its warnings there too)
        return None
    return f"exit {sender.returncode}, said {said.decode()!r}: {errors.decode()[-500:]}"


async def chain(client: Client, workflow_id: str) -> str:
    """Each run of the chain: its status, history size, and its workflow tasks that failed, by
    cause (what a run that died of a flood shows: tasks the server force-closed)."""
    lines = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        failed = Counter(
            [
                WorkflowTaskFailedCause.Name(event.workflow_task_failed_event_attributes.cause)
                async for event in handle.fetch_history_events()
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            ]
        )
        info = (await handle.describe()).raw_description.workflow_execution_info
        status = execution.status.name if execution.status else "?"
        lines.append(f"{status} {info.history_size_bytes} bytes, failed tasks {dict(failed)}")
    return "; ".join(lines)


def reserve_turn() -> ScriptTurn:
    """The model asks for a seat: a write that waits for approval."""
    arguments = {"workshop_id": "ws-101", "participant_id": "p-carol"}
    return ScriptTurn(tool_calls=[call(id="c1", name="reserve_seat", arguments=arguments)])


def reserve_input(run_id: str) -> AgentRunInput:
    return agent_input(
        run_id,
        "openai-chat",
        "Book p-carol into ws-101.",
        ["reserve_seat"],
        principal=Principal(subject="p-alice", scopes=["workshops:write"]),
    )


@pytest.mark.xfail(
    strict=False,
    reason="issue 45 part 1 holds only while the run's workflow tasks outpace the flood: Temporal"
    " fails a task once two such signals arrive during it and refuses a continue-as-new if one"
    " does, and every task after a failed one replays the whole history; at load 18-28 a task"
    " took up to 0.7 s and a replay 2-4 s against signals every 0.5 s, and 6 of 16 floods were"
    " survived (docs/concepts/limits.md, 'A flood of signals')",
)
@pytest.mark.parametrize("signal_name", [PUBLISH_SIGNAL, "noise"])
async def test_forty_large_signals_at_a_waiting_run_never_get_it_terminated(
    live: Live, run_id: str, signal_name: str
) -> None:
    live.provider.register(scripted(run_id, reserve_turn(), "Booked."))
    started = await start_run(live.client, live.worker, run_id, reserve_input(run_id))
    [pending] = (await wait_for_phase(started, "awaiting_approval")).pending_approvals
    latest = live.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    stopped = await flood(live.client, run_id, signal_name)
    runs = [r async for r in live.client.list_workflows(f"WorkflowId = '{run_id}'")]
    statuses = Counter(r.status for r in runs)
    assert statuses[WorkflowExecutionStatus.TERMINATED] == 0, await chain(live.client, run_id)
    assert stopped is None, stopped

    waiting = await wait_for_phase(latest, "awaiting_approval", seconds=180)
    assert len(waiting.run_chain) > 1, await chain(live.client, run_id)
    assert [(p.call_id, p.args_digest) for p in waiting.pending_approvals] == [
        (pending.call_id, pending.args_digest)
    ]

    await approve_as_shown(latest, pending, "workshop-lead")
    result = await result_of(latest)
    assert result.status == "completed", result.stop_reason
    assert [(c.call_id, c.status) for c in result.calls] == [("c1", "succeeded")]
    assert live.service.records()["reservations"] == 1


async def test_a_waiting_run_continues_as_new_once_signals_brought_a_megabyte(
    live: Live, run_id: str
) -> None:
    """Far below Temporal's suggestion (4 MiB): one signal at a time, each taken before the
    next, until the run has continued as new."""
    live.provider.register(scripted(run_id, reserve_turn(), "Ok."))
    started = await start_run(live.client, live.worker, run_id, reserve_input(run_id))
    [pending] = (await wait_for_phase(started, "awaiting_approval")).pending_approvals
    latest = live.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    # Within its first second a run does not continue as new for size (Temporal would hold
    # the next run's first task back while signals pile into it): signal an older run.
    started_at = (await started.describe()).start_time

    async def past_its_first_second() -> bool:
        return datetime.now(UTC) - started_at > 2 * CONTINUE_AS_NEW_MIN_INTERVAL

    await eventually(past_its_first_second, "the run to be past its first second")
    for n in range(1, 13):
        await latest.signal("noise", {"n": n, "padding": "x" * 500_000})
        view = await wait_for_status(
            latest,
            lambda view, n=n: sum(r.signal == "noise" for r in view.refused_decisions) == n,
            f"signal {n} refused",
        )
        if len(view.run_chain) > 1:
            break
    described = await live.client.get_workflow_handle(run_id, run_id=view.run_chain[0]).describe()
    assert len(view.run_chain) > 1
    assert described.raw_description.workflow_execution_info.history_size_bytes < 4 * 2**20
    # Temporal's suggestion comes at 4 MiB: this run continued on its own count.

    await approve_as_shown(latest, pending, "workshop-lead")
    result = await result_of(latest)
    assert result.status == "completed", result.stop_reason
    assert live.service.records()["reservations"] == 1


async def test_updates_the_validator_rejects_leave_nothing_in_history(
    live: Live, run_id: str
) -> None:
    """Ten `decide_approval` updates of 300,000 bytes each (under the 512,000 an update may
    hold, over the 256,000 a decision may): each rejected, and the history no larger."""
    live.provider.register(scripted(run_id, reserve_turn()))
    started = await start_run(live.client, live.worker, run_id, reserve_input(run_id))
    [pending] = (await wait_for_phase(started, "awaiting_approval")).pending_approvals
    before = await history_size(live.client, run_id)
    for n in range(10):
        decision = {"call_id": pending.call_id, "args_digest": "x" * 300_000, "n": n}
        with pytest.raises(WorkflowUpdateFailedError):
            await started.execute_update("decide_approval", decision)
    assert await history_size(live.client, run_id) - before < 300_000
    await started.cancel()


async def history_size(client: Client, workflow_id: str) -> int:
    described = await client.get_workflow_handle(workflow_id).describe()
    return described.raw_description.workflow_execution_info.history_size_bytes


async def test_a_flood_met_in_the_runs_first_second_continues_it_as_new_once_that_is_over(
    live: Live, run_id: str
) -> None:
    """Signals that brought a megabyte while the run was too young to continue as new: the
    wait wakes when the run is old enough, with nothing more sent (before, it waited for the
    next signal to look again)."""
    live.provider.register(scripted(run_id, reserve_turn(), "Ok."))
    started = await start_run(live.client, live.worker, run_id, reserve_input(run_id))
    [pending] = (await wait_for_phase(started, "awaiting_approval")).pending_approvals
    latest = live.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    for n in range(3):
        await latest.signal("noise", {"n": n, "padding": "x" * 500_000})
    view = await wait_for_status(latest, lambda v: len(v.run_chain) > 1, "the run to continue")
    assert [p.call_id for p in view.pending_approvals] == [pending.call_id]

    await approve_as_shown(latest, pending, "workshop-lead")
    result = await result_of(latest)
    assert result.status == "completed", result.stop_reason
    assert live.service.records()["reservations"] == 1
