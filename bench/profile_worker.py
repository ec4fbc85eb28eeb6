"""`python -m bench.profile_worker`: `python -m agentloop.worker`, instrumented for memory
and CPU profiling (`bench.profile_memory` drives it). Configured from the environment like the real
worker, plus:

- `BENCH_TRACEMALLOC_FRAMES=N`: trace Python allocations (N frames each); on SIGUSR1 a
  snapshot is dumped to `BENCH_SNAPSHOT_DIR/snapshot-<n>.pickle`, n = 1, 2, ... (written
  whole, then renamed into place).
- `BENCH_CPU_PROFILE=PATH`: on SIGUSR1, start profiling the CPU time of every thread (yappi);
  on SIGUSR2, stop and write the figures to PATH in pstats form (whole, then renamed into
  place). Not with `BENCH_TRACEMALLOC_FRAMES`, which takes SIGUSR1 too.
- `BENCH_MAX_CACHED_WORKFLOWS=N`: the worker's workflow cache size (Temporal's default: 1000).
- `BENCH_PASSTHROUGH_MODULES=a,b`: run workflows in Temporal's sandbox, passing these modules
  (and their submodules) through from the host instead of importing them afresh for every
  workflow run. (`AGENTLOOP_WORKFLOW_SANDBOX=on` runs them in the sandbox with its defaults.)

The knobs change the `Worker` that `agentloop.worker.running_worker` builds, for experiments
only: what a deployment runs is `python -m agentloop.worker`, unchanged.
"""

from __future__ import annotations

import os
import signal
import tracemalloc
from pathlib import Path
from types import FrameType
from typing import Any

FRAMES = int(os.environ.get("BENCH_TRACEMALLOC_FRAMES", "0"))
if FRAMES:  # before anything else is imported, so every later allocation is traced
    tracemalloc.start(FRAMES)


_dumped = 0


def _dump_snapshot(signum: int, frame: FrameType | None) -> None:
    global _dumped
    _dumped += 1
    target = Path(os.environ["BENCH_SNAPSHOT_DIR"]) / f"snapshot-{_dumped}.pickle"
    partial = target.with_suffix(".partial")
    tracemalloc.take_snapshot().dump(str(partial))
    partial.rename(target)


def _start_cpu_profile(signum: int, frame: FrameType | None) -> None:
    import yappi

    yappi.set_clock_type("cpu")
    yappi.start(builtins=True, profile_threads=True)


def _save_cpu_profile(signum: int, frame: FrameType | None) -> None:
    import yappi

    yappi.stop()
    target = Path(os.environ["BENCH_CPU_PROFILE"])
    partial = target.with_suffix(".partial")
    yappi.get_func_stats().save(str(partial), type="pstat")
    partial.rename(target)


def _configured_worker() -> None:
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    import agentloop.worker

    options: dict[str, Any] = {}
    if os.environ.get("BENCH_MAX_CACHED_WORKFLOWS"):
        options["max_cached_workflows"] = int(os.environ["BENCH_MAX_CACHED_WORKFLOWS"])
    if os.environ.get("BENCH_PASSTHROUGH_MODULES"):
        modules = os.environ["BENCH_PASSTHROUGH_MODULES"].split(",")
        restrictions = SandboxRestrictions.default.with_passthrough_modules(*modules)
        options["workflow_runner"] = SandboxedWorkflowRunner(restrictions=restrictions)
    if options:

        def worker(*args: Any, **kwargs: Any) -> Worker:
            return Worker(*args, **{**kwargs, **options})

        vars(agentloop.worker)["Worker"] = worker  # what `running_worker` calls


def main() -> None:
    if FRAMES:
        signal.signal(signal.SIGUSR1, _dump_snapshot)
    elif os.environ.get("BENCH_CPU_PROFILE"):
        signal.signal(signal.SIGUSR1, _start_cpu_profile)
        signal.signal(signal.SIGUSR2, _save_cpu_profile)
    _configured_worker()
    from agentloop.worker import main as worker_main

    worker_main()


if __name__ == "__main__":
    main()
