"""`python -m bench.floor_worker`: the Temporal floor's worker (`bench.floor`) as its own OS
process, configured like `agentloop.worker` from the environment (address, namespace, task
queue, codec keys, and the workflow sandbox: so the floor's workflow runs as AgentRun does), so
its memory can be measured alone. Runs until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal

from temporalio.worker import Worker

from agentloop.client import connect
from agentloop.runtime.config import Settings
from agentloop.worker import workflow_runner
from bench.floor import BenchFloor, noop
from bench.processes import FLOOR_READY


async def serve(settings: Settings) -> None:
    client = await connect(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[BenchFloor],
        activities=[noop],
        workflow_runner=workflow_runner(settings.workflow_sandbox),
    )
    async with worker:
        print(f"{FLOOR_READY} {settings.task_queue!r}", flush=True)
        await stop.wait()


def main() -> None:
    asyncio.run(serve(Settings.load()))


if __name__ == "__main__":
    main()
