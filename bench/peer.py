"""The peer issue #7 names: the same runs written with the OpenAI Agents SDK on Temporal's own
integration for it (`temporalio.openai_agents`), as its documentation shows them: an `Agent`
whose tool is an activity (`activity_as_tool`), run by `Runner.run` inside a workflow, the
model called by the plugin's activity through the official `openai` client (Chat Completions,
the protocol the agentloop runs it is compared with use). It talks to the same scripted
provider and example service, in the same benchmark run, so its figures are a baseline
measured here, not quoted from elsewhere.

Workflow code: no side effects at import (the workflow runs in Temporal's sandbox, the SDK's
default and the integration's)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import aiohttp
    from agents import Agent, Runner
    from temporalio.openai_agents.workflow import activity_as_tool

PEER_WORKFLOW = "BenchPeerAgent"
STEP_TIMEOUT = timedelta(seconds=30)
RUN_TIMEOUT = timedelta(minutes=5)
"""A peer run that fails a workflow task (retried until then) fails the benchmark instead of
hanging it."""


@dataclass(frozen=True)
class PeerTask:
    prompt: str
    model: str
    """The scripted provider's script to play."""
    max_turns: int
    instructions: str = ""


class WeatherReads:
    """The peer's `get_weather` tool: the example service's weather read over HTTP, as
    agentloop's own `get_weather` makes it."""

    def __init__(self, base_url: str) -> None:
        self._base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    @activity.defn(name="get_weather")
    async def get_weather(self, city: str, date: str) -> str:
        """Weather forecast for a city on a date (date: ISO YYYY-MM-DD)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = f"{self._base_url}/travel/weather/{quote(city, safe='')}"
        async with self._session.get(url, params={"date": date}) as response:
            response.raise_for_status()
            # The service's JSON as it came: the SDK would send a returned dict to the model
            # as its Python repr, which is not JSON.
            return await response.text()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


@workflow.defn(name=PEER_WORKFLOW)
class BenchPeerAgent:
    @workflow.run
    async def run(self, task: PeerTask) -> str:
        agent: Agent[None] = Agent(
            name="bench",
            instructions=task.instructions or None,
            model=task.model,
            tools=[activity_as_tool(WeatherReads.get_weather, start_to_close_timeout=STEP_TIMEOUT)],
        )
        result = await Runner.run(agent, task.prompt, max_turns=task.max_turns)
        return str(result.final_output)
