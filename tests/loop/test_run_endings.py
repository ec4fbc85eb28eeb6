"""How a run's end shows outside it, on the session's dev server and worker: a run that ends
`failed` is a failed workflow whose result every agentloop client still reads; a run refused at
its start is not listed running, and says why without a stack trace; with `require_verification`
a model that declines in words ends `unverified` (exit 7), without it `completed`."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentloop.contract import RUN_FAILED, AgentRunInput
from agentloop.run_client import RunClient
from agentloop.scripted_provider import ScriptTurn
from agentloop.search import AGENT_PHASE, AGENT_STATUS
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop, process_env
from tests.cli.test_cli_runs import one_document
from tests.live import Live, scripted
from tests.support import result_of, start_run

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

DECLINE = "I cannot book this: I have no access to the booking system."


def run_input(model: str, **fields: object) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {"task": "Book me a train.", "provider": "openai-chat", "model": model, **fields}
    )


def cli_env(live: Live) -> dict[str, str]:
    return process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
        AGENTLOOP_STORE_URL=live.worker.store_url,
    )


async def failure_event_stack(client: Client, workflow_id: str) -> str:
    """The stack trace the workflow's failure was recorded with (what the UI's FAILED page
    shows under the message)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    [failed] = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    ]
    return str(failed.workflow_execution_failed_event_attributes.failure.stack_trace)


async def test_a_failed_run_is_a_failed_workflow_and_its_result_is_still_read(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    # No script by this name: the provider answers 404, and the run ends `failed`.
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    result = await result_of(handle)  # read from the failure's details
    assert result.status == "failed" and result.stop_reason.startswith("model_error")
    assert result.usage.model_calls == 1 and "model_error" in result.report

    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.FAILED
    assert description.typed_search_attributes.get(AGENT_STATUS) == "failed"
    assert description.typed_search_attributes.get(AGENT_PHASE) == "finished"
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()  # a plain Temporal client sees the failure
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RUN_FAILED
    assert result.stop_reason in cause.message and "Book me a train." in cause.message
    assert await failure_event_stack(live.client, run_id) == ""
    assert (await RunClient(live.client, run_id).result()) == result

    status = await agentloop(
        "status",
        run_id,
        "--json",
        env=cli_env(
            live,
        ),
        cwd=tmp_path,
    )
    assert status.returncode == 1, status.explain()
    snapshot = one_document(status)
    assert snapshot["execution"] == "FAILED"
    assert snapshot["result"]["status"] == "failed"
    assert snapshot["result"]["stop_reason"] == result.stop_reason


async def test_a_worker_may_keep_failed_runs_completed_workflows(live: Live, run_id: str) -> None:
    kept = live.worker.model_copy(
        update={"task_queue": f"{live.worker.task_queue}-complete", "failed_runs": "complete"}
    )
    async with running_worker(live.client, kept):
        handle = await start_run(live.client, kept, run_id, run_input(run_id))
        result = await handle.result()  # as earlier builds: the workflow completed with it
    assert result.status == "failed"
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_a_run_refused_at_its_start_is_not_listed_running_and_says_why_plainly(
    live: Live, run_id: str
) -> None:
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, tools=["get_wether"])
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await result_of(handle)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "unknown tool 'get_wether'; did you mean 'get_weather'?" in cause.message
    assert await failure_event_stack(live.client, run_id) == ""
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(AGENT_STATUS) == "failed"
    assert attributes.get(AGENT_PHASE) == "finished"


@pytest.mark.parametrize("required", [True, False], ids=["required", "not-required"])
async def test_a_decline_in_words_ends_unverified_only_when_verification_is_required(
    live: Live, run_id: str, tmp_path: Path, required: bool
) -> None:
    # The model declines in words twice: no give_up, no completion check.
    live.provider.register(scripted(run_id, ScriptTurn(text=DECLINE), ScriptTurn(text=DECLINE)))
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, require_verification=required)
    )
    result = await result_of(handle)
    status = await agentloop(
        "status",
        run_id,
        "--json",
        env=cli_env(
            live,
        ),
        cwd=tmp_path,
    )
    if not required:
        assert (result.status, result.verified, result.usage.model_calls) == ("completed", False, 1)
        assert status.returncode == 0, status.explain()
        return
    assert result.status == "unverified" and result.stop_cause == "verification"
    assert result.output == DECLINE and result.usage.model_calls == 2
    # Told once, as for an empty answer: the second request carries the runner's note.
    second = live.provider.requests[1]["body"]
    assert "was not accepted" in str(second) and "verified answer" in str(second)
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert status.returncode == 7, status.explain()
    assert one_document(status)["result"]["status"] == "unverified"
