"""Workers as their own OS processes, so their memory and CPU can be measured alone: `python -m
agentloop.worker` (what a deployment runs), `python -m bench.floor_worker` (the floor) and
`python -m bench.peer_worker` (the OpenAI Agents SDK peer).

The benchmark process keeps the scripted provider, the example service and the client; a
worker's RSS is then read from /proc/PID/status (`bench.memory`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agentloop.runtime.config import VARIABLES, Settings

AGENTLOOP_WORKER = ["-m", "agentloop.worker"]
AGENTLOOP_READY = "agentloop worker polling"
PROFILE_WORKER = ["-m", "bench.profile_worker"]
FLOOR_WORKER = ["-m", "bench.floor_worker"]
FLOOR_READY = "bench floor worker polling"
PEER_WORKER = ["-m", "bench.peer_worker"]
PEER_READY = "bench peer worker polling"
PEER_BASE_URL_VARIABLE = "BENCH_PEER_OPENAI_BASE_URL"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes `Settings.load()` in a child give `settings` back (the
    values that have a variable and are set)."""
    env: dict[str, str] = {}
    for field, variable in VARIABLES.items():
        value = getattr(settings, field, None)
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            env[variable.name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            env[variable.name] = str(value)
    return env


def worker_env(settings: Settings, task_queue: str, store_path: Path) -> dict[str, str]:
    """A worker like the stack's, on its own task queue and store. Its audit records go to its
    log file (they are emitted whatever the level; other logs from WARNING up). It serves no
    metrics: the stack's metrics port is one process's, and a benchmark runs several."""
    shared = settings_env(settings.model_copy(update={"metrics_port": None}))
    return {
        **shared,
        "AGENT_LOOP_TASK_QUEUE": task_queue,
        "AGENTLOOP_STORE_URL": f"sqlite:///{store_path}",
        "AGENTLOOP_LOG_LEVEL": "WARNING",
    }


@dataclass
class Child:
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@asynccontextmanager
async def child_process(
    args: list[str], env: dict[str, str], ready_line: str, log_path: Path
) -> AsyncIterator[Child]:
    """`python ARGS` with `env` over this environment, yielded once it prints `ready_line`;
    stdout is drained for as long as it runs, stderr goes to `log_path`. Stopped with SIGTERM
    (then SIGKILL) on exit, by its own pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            env={**os.environ, **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
    child = Child(process, log_path)
    drain: asyncio.Task[None] | None = None
    try:
        try:
            await asyncio.wait_for(_until_ready(child, ready_line), READY_TIMEOUT_SECONDS)
        except TimeoutError:
            raise RuntimeError(f"worker process not ready in time:\n{child.log_tail()}") from None
        drain = asyncio.create_task(_drain(process))
        yield child
    finally:
        await _stop(process)
        if drain is not None:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain


async def _until_ready(child: Child, ready_line: str) -> None:
    assert child.process.stdout is not None
    while True:
        line = (await child.process.stdout.readline()).decode(errors="replace")
        if not line:
            await child.process.wait()
            raise RuntimeError(
                f"worker process exited ({child.process.returncode}) before it was ready:\n"
                + child.log_tail()
            )
        if ready_line in line:
            return


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stdout is not None
    while await process.stdout.read(65536):
        pass


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


@dataclass
class WorkerProcess:
    """A worker running in its own OS process, polling `task_queue`."""

    child: Child
    task_queue: str

    @property
    def pid(self) -> int:
        return self.child.pid


@asynccontextmanager
async def agentloop_worker(
    settings: Settings,
    work_dir: Path,
    name: str,
    extra_env: dict[str, str] | None = None,
    *,
    instance: int = 0,
    profile_to: Path | None = None,
) -> AsyncIterator[WorkerProcess]:
    """`python -m agentloop.worker` on task queue `name`, with its own SQLite store (and
    `extra_env` over its environment). `instance` tells apart the logs of several workers on
    one queue. With `profile_to`, it is `python -m bench.profile_worker`, whose CPU profile
    SIGUSR1 starts and SIGUSR2 writes to `profile_to`."""
    env = {**worker_env(settings, name, work_dir / f"{name}-store.db"), **(extra_env or {})}
    log = work_dir / f"{name}-worker{instance or ''}.log"
    args = AGENTLOOP_WORKER
    if profile_to is not None:
        args = PROFILE_WORKER
        env["BENCH_CPU_PROFILE"] = str(profile_to)
    async with child_process(args, env, AGENTLOOP_READY, log) as child:
        yield WorkerProcess(child, name)


@asynccontextmanager
async def floor_worker(
    settings: Settings, work_dir: Path, name: str
) -> AsyncIterator[WorkerProcess]:
    """`python -m bench.floor_worker` (the Temporal floor) on task queue `name`."""
    env = {**settings_env(settings), "AGENT_LOOP_TASK_QUEUE": name}
    log = work_dir / f"{name}-floor.log"
    async with child_process(FLOOR_WORKER, env, FLOOR_READY, log) as child:
        yield WorkerProcess(child, name)


@asynccontextmanager
async def peer_worker(
    settings: Settings, provider_base_url: str, work_dir: Path, name: str
) -> AsyncIterator[WorkerProcess]:
    """`python -m bench.peer_worker` (the OpenAI Agents SDK peer) on task queue `name`, its
    model calls going to the scripted provider at `provider_base_url`."""
    env = {
        **settings_env(settings),
        "AGENT_LOOP_TASK_QUEUE": name,
        PEER_BASE_URL_VARIABLE: provider_base_url,
    }
    log = work_dir / f"{name}-peer.log"
    async with child_process(PEER_WORKER, env, PEER_READY, log) as child:
        yield WorkerProcess(child, name)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, from /proc/PID/stat (clock-tick
    resolution, 10 ms on Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")
