"""Runs whose workflow task keeps failing ("wedged"), and taking one back to its last good task.

A workflow task fails when the worker cannot run the workflow's code over its history: a
deploy that changed what the code does (a nondeterminism error), a bug that raises, a payload
over the server's limit. Temporal then retries the task for ever: the run stays Running, makes
no progress, and answers no query (it fails "Workflow Task in failed state", or waits until its
timeout). Only the first failure is written to history (the retries are not); the pending
task's attempt counts them.

`failing_task` tells such a run, with the error its worker reported, the last workflow task
completed before the failures began and where a reset should go; `reset_run` resets the run
(Temporal's ResetWorkflowExecution: a new run of the same workflow id replays history up to the
chosen task on today's workers, runs that task again, and the signals and updates received
after it are applied again).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryReverseRequest,
    ResetWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.exceptions import FailureError
from temporalio.service import RPCError

ERROR_CHARS = 2_000
"""How much of the worker's error is kept (a nondeterminism error names the event and the
command; a stack trace is cut)."""
HISTORY_PAGE = 200
CHECK_SECONDS = 5.0
"""How long `failing_tasks` gives one run before leaving it unchecked."""
CONCURRENT_CHECKS = 8

_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
_TIMED_OUT = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED


class FailingTask(BaseModel):
    """A running run whose workflow task keeps failing: it makes no progress and answers no
    query until its workers are fixed, or it is reset (`agentloop reset`)."""

    attempt: int
    """The pending task's attempt: it has failed `attempt - 1` times in a row."""
    cause: str
    """Temporal's cause of the first failure (`NON_DETERMINISTIC_ERROR`,
    `WORKFLOW_WORKER_UNHANDLED_FAILURE`, `PAYLOADS_TOO_LARGE`, ...), or `TIMED_OUT` for a
    task no worker finished in time."""
    error: str
    """What the worker reported (bounded)."""
    failed_event_id: int | None
    """The first failure's event in history (None: not found in history)."""
    last_good_event_id: int | None
    """The last WorkflowTaskCompleted before that failure (None: no task of this run ever
    completed)."""
    diverged_event_id: int | None = None
    """For a nondeterminism error, the event of history today's code disagrees with."""
    reset_event_id: int | None
    """Where `reset_run` takes the run by default (None: nowhere, no task ever completed).
    Temporal runs the workflow task that ended at this event again, in a new run, keeping the
    history before it and applying the signals and updates after it again. Normally the
    first failing task's own event: every completed task is kept and every input stays in
    the order it came. When history diverges at or before the last good task (a
    nondeterminism error naming an earlier event), the last WorkflowTaskCompleted before
    that event: the history from there on is what today's code cannot replay."""
    failing_since: datetime | None
    """When the first failing attempt was scheduled."""

    def describe(self) -> str:
        """One line for a person: how often, why, and the error's first line."""
        first_line = self.error.splitlines()[0] if self.error else ""
        return f"workflow task failing (attempt {self.attempt}, {self.cause}): {first_line}"


class ResetDone(BaseModel):
    """`agentloop reset`: the run reset, and where its new run starts from."""

    workflow_id: str
    old_run_id: str
    new_run_id: str
    reset_event_id: int
    """The event that ended the workflow task the new run runs again (see
    `FailingTask.reset_event_id`, or `--to`)."""
    failing: FailingTask | None
    """What was failing, when the run was wedged."""


class NothingToReset(Exception):
    """A reset that was refused before asking the server, and why (one sentence)."""


def failing_attempt(description: WorkflowExecutionDescription) -> int:
    """The pending workflow task's attempt when the run is running and that task has already
    failed (2 or more); 0 otherwise."""
    raw = description.raw_description
    if description.status != WorkflowExecutionStatus.RUNNING:
        return 0
    if not raw.HasField("pending_workflow_task"):
        return 0
    attempt = raw.pending_workflow_task.attempt
    return attempt if attempt > 1 else 0


async def failing_task(
    client: Client,
    workflow_id: str,
    run_id: str | None = None,
    *,
    description: WorkflowExecutionDescription | None = None,
) -> FailingTask | None:
    """The run's failing workflow task, or None when its task is not failing (or the run
    ended). `description`: the run's, when the caller already has it (saves a call). Raises
    RPCError (NOT_FOUND: no such run)."""
    if description is None:
        description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    attempt = failing_attempt(description)
    if not attempt:
        return None
    pending = description.raw_description.pending_workflow_task
    found = await read_failure(client, workflow_id, description.run_id)
    return FailingTask(
        attempt=attempt,
        cause=found.cause,
        error=found.error[:ERROR_CHARS],
        failed_event_id=found.failed_event_id,
        last_good_event_id=found.last_good_event_id,
        diverged_event_id=found.diverged_event_id,
        reset_event_id=found.reset_event_id(),
        failing_since=pending.original_scheduled_time.ToDatetime(tzinfo=UTC)
        if pending.HasField("original_scheduled_time")
        else None,
    )


@dataclass
class FailureFound:
    """What the end of a wedged run's history says (read backwards by `read_failure`)."""

    cause: str = "UNKNOWN"
    error: str = ""
    failed_event_id: int | None = None
    last_good_event_id: int | None = None
    diverged_event_id: int | None = None
    before_divergence_event_id: int | None = None

    def reset_event_id(self) -> int | None:
        if self.last_good_event_id is None:
            return None
        if self.diverged_event_id is not None and self.diverged_event_id <= self.last_good_event_id:
            return self.before_divergence_event_id
        return self.failed_event_id

    def complete(self) -> bool:
        """Whether earlier events can tell nothing more."""
        if self.failed_event_id is None or self.last_good_event_id is None:
            return False
        diverged = self.diverged_event_id
        before_last_good = diverged is not None and diverged <= self.last_good_event_id
        return not before_last_good or self.before_divergence_event_id is not None


