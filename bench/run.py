"""agentloop benchmarks: `python -m bench.run [--short] [--runs N] [--concurrency C]`.

Every figure is printed beside a baseline measured in the same run (or, labelled so, a
reference measured earlier), as a small table; the same figures go to `bench/results/latest.json`.
Everything runs offline on a throw-away DevStack (dev server, example service, scripted model
provider and worker on free ports). These are benchmarks, not tests: nothing here asserts a
number; `tests/test_bench_smoke.py` only checks that `--short` still runs and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from agentloop.devstack import DevStack, DevStackPorts
from bench import adapters, history, replay, throughput
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
    adapter_turns: int = 20
    replay_repeats: int = 3
    timing_budget_seconds: float = 1.0


def plan(args: argparse.Namespace) -> Plan:
    runs = args.runs or (20 if args.short else 200)
    concurrency = args.concurrency or min(runs, 200)
    if args.short:
        return Plan(True, runs, concurrency, 20, 20, replay_repeats=1, timing_budget_seconds=0.2)
    return Plan(False, runs, concurrency, 100, 200)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--short", action="store_true", help="shrink everything (< 1 minute)")
    parser.add_argument(
        "--runs", type=int, default=0, help="concurrent runs (default 200; 20 short)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=0, help="client-side bound (default: --runs, max 200)"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write figures")
    return parser.parse_args(argv)


def show(section: Section, index: int) -> None:
    print(render(section, index) + "\n", flush=True)


async def measure(p: Plan) -> tuple[list[Section], int]:
    """Every section; returns them and the number of failed runs of section 1."""
    for name in PROVIDER_ENV:  # never a real provider: everything plays the scripted one
        os.environ.pop(name, None)
    sections: list[Section] = []
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-") as tmp:
        async with DevStack(DevStackPorts.free(), state_dir=Path(tmp), quiet=True) as stack:
            assert stack.client is not None and stack.scripted_provider is not None
            client, settings, provider = stack.client, stack.settings, stack.scripted_provider
            one = await throughput.measure(
                client, settings, provider, p.runs, p.concurrency, Path(tmp)
            )
            sections.append(one.section)
            show(one.section, 1)
            sections.append(
                await history.measure(client, settings, provider, Path(tmp), p.history_turns)
            )
            show(sections[-1], 2)
            long = await replay.record_long(client, settings, provider, p.replay_turns)
            requests = await adapters.record_requests(client, settings, provider, p.adapter_turns)
    # Timed with the stack stopped: no worker, server or provider competes for the CPU.
    sections.append(await replay.measure(long, one.two_turn_history, p.replay_repeats))
    show(sections[-1], 3)
    sections.append(await adapters.measure(requests, p.adapter_turns, p.timing_budget_seconds))
    show(sections[-1], 4)
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    p = plan(args)
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
