"""A wedged run (its workflow task keeps failing) is visible and can be taken back: a run paused
on a real worker is handed, by a message, to a worker whose `AgentRun` raises in every task (a
broken deploy); `list`, `status` and the inbox's run page show it with the worker's error, and
`agentloop reset` takes it back to its last good task, where a good worker finishes it with
the message applied again."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeAlias

import aiohttp
import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agentloop.contract import WORKFLOW_NAME, AgentRunResult
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.inbox.pages import run_path
from agentloop.inbox.reading import RunInputs, read_story
from agentloop.operations.failing_tasks import FailureFound, diverged_event, failing_attempt
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop, assert_no_traceback, process_env
from tests.cli.test_cli_runs import one_document, question_script
from tests.support import eventually, result_of, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

BROKEN = "a broken deploy: this worker's AgentRun raises in every task"


@workflow.defn(name=WORKFLOW_NAME)
class BrokenAgentRun:
    """What a worker with a broken deploy runs under agentloop's workflow name: every task it
    is given fails (a RuntimeError is not a workflow failure: the task is retried for ever)."""

    @workflow.run
    async def run(self, run_input: Any) -> None:
        raise RuntimeError(BROKEN)


@workflow.defn(name=WORKFLOW_NAME)
class ReorderedAgentRun:
    """A deploy that changed what `AgentRun` does first: it waits an hour before anything;
    replaying any history of the real one fails with a nondeterminism error naming the first
    event it disagrees with."""

    @workflow.run
    async def run(self, run_input: Any) -> None:
        await workflow.sleep(timedelta(hours=1))


@dataclass
class Wedged:
    handle: WorkflowHandle[Any, AgentRunResult]
    settings: Settings
    env: dict[str, str]


@asynccontextmanager
async def wedged_run(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    run_id: str,
    broken: type,
) -> AsyncIterator[Wedged]:
    """A run that asked its question on a good worker, answered while a worker running
    `broken` as `AgentRun` has the run's queue: open while that worker fails the run's task
    (twice at least). The run has its own queue and its tenant is `run_id`."""
    settings = worker_settings.model_copy(update={"task_queue": f"wedged-{run_id}"})
    env = process_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=settings.task_queue,
        AGENTLOOP_STORE_URL=settings.store_url,
    )
    scripted_provider.register(question_script(run_id))
    handle = client.get_workflow_handle(run_id, result_type=AgentRunResult)
    async with running_worker(client, settings):
        started = await agentloop(
            "run", "When?", "--model", run_id, "--id", run_id, "--tenant", run_id, env=env
        )
        assert started.returncode == 0, started.explain()
        await wait_for_phase(handle, "awaiting_input")
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[broken],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    async with worker:
        await answer(handle.id, env)

        async def failing_again() -> bool:
            return failing_attempt(await handle.describe()) >= 2

        await eventually(failing_again, "the broken worker's task to fail twice")
        yield Wedged(handle, settings, env)


Wedging: TypeAlias = Callable[[type], AbstractAsyncContextManager[Wedged]]


@pytest.fixture
def wedging(
    client: Client, worker_settings: Settings, scripted_provider: ScriptedProvider, run_id: str
) -> Wedging:
    """`wedged_run` for this test's run, given the broken workflow class."""
    return functools.partial(wedged_run, client, worker_settings, scripted_provider, run_id)


async def answer(run_id: str, env: dict[str, str]) -> None:
    sent = await agentloop(
        "message", run_id, "--sender", "traveller", "--text", "2026-12-01", env=env
    )
    assert sent.returncode == 0, sent.explain()


