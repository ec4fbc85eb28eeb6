"""Limits learned from a task family (issue #19 item 4, seed 001): the finished runs of one
family, completed apart from stopped, their distributions, and the limits their completed
runs' tail suggests; `--limits-from` starts a run with them and records where they came from."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

import agentloop
from agentloop.contract import AgentRunResult, CallRecord, Limits, Usage
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.task_families import FamilyStats, FinishedRun, summarize
from agentloop.testing.turns import call as scripted_call
from tests.cli.test_cli import agentloop as agentloop_cli
from tests.cli.test_cli import process_env
from tests.live import Live, agent_input, scripted
from tests.support import result_of

WEATHER_TOOLS = ["get_weather"]


def finished(status: str, model_calls: int, tools: list[str], seconds: float) -> FinishedRun:
    calls = [
        CallRecord(
            call_id=f"c{n}", tool=tool, attempts=1, idempotency_key="k" if tool == "book" else ""
        )
        for n, tool in enumerate(tools)
    ]
    usage = Usage(model_calls=model_calls, tool_calls=len(tools), input_tokens=100 * model_calls)
    result = AgentRunResult(status=status, stop_reason=f"{status}: x", usage=usage, calls=calls)  # type: ignore[arg-type]
    return FinishedRun(workflow_id="w", result=result, seconds=seconds)


def test_the_suggestion_is_the_completed_runs_tail_and_writes_are_held_to_their_max() -> None:
    runs = [
        *(
            finished("completed", 2 + n % 3, ["read"] * (n % 4) + ["book"], 10.0 + n)
            for n in range(20)
        ),
        finished("limit_reached", 8, ["read"] * 7, 100.0),
        FinishedRun(workflow_id="failed-at-start"),
    ]
    stats = summarize("fam", runs)
    assert (stats.runs, stats.without_result, stats.writes) == (22, 1, ["book"])
    assert stats.completed is not None and stats.not_completed is not None
    assert (stats.completed.runs, stats.not_completed.runs) == (20, 1)
    calls = stats.completed.model_calls
    assert (calls.p50, calls.p90, calls.p99, calls.max) == (3, 4, 4, 4)
    assert stats.stop_reasons == {"completed": 20, "limit_reached": 1}
    limits = stats.suggested
    assert limits is not None
    assert limits.max_model_calls == math.ceil(4 * 1.25) == 5
    assert limits.per_tool == {"book": 1, "read": math.ceil(3 * 1.25)}  # the write: its max
    assert limits.max_total_tokens == 4 * 400  # room for each call's reservation
    assert limits.max_cost_usd is None  # nothing cost anything: no cap learned
    assert limits.deadline_seconds == math.ceil(29.0 * 1.5)
    assert summarize("none", [runs[-2]]).suggested is None  # nothing completed


def test_limits_are_learned_from_verified_completions_when_there_are_any() -> None:
    verified = finished("completed", 2, ["read"], 10.0)
    assert verified.result is not None
    verified.result.verified = True
    verified.result.stop_cause = "final_answer"
    runs = [verified, finished("completed", 6, ["read"] * 5, 50.0), finished("blocked", 3, [], 5.0)]
    stats = summarize("fam", runs)
    assert stats.verified is not None and stats.completed is not None
    assert (stats.completed.runs, stats.verified.runs, stats.unverified, stats.blocked) == (
        2,
        1,
        1,
        1,
    )
    assert stats.suggested is not None and stats.suggested.max_model_calls == math.ceil(2 * 1.25)
    assert stats.stop_reasons == {"completed: final_answer": 1, "completed": 1, "blocked": 1}
    assert stats.source() == "agentloop stats fam: 1 verified completed of 3 runs"
    unverified = summarize("fam", runs[1:])
    assert unverified.suggested is not None and unverified.suggested.max_model_calls == 8
    assert unverified.source() == "agentloop stats fam: 1 completed (none verified) of 2 runs"


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_stats_over_a_familys_runs_and_a_run_started_from_them(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    family = f"weather-{run_id[-8:]}"
    results: list[AgentRunResult] = []
    for n in range(20):
        name = f"{run_id}-{n}"
        live.provider.register(weather_reads(name, f"c_{n}_", 1 + n % 3))
        stopped = n % 4 == 3  # five of them run out of model calls
        run_input = agent_input(
            name,
            "openai-chat",
            "Weather in Oslo for a few days?",
            WEATHER_TOOLS,
            task_family=family,
            limits=Limits(max_model_calls=1 if stopped else 8),
        )
        handle = await agentloop.start_run(
            live.client, run_input, id=name, task_queue=live.worker.task_queue
        )
        results.append(await result_of(handle))
    completed = [r for r in results if r.status == "completed"]
    assert len(completed) == 15 and {r.status for r in results} == {"completed", "limit_reached"}

    stats = await listed_stats(live.client, family, 20)
    assert stats.completed is not None and stats.not_completed is not None
    assert (stats.completed.runs, stats.not_completed.runs) == (15, 5)
    model_calls = sorted(r.usage.model_calls for r in completed)
    assert stats.completed.model_calls.max == model_calls[-1] == 4
    assert stats.completed.model_calls.p50 == model_calls[7]
    tokens = sorted(r.usage.input_tokens + r.usage.output_tokens for r in completed)
    assert stats.completed.tokens.max == tokens[-1]
    assert stats.stop_reasons["limit_reached: budget"] == 5
    assert stats.suggested is not None
    assert stats.suggested.max_model_calls == math.ceil(4 * 1.25)
    assert stats.suggested.per_tool == {"get_weather": math.ceil(3 * 1.25)}

    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    printed = await agentloop_cli("stats", family, "--json", env=env, cwd=tmp_path)
    assert printed.returncode == 0, printed.explain()
    assert json.loads(printed.stdout) == json.loads(stats.model_dump_json())
    text = await agentloop_cli("stats", family, env=env, cwd=tmp_path)
    assert "completed: 15 runs" in text.stdout and "suggested limits" in text.stdout

    learned_id = f"{run_id}-learned"
    live.provider.register(scripted(learned_id, "Done."))
    started = await agentloop_cli(
        "run", "Weather?", "--model", learned_id, "--tool", "get_weather", "--family", family,
        "--limits-from", family, "--max-tool-calls", "2", "--id", learned_id, "--follow",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert started.returncode == 0, started.explain()
    start_input = await _start_input(live.client, learned_id)
    assert start_input["limits"]["max_model_calls"] == stats.suggested.max_model_calls
    assert start_input["limits"]["max_tool_calls"] == 2  # given on the command line: it wins
    assert start_input["limits_source"] == stats.source()
    assert start_input["task_family"] == family


def weather_reads(name: str, call_prefix: str, reads: int) -> Script:
    """`reads` weather reads in Oslo, one a turn and a day each, then the answer."""
    turns = [
        ScriptTurn(
            tool_calls=[
                scripted_call(
                    "get_weather", f"{call_prefix}{i}", city="Oslo", date=f"2026-12-{i + 1:02d}"
                )
            ]
        )
        for i in range(reads)
    ]
    return scripted(name, *turns, "Done.")


async def listed_stats(client: Client, family: str, runs: int) -> FamilyStats:
    """The family's stats once visibility lists all `runs` of its closed runs."""
    for _ in range(100):
        stats = await agentloop.family_stats(client, family)
        if stats.runs == runs:
            return stats
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility lists {stats.runs} of the family's {runs} runs")


