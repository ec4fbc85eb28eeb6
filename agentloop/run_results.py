"""A run's result, however its workflow ended: a run that ends `failed` fails its workflow
(so Temporal shows it failed) with its result in the failure's details, and every agentloop
client reads it back from there (`read_result`), as from a completed workflow."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowFailureError, WorkflowHandle

from agentloop.contract import AgentRunResult
from agentloop.run_failure import result_in


async def read_result(
    handle: WorkflowHandle[Any, AgentRunResult], *, follow_runs: bool = True
) -> AgentRunResult:
    """The run's result. Raises `WorkflowFailureError` for a workflow that failed without
    one (bad input, terminated, timed out)."""
    try:
        return await handle.result(follow_runs=follow_runs)
    except WorkflowFailureError as exc:
        result = result_in(exc.cause)
        if result is None:
            raise
        return result