async def reset_run(run_id: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    reset = await agentloop("reset", run_id, "--json", *args, env=env)
    assert reset.returncode == 0, reset.explain()
    done: dict[str, Any] = one_document(reset)
    assert done["new_run_id"] != done["old_run_id"], done
    return done


async def test_a_wedged_run_is_listed_with_its_error_and_reset_to_its_last_good_task(
    client: Client, wedging: Wedging, run_id: str
) -> None:
    async with wedging(BrokenAgentRun) as wedged:
        handle, env = wedged.handle, wedged.env
        rows: list[Any] = []

        async def listed_by_tenant() -> bool:
            listed = await agentloop("list", "--tenant", run_id, "--json", env=env)
            assert listed.returncode == 0, listed.explain()
            rows[:] = one_document(listed)
            return bool(rows)

        # Visibility is eventually consistent: the run may take a moment to be found.
        await eventually(listed_by_tenant, "list to find the run by its tenant")
        [row] = rows
        assert row["workflow_id"] == run_id and row["task_checked"] is True, row
        failing = row["task_failure"]
        assert failing["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE", failing
        assert BROKEN in failing["error"] and failing["attempt"] >= 2, failing
        # Reset runs the failing task again in a new run: the last good task (which asked the
        # question) and the answer that came after it stay where they were.
        assert failing["reset_event_id"] == failing["failed_event_id"], failing
        assert failing["last_good_event_id"] < failing["failed_event_id"], failing
        assert failing["diverged_event_id"] is None, failing
        as_text = await agentloop("list", "--tenant", run_id, env=env)
        assert "WEDGED: workflow task failing (attempt" in as_text.stdout, as_text.explain()
        assert BROKEN in as_text.stdout, as_text.explain()

        status = await agentloop("status", run_id, "--json", env=env)
        assert status.returncode == 6, status.explain()
        snapshot = one_document(status)
        assert snapshot["outcome"] == "wedged" and snapshot["status"] is None, snapshot
        assert snapshot["task_failure"]["reset_event_id"] == failing["reset_event_id"], snapshot
        assert BROKEN in snapshot["task_failure"]["error"], snapshot
        shown = await agentloop("status", run_id, env=env)
        assert shown.returncode == 6, shown.explain()
        assert BROKEN in shown.stdout and f"agentloop reset {run_id}" in shown.stdout

        # What the run cannot answer, the reason status and the inbox look elsewhere: the
        # query fails ("Workflow Task in failed state") or, sent on to the broken worker,
        # never comes back.
        with pytest.raises((RPCError, WorkflowQueryFailedError)):
            await handle.query("status", rpc_timeout=timedelta(seconds=10))

        story = await read_story(client, RunInputs(), run_id, timedelta(seconds=2))
        assert story.execution == "RUNNING" and story.view is None, story
        assert story.failure is not None and story.failure.startswith("Wedged:"), story
        assert BROKEN in story.failure and f"agentloop reset {run_id}" in story.failure
        options = InboxOptions(auth_header="X-Inbox-User", tenants={"ops": [run_id]})
        async with (
            InboxServer(client, options, "127.0.0.1", 0) as inbox,
            aiohttp.ClientSession() as http,
            http.get(inbox.url + run_path(run_id), headers={"X-Inbox-User": "ops"}) as page,
        ):
            assert page.status == 200, await page.text()
            assert "Wedged: workflow task failing (attempt" in await page.text()
            assert BROKEN.split("'")[0] in await page.text()

    # Reset while no worker polls the run's queue: a good worker polling it would take the
    # failing task's next attempt, succeed, and leave nothing to reset (fixing the workers
    # alone heals such a run).
    first_run = (await handle.describe()).run_id
    done = await reset_run(run_id, env)
    assert done["old_run_id"] == first_run, done
    assert done["reset_event_id"] == failing["reset_event_id"], done
    assert done["failing"]["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE", done
    async with running_worker(client, wedged.settings):
        new_run = client.get_workflow_handle(
            run_id, run_id=done["new_run_id"], result_type=AgentRunResult
        )
        # The answer sent before the run wedged is read after the question, as it came.
        result = await result_of(new_run)
        assert result.status == "completed" and result.output == "Noted: 2026-12-01", result
    # A run that is not wedged (this one has completed) is not reset without --to.
    healthy = await agentloop("reset", run_id, env=env)
    assert healthy.returncode == 1, healthy.explain()
    assert "is not failing: nothing to reset" in healthy.stderr, healthy.explain()
    assert_no_traceback(healthy)


async def test_a_run_whose_history_today_s_code_cannot_replay_is_reset_to_an_event_given(
    client: Client, wedging: Wedging, run_id: str
) -> None:
    async with wedging(ReorderedAgentRun) as wedged:
        handle, env = wedged.handle, wedged.env
        status = await agentloop("status", run_id, "--json", env=env)
        assert status.returncode == 6, status.explain()
        failing = one_document(status)["task_failure"]
        assert failing["cause"] == "NON_DETERMINISTIC_ERROR", failing
        assert "[TMPRL1100]" in failing["error"], failing
        # The code disagrees with the run's first task already: the operator takes it back to
        # that task, the first WorkflowTaskCompleted (what `agentloop history` shows).
        first_task = min(
            [
                e.event_id
                async for e in handle.fetch_history_events()
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            ]
        )

    done = await reset_run(run_id, env, "--to", str(first_task))
    assert done["reset_event_id"] == first_task, done
    async with running_worker(client, wedged.settings):
        new_run = client.get_workflow_handle(
            run_id, run_id=done["new_run_id"], result_type=AgentRunResult
        )
        # The run works from its start again and asks again: the answer given before the reset
        # is applied again after the reset point, before the question, so it is asked for again.
        await wait_for_phase(new_run, "awaiting_input")
        await answer(run_id, env)
        result = await result_of(new_run)
        assert result.status == "completed" and result.output == "Noted: 2026-12-01", result


@pytest.mark.parametrize(
    ("cause", "error", "event_id"),
    [
        (
            "NON_DETERMINISTIC_ERROR",
            "[TMPRL1100] Nondeterminism error: ModifyWorkflowPropertiesMachine does not handle "
            "HistoryEvent(id: 40, WorkflowExecutionUpdateAccepted)",
            40,
        ),
        (
            "NON_DETERMINISTIC_ERROR",
            "[TMPRL1100] Missing associated machine for LocalActivity(1)",
            None,
        ),
        ("WORKFLOW_WORKER_UNHANDLED_FAILURE", "printed HistoryEvent(id: 7, ...) in a log", None),
    ],
)
def test_a_nondeterminism_error_names_the_event_it_diverged_at_when_it_does(
    cause: str, error: str, event_id: int | None
) -> None:
    assert diverged_event(cause, error) == event_id


@pytest.mark.parametrize(
    ("found", "reset_to"),
    [
        # A task that fails on its own: it runs again, every completed task is kept.
        (FailureFound(failed_event_id=30, last_good_event_id=24), 30),
        # History diverges after the last good task: the same.
        (FailureFound(failed_event_id=30, last_good_event_id=24, diverged_event_id=27), 30),
        # History diverges before it: back to the last task completed before the divergence.
        (
            FailureFound(
                failed_event_id=80,
                last_good_event_id=74,
                diverged_event_id=40,
                before_divergence_event_id=36,
            ),
            36,
        ),
        # No task ever completed (or none before the divergence): nowhere to go back to.
        (FailureFound(failed_event_id=4), None),
        (FailureFound(failed_event_id=80, last_good_event_id=74, diverged_event_id=3), None),
    ],
)
def test_where_a_wedged_run_is_reset_to(found: FailureFound, reset_to: int | None) -> None:
    assert found.reset_event_id() == reset_to
