"""Stored histories replay against today's workflow code.

A change to `AgentRun` that alters the commands it issues for an existing history breaks
these: guard it with `workflow.patched`, or record new histories (`python -m
tests.histories.record`) when old runs can no longer exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agentloop.workflows.agent_run import AgentRun

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))


def replayer() -> Replayer:
    return Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)


def test_there_are_histories_to_replay() -> None:
    assert len(HISTORIES) >= 4


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_history_replays(path: Path) -> None:
    await replayer().replay_workflow(load(path))


async def test_a_history_with_different_commands_does_not_replay() -> None:
    """The replay check can fail: a history whose first tool activity had another type (as if
    recorded by other workflow code) no longer matches what today's code schedules."""
    raw = json.loads((Path(__file__).parent / "histories" / "travel.json").read_text())
    scheduled = next(
        e["activityTaskScheduledEventAttributes"]
        for e in raw["events"]
        if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name")
        == "run_tool"
    )
    scheduled["activityType"]["name"] = "run_tool_v0"
    history = WorkflowHistory.from_json("tampered", raw)
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower()
