"""`load_previous_run`: what a continuing run needs from the run it continues."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from agentloop.contract import AgentRunResult, PreviousRun


class RunActivities:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name="load_previous_run")
    async def load_previous_run(self, workflow_id: str) -> PreviousRun:
        handle = self._client.get_workflow_handle(workflow_id, result_type=AgentRunResult)
        try:
            description = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise _invalid(f"no run {workflow_id!r}") from None
            raise
        if description.status == WorkflowExecutionStatus.RUNNING:
            raise _invalid(f"run {workflow_id!r} has not finished")
        try:
            result = await handle.result()
        except WorkflowFailureError as exc:
            raise _invalid(f"run {workflow_id!r} failed without a result: {exc.cause}") from None
        return PreviousRun(
            workflow_id=workflow_id,
            head=result.transcript_head,
            status=result.status,
            stop_reason=result.stop_reason,
            unsent=result.unsent,
        )


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type="InvalidInput", non_retryable=True)
