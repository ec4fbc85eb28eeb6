"""`python -m bench.profile_memory [--runs N]`: where the worker's memory per concurrent run
goes. Not part of `bench.run` (it takes a few minutes); run it when the worker's RSS growth
per concurrent run is over its target.

Each configuration is a fresh worker process (`bench.profile_worker`, i.e. `python -m
agentloop.worker` with one knob changed) on its own task queue and store:

1. a batch of N concurrent 2-turn travel runs, as `bench.throughput` plays it: RSS growth of
   the worker process per concurrent run;
2. N runs *parked*: each reads the weather, then asks the user a question (`ask_user`) and
   waits in `awaiting_input`; once all N wait, the worker's RSS is read (and, with tracemalloc
   on, a snapshot taken): the memory each live run holds in the worker's cache. (Parking on an
   activity would not do: the worker runs at most 100 activities at a time by default.)

With tracemalloc, the parked snapshot is compared with one taken before the runs started, by
source line and by file: Python allocations per parked run, and what they are.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from agentloop import search
from agentloop.cli.dev import DevStack, DevStackPorts
from agentloop.contract import WORKFLOW_NAME, AgentRunResult, UserMessage
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.server import ScriptedProvider
from bench.memory import ProcessMemory
from bench.processes import AGENTLOOP_READY, PROFILE_WORKER, child_process, worker_env
from bench.run import PROVIDER_ENV
from bench.scripts import TRAVEL_SCRIPT, travel_input, travel_script
from bench.throughput import agentloop_runner, run_batch, warm_up

PARK_SECONDS = 600.0
"""How long N runs may take to all be parked (tracemalloc slows the worker down a lot)."""
PARKED_SCRIPT = "bench-parked"
TRACE = "BENCH_TRACEMALLOC_FRAMES"

CONFIGS: list[tuple[str, dict[str, str]]] = [
    ("default (python -m agentloop.worker)", {}),
    ("max_cached_workflows=20", {"BENCH_MAX_CACHED_WORKFLOWS": "20"}),
    ("in the workflow sandbox", {"AGENTLOOP_WORKFLOW_SANDBOX": "on"}),
    (
        # What the sandbox re-imports for every run: the workflow module itself (its steps
        # and the loop are passed through already).
        "sandbox passing all of agentloop through, the workflow module too",
        {"BENCH_PASSTHROUGH_MODULES": "agentloop"},
    ),
]


def parked_script() -> Script:
    """The travel run's weather read, then a question to the user: the run waits in
    `awaiting_input` (in the worker's cache, no activity in flight) until it is answered."""
    weather, final = travel_script().turns
    ask = ScriptedToolCall(id="call_ask", name="ask_user", arguments={"question": "Anything else?"})
    return Script(name=PARKED_SCRIPT, turns=[weather, ScriptTurn(tool_calls=[ask]), final])


@dataclass
class Parked:
    runs: int
    seconds_to_park: float
    rss_before_mib: float
    rss_parked_mib: float
    status_bytes: int
    snapshot: Path | None = None

    @property
    def mib_per_run(self) -> float:
        return (self.rss_parked_mib - self.rss_before_mib) / self.runs


async def wait_for(predicate: Callable[[], Awaitable[bool]], what: str, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await predicate():
        if loop.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


def waiting_for_input(client: Client, queue: str, runs: int) -> Callable[[], Awaitable[bool]]:
    """Whether all `runs` runs on `queue` wait for the user, by the phase they publish to
    visibility (a status query each would replay every run evicted from a small cache)."""
    query = (
        f"TaskQueue = '{queue}' AND AgentPhase = 'awaiting_input' AND ExecutionStatus = 'Running'"
    )

    async def check() -> bool:
        return (await client.count_workflows(query)).count >= runs

    return check


async def snapshot(pid: int, path: Path) -> Path:
    os.kill(pid, signal.SIGUSR1)

    async def written() -> bool:
        return path.exists()

    await wait_for(written, f"snapshot {path.name}", 120)
    return path


async def park(
    client: Client,
    provider: ScriptedProvider,
    queue: str,
    runs: int,
    pid: int,
    snapshots: Path | None,
) -> Parked:
    """Start `runs` runs and park each on a question to the user; measure; answer them all
    and let them finish."""
    provider.register(parked_script())
    provider.reset()
    memory = ProcessMemory(pid)
    gc.collect()
    if snapshots:
        await snapshot(pid, snapshots / "snapshot-1.pickle")
    rss_before = memory.rss_mib()
    prefix = f"parked-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    parked_runs: list[RunClient] = []
    run_input = travel_input().model_copy(update={"model": PARKED_SCRIPT})
    for i in range(runs):
        await client.start_workflow(
            WORKFLOW_NAME,
            run_input,
            id=f"{prefix}-{i}",
            task_queue=queue,
            search_attributes=search.initial(run_input),
        )
        parked_runs.append(RunClient(client, f"{prefix}-{i}"))
    parked = waiting_for_input(client, queue, runs)
    await wait_for(parked, f"{runs} runs to wait for the user", PARK_SECONDS)
    seconds = time.perf_counter() - started
    rss_parked = memory.rss_mib()
    status = await parked_runs[0].status()
    peak = await snapshot(pid, snapshots / "snapshot-2.pickle") if snapshots else None
    answer = UserMessage(text="No, thanks.", sender="bench")
    await asyncio.gather(*(run.answer(answer) for run in parked_runs))
    waiting = [run.result() for run in parked_runs]
    results: list[AgentRunResult] = await asyncio.gather(*waiting)
    failed = [r.status for r in results if r.status != "completed"]
    if failed:
        raise RuntimeError(f"{len(failed)} parked run(s) did not complete: {failed[:3]}")
    provider.reset()
    return Parked(
        runs, seconds, rss_before, rss_parked, len(status.model_dump_json().encode()), peak
    )


def report_snapshots(before: Path, parked: Path, runs: int, top: int = 25) -> None:
    old = tracemalloc.Snapshot.load(str(before))
    new = tracemalloc.Snapshot.load(str(parked))
    total = sum(s.size_diff for s in new.compare_to(old, "filename"))
    print(
        f"    tracemalloc: +{total / 2**20:.1f} MiB of Python allocations while parked, "
        f"{total / runs / 1024:.1f} KiB per run"
    )
    for key in ("filename", "lineno"):
        print(f"    top {top} by {key} (KiB per parked run, blocks per run):")
        for stat in new.compare_to(old, key)[:top]:
            frame = stat.traceback[0]
            where = _short(frame.filename) + (f":{frame.lineno}" if key == "lineno" else "")
            print(
                f"      {stat.size_diff / runs / 1024:8.2f}  {stat.count_diff / runs:7.1f}  {where}"
            )


def report_tracebacks(before: Path, parked: Path, runs: int, top: int = 10) -> None:
    """The biggest growth by whole traceback, showing only agentloop's and temporalio's
    frames: where each allocation starts."""
    old = tracemalloc.Snapshot.load(str(before))
    new = tracemalloc.Snapshot.load(str(parked))
    print(f"    top {top} by traceback (KiB per parked run), agentloop and temporalio frames:")
    for stat in new.compare_to(old, "traceback")[:top]:
        print(f"      {stat.size_diff / runs / 1024:8.2f} KiB, {stat.count_diff / runs:.1f} blocks")
        for frame in stat.traceback:
            if "agentloop/" in frame.filename or "temporalio/" in frame.filename:
                print(f"          {_short(frame.filename)}:{frame.lineno}")


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


async def patient_warm_up(client: Client, queue: str, prefix: str, tries: int = 3) -> None:
    """Warm-up runs until one completes: a worker under tracemalloc with many frames may be
    too slow for the first run's timeouts (imports and schema building, all traced)."""
    run_one = agentloop_runner(client, queue, prefix)
    for i in range(tries):
        if await run_one(i):
            return
    raise RuntimeError(f"no warm-up run completed in {tries} tries")


async def profile_config(
    label: str,
    knobs: dict[str, str],
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    runs: int,
    work: Path,
    *,
    batch: bool = True,
) -> None:
    name = f"profile-{uuid.uuid4().hex[:8]}"
    traced = bool(knobs.get(TRACE))
    snapshots = work / name if traced else None
    env = {**worker_env(settings, name, work / f"{name}.db"), **knobs}
    if snapshots:
        snapshots.mkdir()
        env["BENCH_SNAPSHOT_DIR"] = str(snapshots)
    print(f"[{label}]", flush=True)
    log = work / f"{name}.log"
    if batch:
        async with child_process(PROFILE_WORKER, env, AGENTLOOP_READY, log) as child:
            provider.register(travel_script())
            await warm_up(client, name, f"{name}-warm")
            one = await run_batch(runs, runs, agentloop_runner(client, name, name), child.pid)
        print(
            f"    batch: {one.failures} failed, {one.runs_per_second:.2f} runs/s, worker RSS "
            f"{one.worker.start_mib:.0f} -> {one.worker.peak_mib:.0f} MiB: "
            f"{one.worker_mib_per_run:.3f} MiB per concurrent run",
            flush=True,
        )
    # Parked in a fresh worker: one that ran a batch keeps the memory the batch freed.
    async with child_process(PROFILE_WORKER, env, AGENTLOOP_READY, log) as child:
        provider.register(travel_script())
        await patient_warm_up(client, name, f"{name}-warm-parked")
        try:
            parked = await park(client, provider, name, runs, child.pid, snapshots)
        except Exception:
            code = child.process.returncode
            print(f"    worker (exit code {code}) log tail:\n{child.log_tail()}", file=sys.stderr)
            raise
    memory = (
        "(worker RSS not shown: tracemalloc's own bookkeeping is in it)"
        if traced
        else f"worker RSS {parked.rss_before_mib:.0f} -> {parked.rss_parked_mib:.0f} MiB: "
        f"{parked.mib_per_run:.3f} MiB per live run"
    )
    print(
        f"    parked: {runs} runs waiting after {parked.seconds_to_park:.1f} s, {memory}; "
        f"status query of one: {parked.status_bytes:,} bytes",
        flush=True,
    )
    if snapshots and parked.snapshot:
        report_snapshots(snapshots / "snapshot-1.pickle", parked.snapshot, runs)
        if int(knobs[TRACE]) > 1:
            report_tracebacks(snapshots / "snapshot-1.pickle", parked.snapshot, runs)


TRACED = ("default", "sandbox passing")
"""The configurations profiled again with tracemalloc (by label prefix)."""


async def main_async(runs: int, frames: int, only_traced: bool, only: str) -> None:
    plan = [(label, knobs, True) for label, knobs in CONFIGS if not only_traced]
    plan += [
        (f"{label}, tracemalloc ({frames} frame(s))", {**knobs, TRACE: str(frames)}, False)
        for label, knobs in CONFIGS
        if label.startswith(TRACED)
    ]
    for name in PROVIDER_ENV:
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="agentloop-profile-") as tmp:
        work = Path(tmp)
        async with DevStack(DevStackPorts.free(), state_dir=work, quiet=True) as stack:
            assert stack.client is not None and stack.scripted_provider is not None
            client, settings, provider = stack.client, stack.settings, stack.scripted_provider
            for label, knobs, batch in plan:
                if only in label:
                    await profile_config(
                        label, knobs, client, settings, provider, runs, work, batch=batch
                    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_memory")
    parser.add_argument("--runs", type=int, default=200, help="concurrent runs (default 200)")
    parser.add_argument("--frames", type=int, default=1, help="tracemalloc frames per block")
    parser.add_argument(
        "--tracemalloc-only", action="store_true", help="only the tracemalloc configuration"
    )
    parser.add_argument(
        "--only",
        default="",
        help="run only the configurations whose label contains this text",
    )
    args = parser.parse_args(argv)
    print(f"worker memory profile: {args.runs} concurrent 2-turn runs ({TRAVEL_SCRIPT})\n")
    asyncio.run(main_async(args.runs, args.frames, args.tracemalloc_only, args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
