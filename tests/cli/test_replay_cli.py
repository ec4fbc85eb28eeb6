"""`agentloop history` and `agentloop replay` as a user runs them: real OS processes, no mocks.

A run is made on the session's dev server and worker, exported with `agentloop history` (and
with the Temporal CLI), and replayed by `agentloop replay` in processes that cannot reach any
Temporal server: replay needs nothing but the files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentloop.runtime.dev_server import free_port, temporal_binary
from agentloop.testing.turns import call as scripted_call
from tests.cli.test_cli import agentloop, assert_no_traceback, process_env, run_process
from tests.live import Live, scripted
from tests.loop.test_replay import HISTORY_DIR, tampered_travel

pytestmark = pytest.mark.integration


def offline_env() -> dict[str, str]:
    """An environment whose TEMPORAL_ADDRESS nobody listens on."""
    return process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")


async def test_an_exported_run_replays(live: Live, run_id: str, tmp_path: Path) -> None:
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("get_weather", "call_weather", city="Shanghai", date="2026-12-01")],
            "Cloudy in Shanghai.",
        )
    )
    address = live.client.service_client.config.target_host
    env = process_env(TEMPORAL_ADDRESS=address, AGENT_LOOP_TASK_QUEUE=live.worker.task_queue)
    ran = await agentloop(
        "run",
        "What is the weather in Shanghai on 2026-12-01?",
        "--model",
        run_id,
        "--tool",
        "get_weather",
        "--id",
        run_id,
        "--follow",
        env=env,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.explain()
    assert "status: completed" in ran.stdout, ran.explain()

    exported = tmp_path / "run.json"
    written = await agentloop("history", run_id, "-o", str(exported), env=env, cwd=tmp_path)
    assert written.returncode == 0, written.explain()
    events = json.loads(exported.read_text())["events"]
    assert written.stdout.strip() == f"wrote {exported}: {len(events)} events of {run_id}"

    printed = await agentloop("history", run_id, env=env, cwd=tmp_path)
    assert printed.returncode == 0, printed.explain()
    assert json.loads(printed.stdout) == json.loads(exported.read_text())

    shown = await run_process(
        temporal_binary(),
        "workflow",
        "show",
        "-w",
        run_id,
        "--address",
        address,
        "--output",
        "json",
        env=process_env(),
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.explain()
    from_temporal_cli = tmp_path / "shown.json"
    from_temporal_cli.write_text(shown.stdout)
    shown_events = len(json.loads(shown.stdout)["events"])

    replayed = await agentloop(
        "replay", str(exported), str(from_temporal_cli), env=offline_env(), cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.explain()
    assert_no_traceback(replayed)
    assert replayed.stdout.splitlines() == [
        f"ok  {exported}  ({len(events)} events, workflow {run_id})",
        f"ok  {from_temporal_cli}  ({shown_events} events, workflow {run_id})",
    ], replayed.explain()


async def test_the_stored_histories_replay(tmp_path: Path) -> None:
    stored = sorted(HISTORY_DIR.glob("*.json"))
    replayed = await agentloop("replay", str(HISTORY_DIR), env=offline_env(), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.explain()
    lines = replayed.stdout.splitlines()
    assert len(lines) == len(stored), replayed.explain()
    for line, path in zip(lines, stored, strict=True):
        assert line.startswith(f"ok  {path}  ("), replayed.explain()


async def test_a_tampered_history_fails_naming_what_diverged(tmp_path: Path) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    shutil.copy(HISTORY_DIR / "travel.json", folder / "travel.json")
    raw, event_id = tampered_travel()
    (folder / "travel_v0.json").write_text(json.dumps(raw))

    replayed = await agentloop("replay", str(folder), env=offline_env(), cwd=tmp_path)

    assert replayed.returncode == 1, replayed.explain()
    assert_no_traceback(replayed)
    good, bad = replayed.stdout.splitlines()
    assert good.startswith(f"ok  {folder / 'travel.json'}  ("), replayed.explain()
    assert bad.startswith(
        f"FAIL  {folder / 'travel_v0.json'}: diverged at event {event_id} "
        "(ActivityTaskScheduled): the history recorded activity type 'run_tool_v0', "
        "today's code issues activity type 'run_tool'"
    ), replayed.explain()
    assert f"({len(raw['events'])} events, workflow replay-travel)" in bad
    assert "Nondeterminism error" in bad  # the SDK's own sentence, for searching


async def test_a_file_that_is_not_json_is_a_one_line_message(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("these are not the events you are looking for\n")
    replayed = await agentloop("replay", str(notes), env=offline_env(), cwd=tmp_path)
    assert replayed.returncode != 0, replayed.explain()
    assert_no_traceback(replayed)
    output = (replayed.stdout + replayed.stderr).strip()
    assert "\n" not in output, replayed.explain()
    assert str(notes) in output and "not JSON" in output, replayed.explain()


async def test_history_of_an_unknown_run_says_not_found(live: Live, tmp_path: Path) -> None:
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    finished = await agentloop("history", "no-such-run", "-o", "x.json", env=env, cwd=tmp_path)
    assert finished.returncode != 0, finished.explain()
    assert_no_traceback(finished)
    assert "not found" in finished.stderr and "no-such-run" in finished.stderr
    assert "\n" not in finished.stderr.strip(), finished.explain()
    assert not (tmp_path / "x.json").exists()
