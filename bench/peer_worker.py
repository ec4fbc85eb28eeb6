"""`python -m bench.peer_worker`: the peer's worker (`bench.peer`) as its own OS process, so its
CPU and memory can be measured alone. Configured from the environment like `agentloop.worker`
(address, namespace, task queue, example service), plus `BENCH_PEER_OPENAI_BASE_URL`: the
scripted provider. Runs until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal

from agents import set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from agentloop.runtime.config import Settings
from bench.peer import STEP_TIMEOUT, BenchPeerAgent, WeatherReads
from bench.processes import PEER_BASE_URL_VARIABLE, PEER_READY


async def serve(settings: Settings, base_url: str) -> None:
    # The SDK would otherwise export traces to OpenAI: unreachable here, and not what is
    # compared. agentloop's audit records stay on, so this favours the peer, if anything.
    set_tracing_disabled(True)
    model_client = AsyncOpenAI(base_url=base_url, api_key="bench")
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=STEP_TIMEOUT),
        model_provider=OpenAIProvider(openai_client=model_client, use_responses=False),
    )
    client = await Client.connect(
        settings.temporal_address, namespace=settings.temporal_namespace, plugins=[plugin]
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    reads = WeatherReads(settings.example_service_url)
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[BenchPeerAgent],
        activities=[reads.get_weather],
    )
    try:
        async with worker:
            print(f"{PEER_READY} {settings.task_queue!r}", flush=True)
            await stop.wait()
    finally:
        await reads.close()


def main() -> None:
    asyncio.run(serve(Settings.load(), os.environ[PEER_BASE_URL_VARIABLE]))


if __name__ == "__main__":
    main()
