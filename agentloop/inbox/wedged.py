"""What a run's page says of a run whose workflow task keeps failing (a wedged run): such a
run answers no `status` query ("Workflow Task in failed state"), so its page shows the error
its worker reports, and what brings it back, instead of a status it cannot have."""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionDescription

from agentloop.operations.failing_tasks import failing_attempt, failing_task


async def wedged_text(
    client: Client, workflow_id: str, description: WorkflowExecutionDescription
) -> str | None:
    """One paragraph for the run's page when its workflow task keeps failing; None when it
    does not (or the run ended)."""
    if not failing_attempt(description):
        return None
    failing = await failing_task(client, workflow_id, description=description)
    if failing is None:
        return None
    remedy = (
        f"an operator fixes the workers, or resets the run: agentloop reset {workflow_id}"
        if failing.reset_event_id is not None
        else "an operator fixes the workers (no task of this run completed: nothing to reset to)"
    )
    return f"Wedged: {failing.describe()}. It makes no progress until {remedy}.\n{failing.error}"
