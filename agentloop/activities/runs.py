"""`load_previous_run`: what a continuing run needs from the run it continues."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from agentloop.activity_io import LOAD_PREVIOUS_RUN
from agentloop.contract import AgentRunResult, PreviousRun, Principal
from agentloop.run_client import RunClient
from agentloop.run_results import read_result


class RunActivities:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=LOAD_PREVIOUS_RUN)
    async def load_previous_run(self, workflow_id: str) -> PreviousRun:
        return await self.read_run(await self.finished_run(workflow_id))

    async def finished_run(self, workflow_id: str) -> WorkflowHandle[Any, AgentRunResult]:
        """The run now under `workflow_id`, pinned by its run id: whatever starts under that id
        later, its result and its start event are read from this one run (the tenant check
        and the transcript must be of the same run)."""
        handle = self._client.get_workflow_handle(workflow_id, result_type=AgentRunResult)
        try:
            description = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise _invalid(f"no run {workflow_id!r}") from None
            raise
        if description.status == WorkflowExecutionStatus.RUNNING:
            raise _invalid(f"run {workflow_id!r} has not finished")
        return self._client.get_workflow_handle(
            workflow_id, run_id=description.run_id, result_type=AgentRunResult
        )

    async def read_run(self, handle: WorkflowHandle[Any, AgentRunResult]) -> PreviousRun:
        """What a continuation takes from the finished run `handle` pins."""
        workflow_id = handle.id
        try:
            # Not followed: a run started later under the id is not a continuation of it.
            result = await read_result(handle, follow_runs=False)
        except WorkflowFailureError as exc:
            raise _invalid(f"run {workflow_id!r} failed without a result: {exc.cause}") from None
        except ValidationError:
            raise _invalid(
                f"{workflow_id!r} is not an agentloop run: its result is not an AgentRunResult"
            ) from None
        return PreviousRun(
            workflow_id=workflow_id,
            head=result.transcript_head,
            status=result.status,
            stop_reason=result.stop_reason,
            unsent=result.unsent,
            principal=await self._principal(handle),
            rejected_actions=result.rejected_actions,
            unresolved_writes=result.unresolved_writes,
            artifacts=result.artifacts,
            usage=result.chain_usage or result.usage,
        )

    async def _principal(self, handle: WorkflowHandle[Any, AgentRunResult]) -> Principal | None:
        """Who the run ran for, as its chain was started (`RunClient.start_input`, through
        continue-as-new). None when its input does not say."""
        run = RunClient(self._client, handle.id, run_id=handle.run_id)
        started = await run.start_input()
        return started.principal if started is not None else None


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type="InvalidInput", non_retryable=True)
