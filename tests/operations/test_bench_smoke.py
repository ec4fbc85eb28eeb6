"""The benchmarks never rot: `python -m bench.run --short` runs to the end and prints every
section with numbers. No thresholds on the numbers (CI must not be flaky): the figures are
read by people, against the baselines printed beside them.

The bench takes about three minutes, mostly waiting on the worker processes it starts one by
one, so it is started when the session starts (`ShortBench`, from `conftest.py`) and runs
beside the rest of the suite; this test runs last and reads what it printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.throughput import FEW_ACTIVITY_SLOTS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
SECTIONS = {
    1: (
        "throughput and memory",
        [
            "failed runs",
            "runs/s",
            "worker RSS growth per concurrent run",
            "combined RSS growth per concurrent run",
            "5-turn runs, ",
            f"{FEW_ACTIVITY_SLOTS} activity slots, 5-turn runs, ",
            "5-turn runs: worker RSS per run added",
            "runs/s vs the peer",
            "AgentRun's own objects per cached 2-turn run",
            "AgentRun's own objects per cached 5-turn run",
        ],
    ),
    2: (
        "turn overhead",
        [
            "per-turn wall",
            "per-turn wall (ms) vs 2 x SDK-default",
            "run wall",
            "worker CPU per turn",
            "worker CPU per turn in the sandbox",
            "worker CPU per turn (ms) vs the peer",
        ],
    ),
    3: ("history growth", ["bytes/turn", "total history bytes"]),
    4: (
        "history by tool-output size",
        ["1 KB x", "100 KB x", "1 MB x", "20 turns of 100 KB outputs: total history bytes"],
    ),
    5: (
        "long run",
        [
            "wall time",
            "worker CPU per turn",
            "total history bytes",
            "history events",
            "continue-as-new count",
        ],
    ),
    6: (
        "replay",
        ["replay seconds", "seconds per model call", "replay seconds in the sandbox"],
    ),
    7: (
        "adapter CPU",
        [
            "openai-chat build_request",
            "openai-responses build_request",
            "anthropic build_request",
            "openai-chat streamed call",
            "openai-responses streamed call",
            "anthropic streamed call",
        ],
    ),
    8: (
        "runs waiting on people",
        [
            "paused runs that failed to complete",
            "worker RSS per paused run",
            "worker peak RSS",
            "seconds until all approved runs complete",
            "resumed runs/s",
            "writes at the service",
        ],
    ),
    9: (
        "several workers, one store",
        [
            "SQLite, 1 worker: runs/s",
            "PostgreSQL, 1 worker: runs/s",
            "PostgreSQL, 2 workers: p99 run latency",
            "PostgreSQL, 2 workers: store statements per turn",
        ],
    ),
    10: (
        "what a turn costs the worker",
        [
            "worker CPU per turn, unprofiled",
            "worker RSS growth per concurrent run",
            "own CPU in ",
            "inside agentloop/",
        ],
    ),
    11: (
        "MCP clients",
        [
            "read: wall per call",
            "read: CPU per call",
            "cut-off write: notes at the server, agentloop vs temporalio-mcp",
        ],
    ),
    12: ("Token counter asks", ["asks, generous cap", "asks, tight cap"]),
    13: (
        "Streaming on against off",
        [
            "wall ms per turn, on, one subscriber",
            "CPU ms per turn (worker, model, subscriber), on, one subscriber",
            "history bytes per run, on, one subscriber",
            "delivery p50 ms",
            "failed workflow tasks",
        ],
    ),
    14: (
        "The inbox page",
        [
            "runs listed (from memos)",
            "the inbox's listing, in the background (ms)",
            "first view: time to first byte (ms)",
            "median of 5 views: time to whole page (ms)",
            "time a fake adds to the listing, none to a view (ms)",
        ],
    ),
    15: (
        "issue 42",
        ["per-turn wall (ms), after vs before", "per-turn worker CPU (ms), after vs before"],
    ),
    16: (
        "Provenance envelope",
        [
            "note, said once (bytes)",
            "anthropic, 200-char outputs: bytes one envelope adds",
            "openai-chat, 8,000-char outputs: request bytes",
        ],
    ),
}
NUMBER = re.compile(r"\d")


SHORT_BENCH_TIMEOUT_SECONDS = 1_200


class ShortBench:
    """`python -m bench.run --short`, started now in the background; `done()` waits for it."""

    def __init__(self, work: Path) -> None:
        self._work = work
        self.json_path = work / "latest.json"
        self._out = (work / "stdout.txt").open("w+")
        self._err = (work / "stderr.txt").open("w+")
        env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.run", "--short", "--json", str(self.json_path)],
            cwd=ROOT,
            env=env,
            stdout=self._out,
            stderr=self._err,
            text=True,
        )

    def done(self) -> tuple[int, str, str]:
        """Its exit code, stdout and stderr, once it has exited."""
        returncode = self._process.wait(timeout=SHORT_BENCH_TIMEOUT_SECONDS)
        self._out.seek(0)
        self._err.seek(0)
        return returncode, self._out.read(), self._err.read()

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._out.close()
        self._err.close()
        shutil.rmtree(self._work, ignore_errors=True)


SHORT_BENCH = pytest.StashKey[ShortBench]()


def split_sections(stdout: str) -> dict[int, str]:
    """`[n] title` starts section n; it runs to the next blank line."""
    found = re.findall(r"^\[(\d+)\] (.*?)(?:\n\n|\Z)", stdout, flags=re.M | re.S)
    return {int(index): body for index, body in found}


def test_the_short_benchmark_prints_every_figure(request: pytest.FixtureRequest) -> None:
    bench = request.config.stash[SHORT_BENCH]
    returncode, stdout, stderr = bench.done()
    assert returncode == 0, stdout + stderr
    sections = split_sections(stdout)
    assert sorted(sections) == sorted(SECTIONS), stdout
    for index, (title, labels) in SECTIONS.items():
        body = sections[index]
        assert body.startswith(title), body
        for label in labels:
            rows = [line for line in body.splitlines() if line.strip().startswith(label)]
            assert rows, f"section {index} lacks {label!r}:\n{body}"
            assert all(NUMBER.search(row.strip()[len(label) :]) for row in rows), rows
    document = json.loads(bench.json_path.read_text())
    assert [s["key"] for s in document["sections"]] == [
        "throughput",
        "turn_overhead",
        "history",
        "history_by_output_size",
        "long_run",
        "replay",
        "adapters",
        "paused_runs",
        "stores",
        "worker_cost",
        "mcp_clients",
        "token_counter",
        "streaming",
        "inbox",
        "issue_42_local_activities",
        "envelope",
    ]
    assert all(section["figures"] for section in document["sections"])
