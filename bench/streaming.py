"""[13] Streaming on against off (feature run-stream), in one run: a 20-turn run with 1 KB of
the model's text per turn on a zero-latency scripted model, with its stream off, on with
nobody watching, and on with one subscriber (`agentloop.watch`): wall time and this process's
CPU per turn (the worker, the scripted model and the subscriber run here; the Temporal server
does not), and history bytes per run. Then delivery: the scripted model streaming a turn's
text over about a second, the time from its sending a piece of text to the subscriber
receiving it (p50, p99). Then many runs at once, each with its subscriber: failed workflow
tasks, and items lost or seen twice (offsets contiguous per subscriber)."""

from __future__ import annotations

import asyncio
import re
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

import agentloop
from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult
from agentloop.run_events import RunEvent
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.server import ScriptedProvider
from bench.report import Figure, Section, ratio
from bench.scripts import FIRST_DAY

TURNS = 20
TEXT_CHARS = 1_000
DELIVERY_SECONDS = 1.0
"""How long the scripted model takes to stream the delivery run's text."""
RUN_TIMEOUT_SECONDS = 300.0
WORD = re.compile(r"w\d+t\d+")


def text_of(turn: int) -> str:
    """About `TEXT_CHARS` of text, every word unique to its turn (`w17t3`), so a word received
    can be matched to when the model sent it."""
    words, text = 0, ""
    while len(text) < TEXT_CHARS:
        text += f"w{words}t{turn} "
        words += 1
    return text


def script(name: str, turns: int, event_delay_ms: int = 0) -> Script:
    calls = [
        ScriptTurn(
            text=text_of(turn),
            tool_calls=[
                ScriptedToolCall(
                    id=f"call_{turn:04d}",
                    name="get_weather",
                    arguments={
                        "city": "Shanghai",
                        "date": (FIRST_DAY + timedelta(turn)).isoformat(),
                    },
                )
            ],
            event_delay_ms=event_delay_ms,
        )
        for turn in range(turns - 1)
    ]
    last = ScriptTurn(text=text_of(turns - 1), event_delay_ms=event_delay_ms)
    return Script(name=name, turns=[*calls, last])


def run_input(played: Script, publish: bool) -> AgentRunInput:
    calls = len(played.turns)
    return AgentRunInput.model_validate(
        {
            "task": "Collect the daily weather, one day per step, and say what you see.",
            "provider": "openai-chat",
            "model": played.name,
            "tools": ["get_weather"],
            "publish_events": publish,
            "limits": {
                "max_model_calls": calls,
                "max_tool_calls": calls,
                "deadline_seconds": None,
            },
        }
    )


class Played:
    """One run: its result, wall and CPU seconds, history bytes, what its subscriber saw."""

    def __init__(self) -> None:
        self.result: AgentRunResult | None = None
        self.wall = 0.0
        self.cpu = 0.0
        self.history_bytes = 0
        self.failed_tasks = 0
        self.events: list[tuple[float, RunEvent]] = []


async def play(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    played: Script,
    *,
    publish: bool,
    subscribe: bool,
) -> Played:
    provider.register(played)
    out = Played()
    cpu, wall = time.process_time(), time.perf_counter()
    handle = await client.start_workflow(
        WORKFLOW_NAME,
        run_input(played, publish),
        id=played.name,
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
    )

    async def follow() -> None:
        async for event in agentloop.watch(client, played.name):
            out.events.append((time.monotonic(), event))

    following = asyncio.ensure_future(follow()) if subscribe else None
    out.result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT_SECONDS)
    if following is not None:
        await asyncio.wait_for(following, 60)
    out.wall, out.cpu = time.perf_counter() - wall, time.process_time() - cpu
    history = await handle.fetch_history()
    out.history_bytes = sum(event.ByteSize() for event in history.events)
    failed = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    out.failed_tasks = sum(1 for event in history.events if event.event_type == failed)
    return out


def contiguous(events: list[tuple[float, RunEvent]]) -> bool:
    offsets = [event.offset for _, event in events]
    return offsets == list(range(len(offsets)))


