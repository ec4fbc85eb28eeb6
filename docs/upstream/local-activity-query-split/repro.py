"""Reproduces a replay divergence with the Temporal Python SDK alone (no agentloop).

A workflow answers each input (a signal or an update) with a short local activity, started in
the task that brought the input; when the activity's result comes back and no further input
has reached the workflow yet, it upserts its memo (a command). So the order in which the
workflow sees "the activity's result" and "the next input" decides whether that command is
issued. The driver starts the workflow on a local dev server (the `temporal` CLI), reads it
with queries every few milliseconds, sends it `--inputs` inputs tens of milliseconds apart,
fetches the history and replays it with `temporalio.worker.Replayer`. It repeats that
`--runs` times, prints how many histories did not replay, and keeps the first of each kind
(`--keep-diverged`, `--keep-replayed`).

    python repro.py --temporal /path/to/temporal --runs 40 --input update

No query, no divergence: `--no-queries` runs the same tries without them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateStage
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

TASK_QUEUE = "la-query-split"


@activity.defn
async def short_work(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@workflow.defn
class LocalActivityPerInput:
    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.handled = 0

    @workflow.run
    async def run(self, rounds: int, activity_seconds: float) -> list[str]:
        while self.handled < rounds:
            await workflow.wait_condition(lambda: len(self.inputs) > self.handled)
            # Each input is worked on by a short local activity, started in the task that
            # brought the input.
            await workflow.execute_local_activity(
                short_work, activity_seconds, start_to_close_timeout=timedelta(seconds=10)
            )
            self.handled += 1
            if len(self.inputs) == self.handled:
                # The branch that depends on the order: taken only when no other input had
                # reached the workflow by the time the activity's result did.
                workflow.upsert_memo({"idle_after": self.handled})
        return self.inputs

    @workflow.signal
    def add(self, text: str) -> None:
        self.inputs.append(text)

    @workflow.update
    def add_by_update(self, text: str) -> int:
        self.inputs.append(text)
        return len(self.inputs)

    @workflow.query
    def state(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "handled": self.handled}


@dataclass
class Try:
    workflow_id: str
    history_json: str
    failure: str | None


async def hammer(
    handle: WorkflowHandle[Any, Any], stop: asyncio.Event, gap: tuple[float, float]
) -> int:
    """Queries the workflow every `gap` seconds (uniform) until `stop`; how many answered."""
    answered = 0
    while not stop.is_set():
        try:
            await handle.query(LocalActivityPerInput.state)
            answered += 1
        except Exception:  # a query racing the workflow's end, or a server hiccup
            pass
        await asyncio.sleep(random.uniform(*gap))
    return answered


async def send(handle: WorkflowHandle[Any, Any], how: str, text: str) -> None:
    if how == "signal":
        await handle.signal(LocalActivityPerInput.add, text)
    else:
        await handle.start_update(
            LocalActivityPerInput.add_by_update,
            text,
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        )


async def one_try(client: Client, args: argparse.Namespace, replayer: Replayer) -> Try:
    activity_seconds = random.uniform(args.activity_min, args.activity_max)
    handle = await client.start_workflow(
        LocalActivityPerInput.run,
        args=[args.inputs, activity_seconds],
        id=f"la-split-{uuid.uuid4()}",
        task_queue=TASK_QUEUE,
    )
    await handle.query(LocalActivityPerInput.state)  # its first task is done
    stop = asyncio.Event()
    queries = (
        asyncio.create_task(hammer(handle, stop, (args.query_min, args.query_max)))
        if args.queries
        else None
    )
    sending = []
    for number in range(args.inputs):
        if number:
            await asyncio.sleep(random.uniform(0.0, 2 * args.input_gap))
        # Not awaited one by one: an update's caller waits for its acceptance, which would
        # space the inputs by a workflow task each.
        sending.append(asyncio.create_task(send(handle, args.input, f"input {number + 1}")))
    await asyncio.gather(*sending)
    await handle.result()
    stop.set()
    if queries is not None:
        await queries
    history = await handle.fetch_history()
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    failure = str(replayed.replay_failure) if replayed.replay_failure else None
    return Try(handle.id, history.to_json(), failure)


async def main(args: argparse.Namespace) -> int:
    extra = ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000"]
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=args.temporal, dev_server_extra_args=extra
    ) as env:
        replayer = Replayer(workflows=[LocalActivityPerInput])
        async with Worker(
            env.client,
            task_queue=TASK_QUEUE,
            workflows=[LocalActivityPerInput],
            activities=[short_work],
        ):
            diverged = 0
            kept: dict[str, bool] = {"diverged": False, "replayed": False}
            started = time.monotonic()
            for number in range(1, args.runs + 1):
                found = await one_try(env.client, args, replayer)
                kind = "diverged" if found.failure else "replayed"
                diverged += found.failure is not None
                print(f"{number:3} {found.workflow_id} {kind} {found.failure or ''}", flush=True)
                target = args.keep_diverged if found.failure else args.keep_replayed
                if target is not None and not kept[kind]:
                    target.write_text(found.history_json + "\n", encoding="utf-8")
                    kept[kind] = True
            took = time.monotonic() - started
    queried = "with queries" if args.queries else "without queries"
    print(
        json.dumps(
            {
                "runs": args.runs,
                "diverged": diverged,
                "input": args.input,
                "queries": queried,
                "seconds": round(took, 1),
            }
        )
    )
    return 1 if diverged else 0


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temporal", default=shutil.which("temporal"), help="the temporal CLI")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--input", choices=["signal", "update"], default="update")
    parser.add_argument("--no-queries", dest="queries", action="store_false")
    parser.add_argument("--inputs", type=int, default=6, help="inputs sent to each workflow")
    parser.add_argument("--activity-min", type=float, default=0.0)
    parser.add_argument("--activity-max", type=float, default=0.005)
    parser.add_argument("--query-min", type=float, default=0.005)
    parser.add_argument("--query-max", type=float, default=0.02)
    parser.add_argument(
        "--input-gap", type=float, default=0.02, help="mean seconds between two inputs"
    )
    parser.add_argument("--keep-diverged", type=Path, metavar="FILE")
    parser.add_argument("--keep-replayed", type=Path, metavar="FILE")
    args = parser.parse_args()
    if not args.temporal:
        parser.error("no temporal CLI on PATH: give --temporal")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
