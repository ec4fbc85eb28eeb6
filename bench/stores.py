"""Sections 9 and 10 (issue #21).

[9] Several workers, one PostgreSQL store: the same batch of concurrent 5-turn runs on one
worker with its SQLite store (the baseline), then on one and on two worker processes sharing a
PostgreSQL schema: runs/s, p50/p99 run latency, and the store's statements per turn (read off
`pg_stat_database`: every statement of the store is one autocommitted transaction).

[10] What a turn costs the worker: section 9's SQLite figures (CPU per turn, RSS growth per
concurrent run) beside those issue #21 started from; then the batch again on one SQLite worker,
profiled (yappi, every thread): where its CPU time goes.
"""

from __future__ import annotations

import asyncio
import os
import pstats
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from temporalio.client import Client

from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult
from agentloop.runtime.audit import mask_url
from agentloop.runtime.config import Settings
from agentloop.scripted_provider.server import ScriptedProvider
from agentloop.store.postgres import with_search_path
from bench.memory import PeakSampler
from bench.processes import WorkerProcess, agentloop_worker, cpu_seconds
from bench.report import Figure, Section, ratio
from bench.scripts import long_input, weather_script
from bench.throughput import MANY_RUNS_TOOL_TURNS, warm_up

POSTGRES_URL = os.environ.get(
    "AGENTLOOP_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
TURNS_PER_RUN = MANY_RUNS_TOOL_TURNS + 1
STARTING_CPU_MS_PER_TURN = 6.9
STARTING_MIB_PER_RUN = 0.305
"""Issue #21's starting figures (measured on this machine's kind before it), and its targets."""
TARGET_CPU_MS_PER_TURN = 5.0
TARGET_MIB_PER_RUN = 0.15
PROFILE_ROWS = 10
_CHECKOUT = f"{Path(__file__).parent.parent}/"


@dataclass(frozen=True)
class Setup:
    label: str
    workers: int
    postgres: bool


SETUPS = (
    Setup("SQLite, 1 worker", 1, False),
    Setup("PostgreSQL, 1 worker", 1, True),
    Setup("PostgreSQL, 2 workers", 2, True),
)


@dataclass
class Measured:
    setup: Setup
    runs: int
    failures: int
    wall_seconds: float
    latencies: list[float]
    cpu_seconds: float
    rss_growth_mib: float
    statements: int | None

    @property
    def turns(self) -> int:
        return self.runs * TURNS_PER_RUN

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.wall_seconds

    def latency(self, quantile: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] if ordered else 0.0

    @property
    def cpu_ms_per_turn(self) -> float:
        return 1000 * self.cpu_seconds / self.turns

    @property
    def mib_per_run(self) -> float:
        return self.rss_growth_mib / self.runs


async def measure(
    client: Client, settings: Settings, provider: ScriptedProvider, work: Path, runs: int
) -> tuple[Section, Section]:
    stores = Section(
        "stores",
        f"several workers, one store: {runs} concurrent 5-turn runs on each setup",
        "the same runs on one worker with its SQLite store, measured in this run",
    )
    postgres = await _postgres_reachable()
    measured: list[Measured] = []
    for setup in SETUPS:
        if setup.postgres and postgres is not None:
            stores.skipped.append(f"{setup.label}: {postgres}")
            continue
        measured.append(await _batch(client, settings, provider, work, runs, setup))
    baseline = measured[0]
    for m in measured:
        stores.add(*_store_figures(m, baseline))
    profiled, top = await _profiled(client, settings, provider, work, runs)
    cost = Section(
        "worker_cost",
        f"what a turn costs the worker: {runs} concurrent 5-turn runs, one worker profiled",
        "issue #21's starting figures (a reference measured before it, not in this run)",
    )
    cost.add(
        Figure("runs that failed", profiled.failures, 0),
        Figure(
            "worker CPU per turn, unprofiled (ms)",
            round(baseline.cpu_ms_per_turn, 2),
            STARTING_CPU_MS_PER_TURN,
            ratio(baseline.cpu_ms_per_turn, STARTING_CPU_MS_PER_TURN),
            f"target <= {TARGET_CPU_MS_PER_TURN}; section [9]'s SQLite batch",
        ),
        Figure(
            "worker RSS growth per concurrent run (MiB)",
            round(baseline.mib_per_run, 3),
            STARTING_MIB_PER_RUN,
            ratio(baseline.mib_per_run, STARTING_MIB_PER_RUN),
            f"target <= {TARGET_MIB_PER_RUN}; section [9]'s SQLite batch",
        ),
        Figure("worker CPU per turn, profiled (ms)", round(profiled.cpu_ms_per_turn, 2)),
        *top,
    )
    return stores, cost


def _store_figures(m: Measured, baseline: Measured) -> list[Figure]:
    def versus(label: str, value: float, base: float, digits: int = 2) -> Figure:
        return Figure(
            f"{m.setup.label}: {label}",
            round(value, digits),
            round(base, digits),
            ratio(value, base),
        )

    figures = [
        Figure(f"{m.setup.label}: runs that failed", m.failures, baseline.failures),
        versus("runs/s", m.runs_per_second, baseline.runs_per_second),
        versus("p50 run latency (s)", m.latency(0.5), baseline.latency(0.5)),
        versus("p99 run latency (s)", m.latency(0.99), baseline.latency(0.99)),
        versus(
            "worker CPU per turn (ms, all workers)", m.cpu_ms_per_turn, baseline.cpu_ms_per_turn
        ),
    ]
    if m.statements is not None:
        figures.append(
            Figure(
                f"{m.setup.label}: store statements per turn",
                round(m.statements / m.turns, 2),
                note="PostgreSQL transactions in the batch (warm-up and table set-up included)",
            )
        )
    return figures


async def _batch(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    work: Path,
    runs: int,
    setup: Setup,
    profile_to: Path | None = None,
) -> Measured:
    prefix = f"bench-store-{uuid.uuid4().hex[:8]}"
    script = weather_script(prefix, MANY_RUNS_TOOL_TURNS)
    provider.register(script)
    run_input = long_input(script, ["get_weather"])
    async with AsyncExitStack() as stack:
        extra: dict[str, str] = {}
        if setup.postgres:
            extra["AGENTLOOP_STORE_URL"] = await stack.enter_async_context(_schema(prefix))
        before = await _statements() if setup.postgres else None
        workers: list[WorkerProcess] = [
            await stack.enter_async_context(
                agentloop_worker(settings, work, prefix, extra, instance=n, profile_to=profile_to)
            )
            for n in range(setup.workers)
        ]
        await warm_up(client, prefix, f"{prefix}-warm", run_input)
        cpu_before = sum(cpu_seconds(w.pid) for w in workers)
        if profile_to is not None:
            os.kill(workers[0].pid, signal.SIGUSR1)
        with PeakSampler(workers[0].pid) as memory:
            started = time.perf_counter()
            outcomes = await asyncio.gather(
                *(_timed(client, prefix, run_input, n) for n in range(runs))
            )
            wall = time.perf_counter() - started
        cpu = sum(cpu_seconds(w.pid) for w in workers) - cpu_before
        if profile_to is not None:
            os.kill(workers[0].pid, signal.SIGUSR2)
            await _written(profile_to)
        growth = memory.growth_mib
        await stack.aclose()  # the workers' connections closed: their counts are in the view
        statements = None if before is None else await _settled_statements() - before
    latencies = [seconds for ok, seconds in outcomes if ok]
    return Measured(setup, runs, runs - len(latencies), wall, latencies, cpu, growth, statements)


async def _timed(
    client: Client, queue: str, run_input: AgentRunInput, n: int
) -> tuple[bool, float]:
    started = time.perf_counter()
    try:
        result: AgentRunResult = await client.execute_workflow(
            WORKFLOW_NAME,
            run_input,
            id=f"{queue}-{n}",
            task_queue=queue,
            result_type=AgentRunResult,
        )
    except Exception:
        return False, 0.0
    return result.status == "completed", time.perf_counter() - started


async def _profiled(
    client: Client, settings: Settings, provider: ScriptedProvider, work: Path, runs: int
) -> tuple[Measured, list[Figure]]:
    """The batch on a profiled worker; figures: the share of its own CPU time per area (a
    package, or agentloop's subpackage), and agentloop's functions by time spent inside them
    (callees included), where a change of ours would act."""
    profile = work / f"worker-{uuid.uuid4().hex[:8]}.prof"
    measured = await _batch(client, settings, provider, work, runs, SETUPS[0], profile)
    rows: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    total = sum(row[2] for row in rows.values()) or 1.0
    areas: Counter[str] = Counter()
    for (file, _, _), row in rows.items():
        areas[_area(file)] += row[2]
    figures = [
        Figure(f"own CPU in {area}", f"{100 * seconds / total:.1f}%")
        for area, seconds in areas.most_common(PROFILE_ROWS)
    ]
    ours = [(key, row) for key, row in rows.items() if _area(key[0]).startswith("agentloop")]
    ours.sort(key=lambda item: item[1][3], reverse=True)
    figures += [
        Figure(
            f"inside {_module_path(file)}:{line} {name}",
            f"{100 * row[3] / total:.1f}%",
            note=f"{row[1]:,} calls",
        )
        for (file, line, name), row in ours[:PROFILE_ROWS]
    ]
    return measured, figures


def _area(file: str) -> str:
    """`agentloop/<subpackage>`, the installed package, `stdlib <module>` or `builtins`."""
    parts = _module_path(file).parts
    if not parts:
        return "builtins"
    if parts[0] == "agentloop" and len(parts) > 2:
        return "/".join(parts[:2])
    if file.startswith(_CHECKOUT) or "site-packages/" in file:
        return parts[0]
    return f"stdlib {Path(file).stem if len(parts) == 1 else parts[0]}"


def _module_path(file: str) -> Path:
    """The path of a module below the directory it is imported from (empty for built-ins)."""
    if "/" not in file:
        return Path()
    if "site-packages/" in file:
        return Path(file.split("site-packages/", 1)[1])
    if file.startswith(_CHECKOUT):
        return Path(file[len(_CHECKOUT) :])
    path = Path(file)
    for n, part in enumerate(path.parts):
        if part.startswith("python3"):
            return Path(*path.parts[n + 1 :])
    return Path(path.name)


async def _postgres_reachable() -> str | None:
    """None, or why the PostgreSQL setups cannot run."""
    try:
        conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, connect_timeout=3)
    except psycopg.OperationalError as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"PostgreSQL at {mask_url(POSTGRES_URL)} is unreachable ({why})"
    await conn.close()
    return None


async def _statements() -> int:
    """Transactions committed or rolled back in the database so far. A fresh connection each
    time: a session caches what it reads of the statistics."""
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0]) - 1  # this reading's own transaction


async def _written(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the worker wrote no profile to {path}")


async def _settled_statements() -> int:
    """`_statements()` once the stopped workers' backends have reported theirs: a backend
    reports its counts as it exits, after its client has gone."""
    last = await _statements()
    for _ in range(20):
        await asyncio.sleep(0.25)
        now = await _statements()
        if now == last:
            return now
        last = now
    return last


@asynccontextmanager
async def _schema(prefix: str) -> AsyncIterator[str]:
    """A schema of its own for one setup; yields the store URL that puts the tables in it."""
    name = prefix.replace("-", "_")
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield with_search_path(POSTGRES_URL, name)
    finally:
        async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
