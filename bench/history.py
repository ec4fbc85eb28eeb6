"""[2] History growth of a long run with ~10 KB tool outputs, against a design that sends the
whole transcript in every model call (computed from the same run's transcript)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from agentloop.activity_io import MODEL_CALLS
from agentloop.events import Event, ModelOutput, ToolResult
from agentloop.runtime.config import Settings
from agentloop.scripted_provider.server import ScriptedProvider
from agentloop.tools.contract import ToolContext
from agentloop.tools.decorator import tool
from bench.longrun import play, transcript, worker_with_tools
from bench.report import Figure, Section, ratio
from bench.scripts import long_input, report_script

REPORT_CHARS = 10_000
WINDOW = 10


class ReportArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    day: int = Field(ge=0, description="which day's report")


def report_text(day: int) -> str:
    """A deterministic report of exactly `REPORT_CHARS` characters, different every day."""
    lines = (
        f"{day:05d}.{i:04d} sensor {(day * 7919 + i * 104729) % 99991:05d} ok\n" for i in range(400)
    )
    return "".join(lines)[:REPORT_CHARS]


@tool(name="bench_daily_report", effect="read")
async def REPORT_TOOL(ctx: ToolContext[Any], args: ReportArgs) -> str:
    """The full sensor report of one day (about 10 KB of text)."""
    return report_text(args.day)


"""Default output cap (8,000 chars), as a real tool would have: each 10 KB report is kept as
an artifact and the model sees a preview of the cap's size. (Uncapped, 100 turns of 10 KB
would also pass the 1 MiB request-body limit of the scripted provider's aiohttp server.)"""


def per_turn(history: WorkflowHistory, size: Callable[[HistoryEvent], int]) -> list[int]:
    """`size` summed over the events from one model call scheduled to the next (the last:
    to the end); what comes before the first model call (start, describe_tools) is left out."""
    turns: list[int] = []
    for event in history.events:
        scheduled = event.activity_task_scheduled_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and scheduled.activity_type.name in MODEL_CALLS
        ):
            turns.append(0)
        if turns:
            turns[-1] += size(event)
    return turns


def history_bytes_per_turn(history: WorkflowHistory) -> list[int]:
    """Bytes of history per turn (`per_turn`)."""
    return per_turn(history, lambda event: event.ByteSize())


def history_events_per_turn(history: WorkflowHistory) -> list[int]:
    """Events of history per turn (`per_turn`)."""
    return per_turn(history, lambda event: 1)


def whole_transcript_per_turn(events: list[Event]) -> list[int]:
    """What each model call would carry if it took the whole transcript as its input: the
    JSON size of every event before that call's output."""
    sizes: list[int] = []
    carried = 0
    for event in events:
        if isinstance(event, ModelOutput):
            sizes.append(carried)
        carried += len(event.model_dump_json().encode())
    return sizes


def mean(values: list[int]) -> float:
    return sum(values) / len(values)


@dataclass
class Growth:
    first: float
    last: float
    total: int

    @property
    def growth(self) -> float:
        return self.last / self.first


def growth(per_turn: list[int], turns: int, total: int) -> Growth:
    window = min(WINDOW, turns // 2)
    return Growth(mean(per_turn[:window]), mean(per_turn[turns - window : turns]), total)


async def measure(
    client: Client, settings: Settings, provider: ScriptedProvider, state_dir: Path, turns: int
) -> Section:
    name = f"bench-history-{uuid.uuid4().hex[:8]}"
    script = report_script(name, turns, REPORT_TOOL.spec.name)
    provider.register(script)
    async with worker_with_tools(
        client, settings, name, state_dir / f"{name}.db", [REPORT_TOOL]
    ) as store:
        result, history = await play(
            client, name, name, long_input(script, [REPORT_TOOL.spec.name])
        )
        events = await transcript(store, result)
    violations = len(provider.violations)
    provider.reset()
    if violations:
        raise RuntimeError(f"the scripted provider saw {violations} protocol violation(s)")
    total = sum(event.ByteSize() for event in history.events)
    ours = growth(history_bytes_per_turn(history), turns, total)
    whole = whole_transcript_per_turn(events)
    theirs = growth(whole, turns, sum(whole))
    seen = [len(e.content) for e in events if isinstance(e, ToolResult)]
    return section(turns, ours, theirs, len(history.events), sum(seen) // len(seen))


def section(turns: int, ours: Growth, theirs: Growth, events: int, seen_chars: int) -> Section:
    window = min(WINDOW, turns // 2)
    result = Section(
        key="history",
        title=(
            f"history growth: {turns} turns, each one tool call returning {REPORT_CHARS:,} chars "
            f"(the model sees a {seen_chars:,}-char preview + artifact ref: default cap)"
        ),
        baseline=(
            "whole transcript as the input of every model call: the size of the transcript at "
            "each turn, from this run's own transcript (model inputs only: a lower bound)"
        ),
    )
    result.add(
        Figure(
            f"bytes/turn, turns 1-{window} (mean)",
            ours.first,
            theirs.first,
            ratio(ours.first, theirs.first),
        ),
        Figure(
            f"bytes/turn, turns {turns - window + 1}-{turns} (mean)",
            ours.last,
            theirs.last,
            ratio(ours.last, theirs.last),
        ),
        Figure(
            f"growth: last {window} / first {window}",
            ours.growth,
            theirs.growth,
            ratio(ours.growth, theirs.growth),
        ),
        Figure("total history bytes", ours.total, theirs.total, ratio(ours.total, theirs.total)),
        Figure(
            "history bytes per tool-output char, last turns",
            ours.last / REPORT_CHARS,
            theirs.last / REPORT_CHARS,
            ratio(ours.last, theirs.last),
        ),
        Figure("history events", events),
    )
    return result