async def delivery(
    client: Client, settings: Settings, provider: ScriptedProvider, turns: int
) -> list[float]:
    """Seconds from the scripted model sending each word of text to the subscriber
    receiving it."""
    sent: dict[str, float] = {}

    def frame_sent(frame: bytes) -> None:
        now = time.monotonic()
        for word in WORD.findall(frame.decode("utf-8", "replace")):
            sent.setdefault(word, now)

    pieces = TEXT_CHARS // 8  # the scripted model's text comes in 8-character pieces
    delay_ms = int(DELIVERY_SECONDS * 1000 / pieces)
    played = script(f"bench-stream-delivery-{uuid.uuid4().hex[:8]}", turns, delay_ms)
    provider.frame_sent = frame_sent
    try:
        run = await play(client, settings, provider, played, publish=True, subscribe=True)
    finally:
        provider.frame_sent = None
    latencies = []
    for received, event in run.events:
        if event.kind == "text":
            latencies += [received - sent[w] for w in WORD.findall(event.delta or "") if w in sent]
    return latencies


async def measure(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    turns: int = TURNS,
    concurrent: int = 50,
) -> Section:
    section = Section(
        "streaming",
        f"Streaming on against off: {turns}-turn runs, {TEXT_CHARS:,} characters of text a turn",
        "the same run with its stream off (publish_events: false), measured in this run",
    )

    def name(kind: str) -> str:
        return f"bench-stream-{kind}-{uuid.uuid4().hex[:8]}"

    async def run(kind: str, publish: bool, subscribe: bool) -> Played:
        return await play(
            client,
            settings,
            provider,
            script(name(kind), turns),
            publish=publish,
            subscribe=subscribe,
        )

    await run("warmup", True, True)
    off = await run("off", False, False)
    quiet = await run("unwatched", True, False)
    watched = await run("watched", True, True)
    for label, played in (("on, nobody watching", quiet), ("on, one subscriber", watched)):
        section.add(
            Figure(
                f"wall ms per turn, {label}",
                1000 * played.wall / turns,
                1000 * off.wall / turns,
                ratio(played.wall, off.wall),
                "goal <= 1.5x watched, <= 1.3x unwatched",
            ),
            Figure(
                f"CPU ms per turn (worker, model, subscriber), {label}",
                1000 * played.cpu / turns,
                1000 * off.cpu / turns,
                ratio(played.cpu, off.cpu),
            ),
            Figure(
                f"history bytes per run, {label}",
                played.history_bytes,
                off.history_bytes,
                ratio(played.history_bytes, off.history_bytes),
                "goal <= 2.5x",
            ),
        )
    texts = [event for _, event in watched.events if event.kind == "text"]
    section.add(
        Figure(
            "text items of the watched run (one per batch, never per chunk)",
            len(texts),
            None,
            None,
            f"{turns} turns; all offsets contiguous: {contiguous(watched.events)}",
        )
    )
    latencies = sorted(await delivery(client, settings, provider, min(turns, 3)))
    if latencies:
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        section.add(
            Figure(
                "delivery p50 ms (model sends a word -> subscriber has it)",
                1000 * statistics.median(latencies),
                None,
                None,
                "goal <= 400 ms",
            ),
            Figure("delivery p99 ms", 1000 * p99, None, None, f"{len(latencies)} words"),
        )
    many = await _many(client, settings, provider, concurrent, min(turns, 5), name)
    section.add(*many)
    return section


async def _many(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    runs: int,
    turns: int,
    name: Callable[[str], str],
) -> list[Figure]:
    plays: list[Awaitable[Played]] = [
        play(client, settings, provider, script(name("many"), turns), publish=True, subscribe=True)
        for _ in range(runs)
    ]
    done: list[Any] = await asyncio.gather(*plays, return_exceptions=True)
    finished = [p for p in done if isinstance(p, Played)]
    failed_tasks = sum(p.failed_tasks for p in finished)
    gaps = sum(1 for p in finished if not contiguous(p.events))
    completed = sum(1 for p in finished if p.result and p.result.status == "completed")
    return [
        Figure(
            f"{runs} concurrent watched runs: completed", completed, runs, ratio(completed, runs)
        ),
        Figure("  failed workflow tasks", failed_tasks, 0, None, "goal 0"),
        Figure("  subscribers with a lost or repeated item", gaps, 0, None, "goal 0"),
    ]
