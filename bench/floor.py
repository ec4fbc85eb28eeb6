"""The Temporal floor: a trivial workflow running no-op activities, the baseline agentloop's
throughput is compared with. Workflow code: no side effects at import (sandbox re-import)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RawValue

FLOOR_WORKFLOW = "BenchFloor"
STEP_TIMEOUT = timedelta(seconds=30)


@dataclass(frozen=True)
class FloorStep:
    """One activity AgentRun scheduled, and whether it ran as a local activity."""

    activity: str
    local: bool = False

    def __str__(self) -> str:
        return f"{self.activity} (local)" if self.local else self.activity


@activity.defn(dynamic=True)
async def noop(args: Sequence[RawValue]) -> None:
    """Answers any activity type at once: `call_model`, `run_tool`, ... cost nothing here."""


@workflow.defn(name=FLOOR_WORKFLOW)
class BenchFloor:
    @workflow.run
    async def run(self, steps: list[FloorStep]) -> int:
        """Run the steps one after the other, as AgentRun does; the count run."""
        for step in steps:
            if step.local:
                await workflow.execute_local_activity(
                    step.activity, step.activity, start_to_close_timeout=STEP_TIMEOUT
                )
            else:
                await workflow.execute_activity(
                    step.activity, step.activity, start_to_close_timeout=STEP_TIMEOUT
                )
        return len(steps)
