"""[15] Issue 42: what AgentRun's steps cost as ordinary activities against the local ones they
were before. A K-turn run reading (one `get_weather` a turn), proposing a write that needs an
approval (`send_reply`), approved, writing, is played once on agentloop's worker; the floor
workflow (`bench.floor`) then runs the steps its history scheduled twice over, alternating, on
the same dev server in the same bench run: as before issue 42's fix (the steps AgentRun ran as
local activities until then, `LOCAL_BEFORE_ISSUE_42`, local) and as after it (every step an
ordinary activity, as AgentRun schedules them now). Per-turn wall and worker CPU, medians.

Before the fix, a query answered while a local activity of a workflow task ran could split the
task, and an input arriving meanwhile made the run's history unreplayable; the price of the fix
is the figure here: an ordinary activity is a round trip through the server, a local one is not.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from agentloop.activity_io import (
    CHECK_APPROVAL,
    CHECK_RESOLUTION,
    DESCRIBE_RUN,
    FRAME_TEAM_ANSWER,
    READ_TEAM_OUTCOME,
    RUN_TOOL,
    STORE_TEXTS,
)
from agentloop.cli.dev import DevStack, DevStackPorts
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    ApprovalDecision,
    Principal,
)
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedToolCall
from agentloop.scripted_provider.server import ScriptedProvider
from bench.floor import FloorStep
from bench.processes import floor_worker
from bench.report import Figure, Section, ratio, render
from bench.scripts import long_input, weather_script
from bench.throughput import floor_runner
from bench.turns import Sample, median_cpu, median_wall, timed

LOCAL_BEFORE_ISSUE_42 = frozenset(
    {
        DESCRIBE_RUN,
        "describe_tools",
        STORE_TEXTS,
        CHECK_APPROVAL,
        CHECK_RESOLUTION,
        "frame_tool_output",
        FRAME_TEAM_ANSWER,
        READ_TEAM_OUTCOME,
    }
)
"""The activity types AgentRun ran as local activities before issue 42's fix (besides the
calls of tools declared `local=True`, `LOCAL_TOOLS_HERE`)."""
LOCAL_TOOLS_HERE = frozenset({"get_weather"})
"""The tools of this run declared `local=True`: their `run_tool` was a local activity."""
REPLY = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refund sent today."}


def approval_script(name: str, turns: int) -> Script:
    """`weather_script`'s reads, the last tool turn also proposing a reply that needs approval
    (the reply sets the task state: turns after it that leave it alone would be a stall)."""
    script = weather_script(name, turns)
    write = ScriptedToolCall(id="call_reply", name="send_reply", arguments=REPLY)
    script.turns[turns - 1].tool_calls.append(write)
    return script


def run_input(script: Script) -> AgentRunInput:
    played = long_input(script, ["get_weather", "send_reply"])
    limits = played.limits.model_copy(update={"max_tool_calls": played.limits.max_tool_calls + 1})
    principal = Principal(subject="bench", scopes=["tickets:read", "tickets:write"])
    return played.model_copy(update={"limits": limits, "principal": principal})


async def approved_run(
    client: Client, task_queue: str, workflow_id: str, played: AgentRunInput
) -> WorkflowHistory:
    """One run, its write approved as soon as it waits; its history."""
    await client.start_workflow(WORKFLOW_NAME, played, id=workflow_id, task_queue=task_queue)
    run = RunClient(client, workflow_id)
    for _ in range(1200):  # up to two minutes for the run to reach its approval wait
        view = await run.status()
        if view.pending_approvals:
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError(f"{workflow_id} never waited for approval")
    [pending] = view.pending_approvals
    decision = ApprovalDecision(
        call_id=pending.call_id, args_digest=pending.args_digest, approved=True, approver="lead"
    )
    await run.send_decision(decision)
    result = await run.result()
    if result.status != "completed":
        raise RuntimeError(f"{workflow_id} ended {result.status}: {result.stop_reason}")
    return await run.handle.fetch_history()


def steps_before_and_after(history: WorkflowHistory) -> tuple[list[FloorStep], list[FloorStep]]:
    """The activities the run scheduled, in order: local where AgentRun ran them locally before
    issue 42 (before), every one an ordinary activity (after)."""
    before: list[FloorStep] = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        name = event.activity_task_scheduled_event_attributes.activity_type.name
        summary = json.loads(event.user_metadata.summary.data or b'""')
        local_tool = name == RUN_TOOL and summary.split(" · ")[0] in LOCAL_TOOLS_HERE
        before.append(FloorStep(name, local=name in LOCAL_BEFORE_ISSUE_42 or local_tool))
    return before, [FloorStep(step.activity) for step in before]


async def measure(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    work_dir: Path,
    turns: int,
    repeats: int,
    task_queue: str,
) -> Section:
    """`repeats` runs of each floor, alternating; `task_queue`: agentloop's worker, which plays
    the run whose steps the floors take."""
    prefix = f"bench-issue42-{uuid.uuid4().hex[:8]}"
    script = approval_script(prefix, turns)
    provider.register(script)
    history = await approved_run(client, task_queue, f"{prefix}-run", run_input(script))
    before, after = steps_before_and_after(history)
    async with floor_worker(settings, work_dir, f"{prefix}-floor") as floor_process:
        queue = floor_process.task_queue
        run_before = floor_runner(client, queue, f"{prefix}-before", before)
        run_after = floor_runner(client, queue, f"{prefix}-after", after)
        await run_before(repeats)  # warm-up: ids the timed runs do not use
        await run_after(repeats)
        local: list[Sample] = []
        ordinary: list[Sample] = []
        for i in range(repeats):
            local.append(await timed(run_before, i, floor_process))
            ordinary.append(await timed(run_after, i, floor_process))
    provider.reset()
    return section(turns, before, repeats, local, ordinary)


def section(
    turns: int, before: list[FloorStep], repeats: int, local: list[Sample], ordinary: list[Sample]
) -> Section:
    model_calls = turns + 1
    made_local = sum(step.local for step in before)
    result = Section(
        key="issue_42_local_activities",
        title=(
            f"issue 42: a {turns}-turn run's steps (a get_weather read a turn, a reply approved "
            f"and sent; {len(before)} activities, {made_local} of them local before the fix) "
            f"as ordinary activities against local ones, median of {repeats}"
        ),
        baseline=(
            "before the fix, in this run on the same dev server: the floor workflow running the "
            "same steps, those AgentRun ran locally until issue 42 local; the floor worker in "
            "its own process, CPU from /proc/PID/stat (10 ms ticks)"
        ),
    )
    wall_after, wall_before = median_wall(ordinary) / model_calls, median_wall(local) / model_calls
    cpu_after = 1000 * median_cpu(ordinary) / model_calls
    cpu_before = 1000 * median_cpu(local) / model_calls
    result.add(
        Figure(
            "per-turn wall (ms), after vs before",
            1000 * wall_after,
            1000 * wall_before,
            ratio(wall_after, wall_before),
            f"floor wall / {model_calls} model calls",
        ),
        Figure(
            "per-turn worker CPU (ms), after vs before",
            cpu_after,
            cpu_before,
            ratio(cpu_after, cpu_before),
        ),
    )
    return result


async def measure_alone(turns: int, repeats: int) -> Section:
    """This section on a throw-away dev stack of its own."""
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-") as tmp:
        work = Path(tmp)
        async with DevStack(DevStackPorts.free(), state_dir=work, quiet=True) as stack:
            assert stack.client is not None and stack.scripted_provider is not None
            settings = stack.settings
            return await measure(
                stack.client,
                settings,
                stack.scripted_provider,
                work,
                turns,
                repeats,
                settings.task_queue,
            )


def main() -> None:
    """`python -m bench.local_activities [TURNS [REPEATS]]`: just this section (20 turns, 5
    repeats by default), printed."""
    given = [int(arg) for arg in sys.argv[1:3]]
    turns, repeats = [*given, 20, 5][0], [*given[1:], 5][0]
    print(render(asyncio.run(measure_alone(turns, repeats)), 15))


if __name__ == "__main__":
    main()