DIVERGED_AT = re.compile(r"HistoryEvent\(id: (\d+)")
"""How sdk-core's nondeterminism errors name the event they disagree with (not all do: "Missing
associated machine for LocalActivity(1)" names none)."""


def diverged_event(cause: str, error: str) -> int | None:
    """The event a nondeterminism error says today's code disagrees with, when it says."""
    named = DIVERGED_AT.search(error)
    return int(named.group(1)) if cause == "NON_DETERMINISTIC_ERROR" and named else None


async def read_failure(client: Client, workflow_id: str, run_id: str) -> FailureFound:
    """The newest failed (or timed out) workflow task of the run, the last task completed
    before it, and for a nondeterminism error naming an earlier event the last task completed
    before that one; read from the end of history backwards (a wedged run's failure is near
    its end: only signals and updates can follow it)."""
    found = FailureFound()
    async for event in history_backwards(client, workflow_id, run_id):
        if found.failed_event_id is None:
            if event.event_type in (_FAILED, _TIMED_OUT):
                found.failed_event_id = event.event_id
                found.cause, found.error = await failure_of(client, event)
                found.diverged_event_id = diverged_event(found.cause, found.error)
        elif event.event_type == _COMPLETED:
            if found.last_good_event_id is None:
                found.last_good_event_id = event.event_id
            diverged = found.diverged_event_id
            if diverged is not None and event.event_id < diverged:
                found.before_divergence_event_id = event.event_id
        if found.complete():
            break
    return found


async def history_backwards(
    client: Client, workflow_id: str, run_id: str
) -> AsyncIterator[HistoryEvent]:
    token = b""
    while True:
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                maximum_page_size=HISTORY_PAGE,
                next_page_token=token,
            )
        )
        for event in page.history.events:
            yield event
        token = page.next_page_token
        if not token:
            return


async def failing_tasks(
    client: Client, runs: Iterable[tuple[str, str]], *, seconds: float = CHECK_SECONDS
) -> dict[tuple[str, str], FailingTask | None]:
    """`failing_task` for each `(workflow_id, run_id)`, `CONCURRENT_CHECKS` at a time, each
    given `seconds`. A run missing from the answer could not be checked in time (or the
    server refused); None: checked, not failing."""
    limit = asyncio.Semaphore(CONCURRENT_CHECKS)
    found: dict[tuple[str, str], FailingTask | None] = {}

    async def check(run: tuple[str, str]) -> None:
        async with limit:
            # Left out when it fails or takes too long: the caller says it was not checked.
            with contextlib.suppress(TimeoutError, RPCError):
                found[run] = await asyncio.wait_for(failing_task(client, *run), seconds)

    await asyncio.gather(*(check(run) for run in runs))
    return found


async def failure_of(client: Client, event: HistoryEvent) -> tuple[str, str]:
    """The cause and the worker's message of a failed (or timed out) workflow task."""
    if event.event_type == _TIMED_OUT:
        timeout = event.workflow_task_timed_out_event_attributes.timeout_type
        kind = TimeoutType.Name(timeout).removeprefix("TIMEOUT_TYPE_")
        return "TIMED_OUT", f"the workflow task timed out ({kind})"
    attributes = event.workflow_task_failed_event_attributes
    cause = WorkflowTaskFailedCause.Name(attributes.cause).removeprefix(
        "WORKFLOW_TASK_FAILED_CAUSE_"
    )
    return cause, await message_of(client, attributes.failure)


async def message_of(client: Client, failure: Failure) -> str:
    """The failure's message and stack trace, decoded with the client's converter (with
    `AGENTLOOP_CODEC_KEYS` set, the worker's message travels encrypted)."""
    copy = Failure()
    copy.CopyFrom(failure)
    try:
        decoded = await client.data_converter.decode_failure(copy)
    except Exception:  # an undecodable failure still says what it can
        decoded = None
    if isinstance(decoded, FailureError) and decoded.failure is not None:
        failure = decoded.failure
    if failure.stack_trace:
        return f"{failure.message}\n{failure.stack_trace}"
    return failure.message


async def reset_run(
    client: Client, workflow_id: str, *, to_event_id: int | None = None, reason: str
) -> ResetDone:
    """Reset the run's current execution to `to_event_id` (a WorkflowTaskCompleted event),
    by default to the last task completed before its task began to fail. Raises
    NothingToReset when no event is given and the run is not wedged (or has no good task to
    go back to); RPCError when the server refuses (no such run or event)."""
    description = await client.get_workflow_handle(workflow_id).describe()
    failing = await failing_task(client, workflow_id, description=description)
    if to_event_id is None:
        if failing is None:
            raise NothingToReset(
                f"{workflow_id}'s workflow task is not failing: nothing to reset "
                "(give --to EVENT_ID to reset it anyway)"
            )
        if failing.reset_event_id is None:
            raise NothingToReset(
                f"no workflow task of {workflow_id} completed before its history goes wrong: "
                "there is no good task to go back to (fix the workers, or terminate the run "
                "and start it again)"
            )
        to_event_id = failing.reset_event_id
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(
                workflow_id=workflow_id, run_id=description.run_id
            ),
            reason=reason,
            workflow_task_finish_event_id=to_event_id,
            request_id=str(uuid.uuid4()),
            identity=client.identity,
        )
    )
    return ResetDone(
        workflow_id=workflow_id,
        old_run_id=description.run_id,
        new_run_id=response.run_id,
        reset_event_id=to_event_id,
        failing=failing,
    )
