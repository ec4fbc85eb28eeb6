"""The Temporal floor: a trivial workflow running no-op activities, the baseline agentloop's
throughput is compared with. Workflow code: no side effects at import (sandbox re-import)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RawValue

FLOOR_WORKFLOW = "BenchFloor"


@activity.defn(dynamic=True)
async def noop(args: Sequence[RawValue]) -> None:
    """Answers any activity type at once: `call_model`, `run_tool`, ... cost nothing here."""


@workflow.defn(name=FLOOR_WORKFLOW)
class BenchFloor:
    @workflow.run
    async def run(self, activity_types: list[str]) -> int:
        """Run the named activities one after the other, as AgentRun does; the count run."""
        for name in activity_types:
            await workflow.execute_activity(
                name, name, start_to_close_timeout=timedelta(seconds=30)
            )
        return len(activity_types)
