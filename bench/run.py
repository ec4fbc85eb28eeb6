"""agentloop benchmarks: `python -m bench.run [--short] [--runs N] [--concurrency C]`.

Every figure is printed beside a baseline measured in the same run (or, labelled so, a
reference measured earlier), as a small table; the same figures go to `bench/results/latest.json`.
Everything runs offline on a throw-away DevStack (dev server, example service, scripted model
provider and worker on free ports). These are benchmarks, not tests: nothing here asserts a
number; `tests/operations/test_bench_smoke.py` only checks that `--short` still runs and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import agentloop
import bench
from agentloop.cli.dev import DevStack, DevStackPorts
from bench import (
    adapters,
    counted,
    envelope,
    history,
    inbox,
    local_activities,
    mcp_clients,
    outputs,
    paused,
    replay,
    stores,
    streaming,
    thousand_turns,
    throughput,
    turns,
)
from bench.report import Section, render, write_json

DEFAULT_JSON = Path(__file__).parent / "results" / "latest.json"
PROVIDER_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


@dataclass(frozen=True)
class Plan:
    short: bool
    runs: int
    concurrency: int
    history_turns: int
    replay_turns: int
    many_runs_levels: tuple[int, ...]
    """Concurrent 5-turn runs, one batch per level (section 1)."""
    output_turns: tuple[int, ...]
    """Turn counts of the padded-output runs (section 4); must include 20 (the target)."""
    large_output_turns: int
    """Turns of the 1 MB-output run that must complete (section 4)."""
    long_turns: int
    long_continue_as_new_events: int | None
    """Section 5; None: continue-as-new only when Temporal suggests it."""
    overhead_turns: int = 20
    overhead_repeats: int = 5
    adapter_turns: int = 20
    replay_repeats: int = 3
    timing_budget_seconds: float = 1.0
    transport_calls: int = 40
    """Streamed calls per timed batch of section 7's transport figures."""
    paused_runs: int = 2_000
    paused_cached: int = 500
    """Section 8: runs paused for approval at once, on a worker caching this many."""
    store_runs: int = 200
    """Sections 9 and 10: concurrent 5-turn runs per store setup, and under the profiler."""
    mcp_calls: int = 50
    """Section 11: sequential MCP reads per workflow, through each client."""
    stream_turns: int = 20
    stream_runs: int = 50
    """Section 13: turns of the streamed runs, and concurrent watched runs."""
    inbox_runs: int = 1_000
    """Section 14: runs waiting for approval that the inbox page lists."""
    inbox_fakes: int = 2_000
    """Section 14: fake waiting runs (no worker vouches for them) beside them."""