async def _start_input(client: Client, workflow_id: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(workflow_id)
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [decoded] = await client.data_converter.decode(payloads[:1], [dict[str, Any]])
        return dict(decoded)
    raise AssertionError("no start event")


@pytest.mark.integration
async def test_a_run_that_continued_as_new_is_timed_from_its_first_runs_start(
    live: Live, run_id: str
) -> None:
    """Its deadline counts from there, so the deadline its family suggests must too (the last
    run's own start would leave out every run before it)."""
    family = f"chain-{run_id[-8:]}"
    live.provider.register(weather_reads(run_id, "c_", 4))
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Weather in Oslo for four days?",
        WEATHER_TOOLS,
        task_family=family,
        continue_as_new_after_events=20,
    )
    handle = await agentloop.start_run(
        live.client, run_input, id=run_id, task_queue=live.worker.task_queue
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    last = await live.client.get_workflow_handle(run_id).describe()
    first_run = last.raw_info.first_run_id
    assert first_run and first_run != last.run_id  # it continued as new
    first = await live.client.get_workflow_handle(run_id, run_id=first_run).describe()
    assert first.start_time and last.start_time and last.close_time
    chain = (last.close_time - first.start_time).total_seconds() - result.paused_seconds
    own = (last.close_time - last.start_time).total_seconds()
    assert chain > own

    stats = await listed_stats(live.client, family, 1)
    assert stats.completed is not None
    assert stats.completed.seconds.max == pytest.approx(chain, abs=0.001)
