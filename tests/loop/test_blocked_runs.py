"""Blocked is not completed (issue #34 item 2), over a real server with the scripted provider:
`give_up` and an empty answer stop a run `blocked` (`agentloop status` exits 3), and a task
family's stats count verified, unverified and blocked runs apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentloop.contract import AgentRunInput, AgentRunResult, Principal
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from tests.cli.test_cli import agentloop as agentloop_cli
from tests.cli.test_cli import process_env
from tests.live import Live, scripted
from tests.operations.test_family_stats import listed_stats
from tests.support import approve_as_shown, result_of, start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

REASON = "the task names no train number, and nothing I may call can find it"
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
SEAT = {"workshop_id": "ws-101", "participant_id": "p-carol"}


def giving_up(name: str) -> Script:
    """A read, then `give_up` beside another read (which must not run)."""
    return scripted(
        name,
        [scripted_call("get_train_status", "call_t", **TRAIN)],
        [
            scripted_call("get_train_status", "call_t2", **TRAIN),
            scripted_call("give_up", "call_g", reason=REASON),
        ],
    )


def booking(name: str) -> Script:
    return scripted(
        name,
        [scripted_call("reserve_seat", "call_r", **SEAT)],
        "Booked: {{call_r.reservation_id}}",
    )


def run_input(model: str, **fields: object) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Is my train late?",
            "provider": "openai-chat",
            "model": model,
            "tools": ["get_train_status"],
            **fields,
        }
    )


async def test_a_run_the_model_gives_up_on_stops_blocked_and_status_exits_3(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    live.provider.register(giving_up(run_id))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    result = await result_of(handle)

    assert (result.status, result.stop_cause) == ("blocked", "give_up")
    assert result.stop_reason == f"give_up: {REASON}"
    assert f"Stopped: blocked — give_up: {REASON}" in result.report
    assert result.usage.model_calls == 2 and result.usage.tool_calls == 1
    assert live.service.stats()["counts"]["trains"] == 1  # call_t2 never ran
    assert {c.call_id: (c.decision, c.status) for c in result.calls} == {
        "call_t": ("allowed", "succeeded"),
        "call_t2": ("not_run", "rejected"),
        "call_g": ("allowed", "succeeded"),
    }
    # The model was offered give_up without the run naming it.
    offered = [t["function"]["name"] for t in live.provider.requests[0]["body"]["tools"]]
    assert "give_up" in offered

    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    status = await agentloop_cli("status", run_id, "--json", env=env, cwd=tmp_path)
    assert status.returncode == 3, status.explain()
    snapshot = json.loads(status.stdout)
    assert (snapshot["outcome"], snapshot["result"]["status"]) == ("stopped", "blocked")
    shown = await agentloop_cli("status", run_id, env=env, cwd=tmp_path)
    assert shown.returncode == 3 and REASON in shown.stdout, shown.explain()


async def test_an_empty_answer_is_told_once_then_the_run_stops_blocked(
    live: Live, run_id: str
) -> None:
    live.provider.register(Script(name=run_id, turns=[ScriptTurn(text="")] * 3))
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input(run_id)))

    assert (result.status, result.stop_cause) == ("blocked", "empty_answer")
    assert result.usage.model_calls == 2
    notes = [
        m
        for request in live.provider.requests
        for m in request["body"]["messages"]
        if "Your final answer was empty" in json.dumps(m)
    ]
    assert len(notes) == 1  # in the second request only: told once


async def test_stats_count_verified_unverified_and_blocked_runs_apart(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    family = f"blocked-{run_id[-8:]}"
    verified, unverified, blocked = (f"{run_id}-{n}" for n in ("v", "u", "b"))
    live.provider.register(booking(verified))
    live.provider.register(scripted(unverified, "On time."))
    live.provider.register(giving_up(blocked))
    results: list[AgentRunResult] = []

    handle = await start_run(
        live.client,
        live.worker,
        verified,
        run_input(
            verified,
            tools=["reserve_seat"],
            completion_check="writes_applied",
            principal=Principal(subject="agent", scopes=["workshops:write"]),
            task_family=family,
        ),
    )
    view = await wait_for_phase(handle, "awaiting_approval")
    await approve_as_shown(handle, view.pending_approvals[0], "workshop-lead")
    results.append(await result_of(handle))
    for name in (unverified, blocked):
        started = await start_run(
            live.client, live.worker, name, run_input(name, task_family=family)
        )
        results.append(await result_of(started))
    assert [(r.status, r.verified) for r in results] == [
        ("completed", True),
        ("completed", False),
        ("blocked", False),
    ]
    assert results[0].verified_by == "writes_applied" and results[0].verification

    stats = await listed_stats(live.client, family, 3)
    assert stats.completed is not None and stats.verified is not None
    assert (stats.completed.runs, stats.verified.runs, stats.unverified, stats.blocked) == (
        2,
        1,
        1,
        1,
    )
    assert stats.not_completed is not None and stats.not_completed.runs == 1
    assert stats.stop_reasons == {"completed: final_answer": 2, "blocked: give_up": 1}
    # Learned from the verified completion alone: its two model calls and one write.
    assert stats.suggested is not None
    assert stats.suggested.max_model_calls == 3
    assert stats.suggested.per_tool == {"reserve_seat": 1}
    assert stats.source() == f"agentloop stats {family}: 1 verified completed of 3 runs"

    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    text = await agentloop_cli("stats", family, env=env, cwd=tmp_path)
    assert text.returncode == 0, text.explain()
    for line in (
        "completed: 2 runs",
        "of which verified (a completion check passed): 1 runs",
        "completed unverified (no completion check): 1",
        "blocked (the model gave up): 1",
    ):
        assert line in text.stdout, text.stdout