def plan(args: argparse.Namespace) -> Plan:
    runs = args.runs or (20 if args.short else 200)
    concurrency = args.concurrency or min(runs, 200)
    if args.short:
        return Plan(
            True,
            runs,
            concurrency,
            history_turns=20,
            replay_turns=20,
            many_runs_levels=(5, 10),
            output_turns=(20,),
            large_output_turns=5,
            long_turns=30,
            long_continue_as_new_events=120,  # crosses a few boundaries in 30 turns
            overhead_turns=10,
            overhead_repeats=1,
            replay_repeats=1,
            timing_budget_seconds=0.2,
            transport_calls=5,
            paused_runs=20,
            paused_cached=10,
            store_runs=5,
            mcp_calls=10,
            stream_turns=5,
            stream_runs=5,
            inbox_runs=20,
            inbox_fakes=50,
        )
    return Plan(
        False,
        runs,
        concurrency,
        history_turns=100,
        replay_turns=200,
        many_runs_levels=(10, 50, 200, 600),
        output_turns=(20, 100),
        large_output_turns=50,
        long_turns=1000,
        long_continue_as_new_events=None,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--short", action="store_true", help="shrink everything (about a minute)")
    parser.add_argument(
        "--runs", type=int, default=0, help="concurrent runs (default 200; 20 short)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=0, help="client-side bound (default: --runs, max 200)"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write figures")
    return parser.parse_args(argv)


def show(section: Section, index: int, seconds: float) -> None:
    print(f"{render(section, index)}\n    ({seconds:.0f} s)\n", flush=True)


async def measure(p: Plan) -> tuple[list[Section], int]:
    """Every section, printed as it is measured; returns them and the number of failed runs
    of section 1."""
    for name in PROVIDER_ENV:  # never a real provider: everything plays the scripted one
        os.environ.pop(name, None)
    sections: list[Section] = []

    clock = [time.perf_counter()]

    def done(section: Section) -> None:
        """Print `section` with the time it took (since the previous one was printed)."""
        now = time.perf_counter()
        sections.append(section)
        show(section, len(sections), now - clock[0])
        clock[0] = now

    with tempfile.TemporaryDirectory(prefix="agentloop-bench-") as tmp:
        work = Path(tmp)
        async with DevStack(DevStackPorts.free(), state_dir=work, quiet=True) as stack:
            assert stack.client is not None and stack.scripted_provider is not None
            assert stack.example_service is not None
            client, settings, provider = stack.client, stack.settings, stack.scripted_provider
            one = await throughput.measure(
                client, settings, provider, p.runs, p.concurrency, work, p.many_runs_levels
            )
            done(one.section)
            done(
                await turns.measure(
                    client, settings, provider, work, p.overhead_turns, p.overhead_repeats
                )
            )
            done(await history.measure(client, settings, provider, work, p.history_turns))
            done(
                await outputs.measure(
                    client,
                    settings,
                    provider,
                    stack.example_service,
                    work,
                    p.output_turns,
                    p.large_output_turns,
                )
            )
            done(
                await thousand_turns.measure(
                    client, settings, provider, work, p.long_turns, p.long_continue_as_new_events
                )
            )
            paused_section = await paused.measure(
                client,
                settings,
                provider,
                stack.example_service,
                work,
                p.paused_runs,
                p.paused_cached,
            )
            store_sections = await stores.measure(client, settings, provider, work, p.store_runs)
            mcp_section = await mcp_clients.measure(client, settings, provider, work, p.mcp_calls)
            counter_section = await counted.measure(client, settings, provider)
            streaming_section = await streaming.measure(
                client, settings, provider, p.stream_turns, p.stream_runs
            )
            inbox_section = await inbox.measure(
                client, settings, provider, work, p.inbox_runs, p.inbox_fakes
            )
            issue_42_section = await local_activities.measure(
                client,
                settings,
                provider,
                work,
                p.overhead_turns,
                p.overhead_repeats,
                settings.task_queue,
            )
            long = await replay.record_long(client, settings, provider, p.replay_turns)
            requests = await adapters.record_requests(client, settings, provider, p.adapter_turns)
        # Timed with the stack stopped: no worker, server or provider competes for the CPU.
        done(await replay.measure(long, one.two_turn_history, p.replay_repeats))
        done(
            await adapters.measure(
                requests, p.adapter_turns, p.timing_budget_seconds, p.transport_calls, work
            )
        )
        done(paused_section)
        for section in store_sections:
            done(section)
        done(mcp_section)
        done(counter_section)
        done(streaming_section)
        done(inbox_section)
        done(issue_42_section)
        done(envelope.measure())
    return sections, one.failures


def meta(p: Plan, seconds: float) -> dict[str, Any]:
    return {
        "mode": "short" if p.short else "full",
        "plan": asdict(p),
        "seconds": round(seconds, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "temporalio": version("temporalio"),
            "openai": version("openai"),
            "anthropic": version("anthropic"),
        },
    }


def compile_bytecode() -> None:
    """Compile agentloop's and the floor's modules as a deployment has them (pip install and
    the Docker image compile at install): with PYTHONDONTWRITEBYTECODE set, as on some
    machines, every worker would otherwise compile its modules from source, and the sandbox
    the workflow module again for every run."""
    for package in (agentloop, bench):
        compileall.compile_dir(Path(package.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    p = plan(args)
    compile_bytecode()
    print(
        f"agentloop benchmarks ({'short' if p.short else 'full'}): {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, temporalio {version('temporalio')}\n",
        flush=True,
    )
    started = time.perf_counter()
    sections, failures = asyncio.run(measure(p))
    seconds = time.perf_counter() - started
    write_json(args.json, meta(p, seconds), sections)
    print(f"figures written to {args.json} ({seconds:.0f} s)")
    if failures:
        print(f"FAILED: {failures} run(s) of section 1 did not complete", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
