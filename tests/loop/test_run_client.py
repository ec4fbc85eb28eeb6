"""The run client (`agentloop.RunClient`) reads a run's start input through continue-as-new:
a run continued as new is started without it, and its tenant is its first run's, for the
library and for `agentloop continue` alike."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentloop.contract import ApprovalDecision
from agentloop.run_client import RunClient
from tests.cli.test_cli import agentloop, process_env
from tests.live import Live
from tests.loop.test_continue_as_new import booking_input, booking_script
from tests.support import wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


async def test_a_continued_runs_start_input_and_tenant_are_its_first_runs(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    live.provider.register(booking_script(run_id))
    started_with = booking_input(run_id, tenant="acme")
    run = await RunClient.start(
        live.client, started_with, id=run_id, task_queue=live.worker.task_queue
    )
    waiting = await wait_for_phase(run.handle, "awaiting_approval")
    assert len(waiting.run_chain) >= 2, "no continue-as-new before the approval"
    newest = (await run.handle.describe()).run_id
    assert newest != waiting.run_chain[0]
    # What the newest run was started with: no input (its carried state holds it).
    async for event in live.client.get_workflow_handle(
        run_id, run_id=newest
    ).fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        break
    assert (await live.client.data_converter.decode(payloads[:1])) == [None]

    assert await run.start_input() == started_with
    assert await RunClient(live.client, run_id, run_id=newest).start_input() == started_with

    [pending] = waiting.pending_approvals
    decision = ApprovalDecision(
        call_id=pending.call_id,
        args_digest=pending.args_digest,
        approved=True,
        approver="workshop-lead",
    )
    verdict = await run.decide(decision)
    assert verdict.accepted, verdict.reason
    assert (await run.result()).status == "completed"
    assert await run.start_input() == started_with  # closed: the same, from history

    # `agentloop continue` takes the principal (its tenant) from the first run. The new run
    # goes to a queue no worker polls: only its start input is read.
    continued_id = f"{run_id}-continued"
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=f"{run_id}-unpolled",
    )
    continued = await agentloop(
        "continue", run_id, "--max-model-calls", "1", "--id", continued_id, env=env, cwd=tmp_path
    )
    assert continued.returncode == 0, continued.explain()
    try:
        continuing = await RunClient(live.client, continued_id).start_input()
        assert continuing is not None
        assert continuing.principal == started_with.principal
        assert continuing.principal.tenant == "acme"
        assert continuing.continue_from == run_id
    finally:
        await live.client.get_workflow_handle(continued_id).terminate("test over")

    # Where the first run is no longer kept: the input the newest run carries in its state.
    first = waiting.run_chain[0]
    await live.client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=live.client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=run_id, run_id=first),
        )
    )
    await until_not_found(live.client, run_id, first)
    assert await run.start_input() == started_with


async def until_not_found(client: Client, workflow_id: str, run_id: str) -> None:
    """Until Temporal says `run_id` of `workflow_id` is not there (deleting is asynchronous)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    while True:
        try:
            await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        assert loop.time() < deadline, f"run {run_id} is still kept 60 s after its deletion"
        await asyncio.sleep(0.1)


async def test_a_run_that_does_not_exist_is_not_found(client: Client, run_id: str) -> None:
    with pytest.raises(RPCError) as raised:
        await RunClient(client, f"{run_id}-never-started").start_input()
    assert raised.value.status == RPCStatusCode.NOT_FOUND
