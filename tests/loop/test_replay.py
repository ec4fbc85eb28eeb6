"""Stored histories replay against today's workflow code.

A change to `AgentRun` that alters the commands it issues for an existing history breaks
these: guard it with `workflow.patched`, or record new histories (`python -m
tests.histories.record`) when old runs can no longer exist. `agentloop replay tests/histories`
runs the same check from the command line.

Each history replays twice: as workers run AgentRun by default (unsandboxed), and in Temporal's
sandbox (`AGENTLOOP_WORKFLOW_SANDBOX=on`), which fails a replay whose workflow module reaches
for something the sandbox restricts: the code stays fit to run either way."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from agentloop.cli.replay import (
    HistoryFileError,
    explain,
    load_history,
    replay_histories,
)
from agentloop.runtime.config_checks import SandboxMode

HISTORY_DIR = Path(__file__).parents[1] / "histories"
HISTORIES = sorted(HISTORY_DIR.glob("*.json"))


def tampered_travel() -> tuple[dict[str, Any], int]:
    """travel.json as if recorded by other workflow code: its first tool activity had another
    type. Returns the history and the id of the changed ActivityTaskScheduled event."""
    raw = json.loads((HISTORY_DIR / "travel.json").read_text())
    event = next(
        e
        for e in raw["events"]
        if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name")
        == "run_tool"
    )
    event["activityTaskScheduledEventAttributes"]["activityType"]["name"] = "run_tool_v0"
    return raw, int(event["eventId"])


def test_there_are_histories_to_replay() -> None:
    assert len(HISTORIES) >= 4


@pytest.mark.parametrize("sandbox", ["off", "on"], ids=["unsandboxed", "sandboxed"])
@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_history_replays(path: Path, sandbox: SandboxMode) -> None:
    [report] = await replay_histories([path], sandbox)
    assert report.ok, report.line()
    assert report.events == len(json.loads(path.read_text())["events"])
    assert report.line().startswith(f"ok  {path}  ({report.events} events, workflow ")


async def test_a_folder_stands_for_the_histories_in_it() -> None:
    reports = await replay_histories([HISTORY_DIR])
    assert [r.path for r in reports] == HISTORIES
    assert all(r.ok for r in reports), "\n".join(r.line() for r in reports)


async def test_a_history_with_different_commands_does_not_replay(tmp_path: Path) -> None:
    """The replay check can fail, and then says where and how: the SDK's text names no event
    for this kind of divergence, so the event is found by replaying prefixes."""
    raw, event_id = tampered_travel()
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(raw))

    [report] = await replay_histories([path])

    assert not report.ok
    divergence = report.divergence
    assert divergence is not None, report.line()
    assert "nondetermin" in divergence.sdk_message.lower()
    assert divergence.event_id == event_id
    assert divergence.event_type == "ActivityTaskScheduled"
    assert divergence.recorded == "activity type 'run_tool_v0'"
    assert divergence.issued == "issues activity type 'run_tool'"
    assert report.workflow_id == "replay-travel"
    assert report.events == len(raw["events"])
    line = report.line()
    assert line.startswith(f"FAIL  {path}: diverged at event {event_id} (ActivityTaskScheduled)")
    assert f"({len(raw['events'])} events, workflow replay-travel)" in line
    assert "\n" not in line


async def test_a_command_of_another_kind_is_named_with_the_sdk_event_id(tmp_path: Path) -> None:
    raw = json.loads((HISTORY_DIR / "travel.json").read_text())
    events = raw["events"]
    index, scheduled = next(
        (i, e)
        for i, e in enumerate(events)
        if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name")
        == "run_tool"
    )
    timer = copy.deepcopy(next(e for e in events if "timerStartedEventAttributes" in e))
    timer["eventId"] = scheduled["eventId"]
    events[index] = timer
    path = tmp_path / "timer.json"
    path.write_text(json.dumps(raw))

    [report] = await replay_histories([path])

    divergence = report.divergence
    assert divergence is not None, report.line()
    assert divergence.event_id == int(scheduled["eventId"])
    assert divergence.event_type == "TimerStarted"
    assert divergence.recorded is not None and divergence.recorded.startswith("timer ")
    assert divergence.issued == "issues an activity command there instead"


def test_the_sdk_sentence_is_put_in_plain_words() -> None:
    history = load_history(HISTORY_DIR / "travel.json")
    event = next(
        e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
    )
    scheduled = event.activity_task_scheduled_event_attributes
    name, activity_id = scheduled.activity_type.name, scheduled.activity_id

    missing = explain(
        "[TMPRL1100] Nondeterminism error: No command scheduled for event "
        f"HistoryEvent(id: {event.event_id}, ActivityTaskScheduled)",
        event,
    )
    assert missing.describe() == (
        f"diverged at event {event.event_id} (ActivityTaskScheduled): the history recorded "
        f"activity {name!r} (activity id {activity_id}), "
        "today's code issues no command at that point"
    )

    unknown = explain("[TMPRL1100] Nondeterminism error: something new", None)
    assert unknown.describe() == "diverged at an unknown event: something new"


def test_load_history_names_the_workflow() -> None:
    history = load_history(HISTORY_DIR / "travel.json")
    assert history.workflow_id == "replay-travel"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("not json at all\n", "not JSON (Expecting value at line 1 column 1)"),
        ('{"workflowId": "x"}', 'not a Temporal history (no "events" list at the top level)'),
        ("[1, 2]", 'not a Temporal history (no "events" list at the top level)'),
        ('{"events": []}', "the history has no events"),
        ('{"events": [1]}', "not a Temporal history (an event is not a JSON object)"),
    ],
    ids=["not-json", "no-events", "a-list", "empty", "bad-event"],
)
def test_what_is_not_a_history_is_said_in_one_line(
    tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(HistoryFileError) as caught:
        load_history(path)
    assert str(caught.value) == reason


def test_a_history_cut_at_the_front_is_refused(tmp_path: Path) -> None:
    raw = json.loads((HISTORY_DIR / "travel.json").read_text())
    raw["events"] = raw["events"][1:]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(HistoryFileError, match="not a complete history"):
        load_history(path)


async def test_unreadable_files_are_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text("hello")
    missing = tmp_path / "missing.json"
    reports = await replay_histories([tmp_path, missing])
    assert [r.line() for r in reports] == [
        f"ERROR  {tmp_path / 'notes.json'}: not JSON (Expecting value at line 1 column 1)",
        f"ERROR  {missing}: cannot read it: No such file or directory",
    ]
    assert not any(r.ok for r in reports)
