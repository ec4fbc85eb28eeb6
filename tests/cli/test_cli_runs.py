"""The commands about runs as a script and a person use them: real `agentloop` processes
against the session's dev server and worker. Every `--json` output must parse as one document
with the fields promised; exit codes follow the one table (`agentloop --help`); `run --follow`
shows a run's progress, down to the command that approves its pending call."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import struct
import termios
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from agentloop.contract import AgentRunInput, AgentRunResult
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import free_port
from agentloop.scripted_provider import (
    Script,
    ScriptedError,
    ScriptedProvider,
    ScriptedToolCall,
    ScriptTurn,
)
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.testing.turns import call as scripted_call
from tests.cli.test_cli import (
    AGENTLOOP,
    Finished,
    agentloop,
    assert_no_traceback,
    process_env,
)
from tests.live import Live, Servers, scripted
from tests.support import (
    read_until,
    register_bare_namespace,
    result_of,
    start_run,
    wait_for_phase,
    waited_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

HISTORIES = Path(__file__).parents[1] / "histories"
TASK = "Is train G1234 late on 2026-12-01, and what is the weather in Shanghai?"
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
WORKSHOP_RUN = (
    "Reserve a seat in ws-101 for p-carol.",
    "--provider",
    "anthropic",
    "--tool",
    "check_workshop",
    "--tool",
    "reserve_seat",
    "--scope",
    "workshops:read",
    "--scope",
    "workshops:write",
)
"""`run` arguments for a run whose write waits for approval (with `--model` the script)."""


@pytest.fixture
def env(client: Client, worker: Settings) -> dict[str, str]:
    """What a user's shell sets to reach the session's server, worker and store."""
    return process_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=worker.task_queue,
        AGENTLOOP_STORE_URL=worker.store_url,
    )


def travel_script(name: str) -> Script:
    return scripted(
        name,
        [
            scripted_call("get_train_status", "call_train", **TRAIN),
            scripted_call("get_weather", "call_weather", **WEATHER),
        ],
        "{{call_train.train_number}} / {{call_weather.city}}",
    )


def workshop_script(name: str) -> Script:
    return scripted(
        name,
        [
            scripted_call("check_workshop", "call_check", workshop_id="ws-101"),
            scripted_call("reserve_seat", "call_reserve", **RESERVE),
        ],
        "Booked: {{call_reserve.reservation_id}}",
    )


def question_script(name: str) -> Script:
    """The model asks which date (`ask_user`), and its answer must be 2026-12-01; then it says
    `Noted: ANSWER`."""
    question = {"question": "Which date do you travel?"}
    return scripted(
        name,
        ScriptTurn(
            tool_calls=[ScriptedToolCall(id="call_ask", name="ask_user", arguments=question)],
            expect_tool_results={"call_ask": "2026-12-01"},
        ),
        "Noted: {{call_ask.answer}}",
    )


def one_document(finished: Finished) -> Any:
    """The single JSON document a `--json` command printed on stdout."""
    assert_no_traceback(finished)
    try:
        return json.loads(finished.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not one JSON document ({exc})\n{finished.explain()}") from None


@asynccontextmanager
async def cli_process(
    *args: str, env: dict[str, str], cwd: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`agentloop ARGS` running, for a test that reads its output as it comes; killed on the
    way out if still running."""
    process = await asyncio.create_subprocess_exec(
        *AGENTLOOP,
        *args,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# --- a completed run, read every way --------------------------------------------------------


async def test_a_completed_run_in_json_and_its_transcript_pairs_every_call_with_its_result(
    servers: Servers, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    servers.provider.register(travel_script(run_id))
    tools = ("--tool", "get_train_status", "--tool", "get_weather")
    started = await agentloop(
        "run", TASK, "--model", run_id, *tools, "--id", run_id, "--json", env=env, cwd=tmp_path
    )
    assert started.returncode == 0, started.explain()
    document = one_document(started)
    assert document["workflow_id"] == run_id
    assert document["url"].endswith(f"/workflows/{run_id}")
    handle = servers.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    assert (await result_of(handle)).status == "completed"

    status = await agentloop("status", run_id, "--json", env=env, cwd=tmp_path)
    assert status.returncode == 0, status.explain()
    snapshot = one_document(status)
    assert (snapshot["workflow_id"], snapshot["execution"], snapshot["outcome"]) == (
        run_id,
        "COMPLETED",
        "completed",
    )
    assert snapshot["exit_code"] == 0 and snapshot["status"] is None
    result = snapshot["result"]
    assert (result["status"], result["output"]) == ("completed", "G1234 / Shanghai")
    assert {c["call_id"]: c["arguments"] for c in result["calls"]} == {
        "call_train": TRAIN,
        "call_weather": WEATHER,
    }

    human = await agentloop("status", run_id, env=env, cwd=tmp_path)
    assert human.returncode == 0, human.explain()
    first, second = human.stdout.splitlines()[:2]
    assert first == f"{run_id}: COMPLETED (completed, exit 0)", human.explain()
    assert second.startswith("status: completed ("), human.explain()
    assert re.search(r"^answer: G1234 / Shanghai$", human.stdout, re.MULTILINE), human.explain()

    as_json = await agentloop("transcript", run_id, "--json", env=env, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.explain()
    events = one_document(as_json)
    assert events[0] == {**events[0], "type": "user_input", "text": TASK}
    proposed = {
        call["call_id"]: (index, call["arguments"])
        for index, event in enumerate(events)
        if event["type"] == "model_output"
        for call in event["tool_calls"]
    }
    answered = {
        event["call_id"]: (index, event)
        for index, event in enumerate(events)
        if event["type"] == "tool_result"
    }
    assert proposed == {"call_train": (1, TRAIN), "call_weather": (1, WEATHER)}
    assert set(answered) == set(proposed)
    for call_id, (index, result_event) in answered.items():
        assert index > proposed[call_id][0] and result_event["status"] == "succeeded"
    assert '"train_number": "G1234"' in answered["call_train"][1]["content"]
    assert events[-1]["type"] == "model_output" and events[-1]["text"] == "G1234 / Shanghai"

    text = await agentloop("transcript", run_id, env=env, cwd=tmp_path)
    assert text.returncode == 0, text.explain()
    assert text.stdout.startswith(f"#1 user input from cli-user\n    {TASK}\n"), text.explain()
    for call_id, tool, arguments in (
        ("call_train", "get_train_status", TRAIN),
        ("call_weather", "get_weather", WEATHER),
    ):
        shown = re.search(rf"^    call {call_id} {tool} (.+)$", text.stdout, re.M)
        assert shown and json.loads(shown[1]) == arguments, text.explain()
        assert re.search(rf"^#\d+ tool result {call_id} {tool}: succeeded$", text.stdout, re.M), (
            text.explain()
        )
    assert text.stdout.rstrip().endswith("    G1234 / Shanghai")

    exported = tmp_path / "history.json"
    written = await agentloop(
        "history", run_id, "-o", str(exported), "--json", env=env, cwd=tmp_path
    )
    assert written.returncode == 0, written.explain()
    where = one_document(written)
    history = json.loads(exported.read_text())
    assert where == {"workflow_id": run_id, "path": str(exported), "events": len(history["events"])}


# --- exit codes of runs that did not complete -----------------------------------------------


@pytest.mark.parametrize(
    ("turns", "max_model_calls", "status", "exit_code", "outcome"),
    [
        pytest.param(
            [
                ScriptTurn(tool_calls=[scripted_call("get_weather", "call_w", **WEATHER)]),
                ScriptTurn(text="never reached: the budget allows one model call"),
            ],
            "1",
            "limit_reached",
            3,
            "stopped",
            id="stopped",
        ),
        pytest.param(
            [ScriptTurn(text="never sent", errors=[ScriptedError(status=401)])],
            "4",
            "failed",
            1,
            "failed",
            id="failed",
        ),
    ],
)
async def test_follow_and_status_exit_with_the_runs_code(
    turns: list[ScriptTurn],
    max_model_calls: str,
    status: str,
    exit_code: int,
    outcome: str,
    env: dict[str, str],
    scripted_provider: ScriptedProvider,
    run_id: str,
    tmp_path: Path,
) -> None:
    scripted_provider.register(Script(name=run_id, turns=turns))
    followed = await agentloop(
        "run",
        "Weather in Shanghai?",
        "--model",
        run_id,
        "--tool",
        "get_weather",
        "--max-model-calls",
        max_model_calls,
        "--id",
        run_id,
        "--follow",
        "--json",
        env=env,
        cwd=tmp_path,
    )
    assert followed.returncode == exit_code, followed.explain()
    ended = one_document(followed)
    assert (ended["outcome"], ended["exit_code"], ended["result"]["status"]) == (
        outcome,
        exit_code,
        status,
    )
    # Under --json what people read goes to stderr, leaving stdout to the document.
    assert f"started {run_id}" in followed.stderr, followed.explain()

    later = await agentloop("status", run_id, "--json", env=env, cwd=tmp_path)
    assert later.returncode == exit_code, later.explain()
    assert one_document(later)["result"] == ended["result"]


async def test_a_run_whose_workflow_failed_has_no_result_exits_1_naming_why(
    live: Live, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    # A `continue_from` naming no run fails the workflow itself: there is no result.
    run_input = AgentRunInput(
        task="x", provider="openai-chat", model="m", continue_from="no-such-run"
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    with pytest.raises(WorkflowFailureError):
        await result_of(handle)

    status = await agentloop("status", run_id, "--json", env=env, cwd=tmp_path)
    assert status.returncode == 1, status.explain()
    snapshot = one_document(status)
    assert (snapshot["execution"], snapshot["outcome"], snapshot["result"]) == (
        "FAILED",
        "failed",
        None,
    )
    assert "continue_from" in snapshot["failure"] and "no-such-run" in snapshot["failure"]

    # Its transcript is read from its state up to the failure: nothing was said yet.
    transcript = await agentloop("transcript", run_id, "--json", env=env, cwd=tmp_path)
    assert transcript.returncode == 0, transcript.explain()
    assert one_document(transcript) == []


# --- a paused run: follow, status, approve --------------------------------------------------


async def test_follow_shows_the_pending_approval_and_its_command_which_approves_it(
    env: dict[str, str], scripted_provider: ScriptedProvider, run_id: str, tmp_path: Path
) -> None:
    scripted_provider.register(workshop_script(run_id))
    argv = ("run", *WORKSHOP_RUN, "--model", run_id, "--id", run_id, "--follow")
    async with cli_process(*argv, env=env, cwd=tmp_path) as following:
        seen: list[str] = []
        shown = await read_until(
            following.stdout, seen, lambda text: "  approve: " in text, "the approve command"
        )
        assert shown.startswith(f"started {run_id}\n"), shown
        assert "turn 1: awaiting_approval\n" in shown
        assert "  call call_check check_workshop: succeeded\n" in shown
        assert re.search(r"^usage: model calls 1 used, \d+ left · tool calls", shown, re.M)
        waiting = re.search(
            r"^waiting for approval: call_reserve reserve_seat (\{.*\}) "
            r"\[(sha256:\w+)\] \(approvers: workshop-lead\)$",
            shown,
            re.M,
        )
        assert waiting and json.loads(waiting[1]) == RESERVE, shown
        digest = waiting[2]

        paused = await agentloop("status", run_id, "--json", env=env, cwd=tmp_path)
        assert paused.returncode == 4, paused.explain()
        snapshot = one_document(paused)
        assert (snapshot["outcome"], snapshot["status"]["phase"]) == (
            "paused",
            "awaiting_approval",
        )
        [pending] = snapshot["status"]["pending_approvals"]
        assert (pending["call_id"], pending["args_digest"]) == ("call_reserve", digest)

        # The command as printed is the one to run.
        command = re.search(r"^  approve: agentloop (.+)$", shown, re.M)
        assert command, shown
        approve_argv = command[1].split()
        assert approve_argv == [
            "approve",
            run_id,
            "call_reserve",
            "--approver",
            "workshop-lead",
            "--digest",
            digest,
        ]
        approved = await agentloop(*approve_argv, "--json", env=env, cwd=tmp_path)
        assert approved.returncode == 0, approved.explain()
        verdict = one_document(approved)
        assert verdict == {
            "workflow_id": run_id,
            "call_id": "call_reserve",
            "approved": True,
            "accepted": True,
            "reason": "",
            "args_digest": digest,
            "tool": None,
            "arguments": None,
            "edited_arguments": None,
        }

        assert following.stdout is not None
        rest = (await waited_for(following.stdout.read(), "--follow's output to end")).decode()
        assert await waited_for(following.wait(), "--follow to exit") == 0, rest
    assert re.search(r"^  call call_reserve: reserve_seat .* -> succeeded", rest, re.M), rest
    assert f"{run_id}: COMPLETED (completed, exit 0)\nstatus: completed" in rest, rest
    assert re.search(r"^answer: Booked: \S+", rest, re.M), rest


async def test_ctrl_c_stops_following_and_exits_with_the_paused_code_the_run_goes_on(
    servers: Servers, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    servers.provider.register(workshop_script(run_id))
    argv = ("run", *WORKSHOP_RUN, "--model", run_id, "--id", run_id, "--follow", "--json")
    async with cli_process(*argv, env=env, cwd=tmp_path) as following:
        await read_until(
            following.stderr, [], lambda text: "  approve: " in text, "the approve command"
        )
        following.send_signal(signal.SIGINT)
        stdout, stderr = await waited_for(following.communicate(), "--follow to exit")
    finished = Finished(following.returncode or 0, stdout.decode(), stderr.decode(), 0)
    assert following.returncode == 4, finished.explain()
    snapshot = one_document(finished)
    assert (snapshot["execution"], snapshot["outcome"], snapshot["exit_code"]) == (
        "RUNNING",
        "paused",
        4,
    )
    assert f"stopped following {run_id}" in finished.stderr
    [pending] = snapshot["status"]["pending_approvals"]

    rejected = await agentloop(
        "reject",
        run_id,
        "call_reserve",
        "--approver",
        "workshop-lead",
        "--digest",
        pending["args_digest"],
        "--reason",
        "not this week",
        "--json",
        env=env,
        cwd=tmp_path,
    )
    assert rejected.returncode == 0, rejected.explain()
    assert one_document(rejected)["accepted"] is True
    handle = servers.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    assert (await result_of(handle)).status == "rejected"
    stopped = await agentloop("status", run_id, env=env, cwd=tmp_path)
    assert stopped.returncode == 3, stopped.explain()
    assert stopped.stdout.startswith(f"{run_id}: COMPLETED (stopped, exit 3)\nstatus: rejected")


async def test_a_refused_decision_is_a_json_verdict_and_exit_1(
    servers: Servers, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    servers.provider.register(workshop_script(run_id))
    started = await agentloop(
        "run", *WORKSHOP_RUN, "--model", run_id, "--id", run_id, env=env, cwd=tmp_path
    )
    assert started.returncode == 0, started.explain()
    handle = servers.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    await wait_for_phase(handle, "awaiting_approval")
    # A running run's transcript comes from its status query's head: up to the calls made.
    transcript = await agentloop("transcript", run_id, "--json", env=env, cwd=tmp_path)
    assert transcript.returncode == 0, transcript.explain()
    last = one_document(transcript)[-1]
    assert last["type"] == "model_output"
    assert [c["call_id"] for c in last["tool_calls"]] == ["call_check", "call_reserve"]

    refused = await agentloop(
        "approve", run_id, "call_reserve", "--approver", "mallory", "--json", env=env, cwd=tmp_path
    )
    assert refused.returncode == 1, refused.explain()
    verdict = one_document(refused)
    assert (verdict["accepted"], verdict["tool"], verdict["arguments"]) == (
        False,
        "reserve_seat",
        RESERVE,
    )
    assert "may not decide" in verdict["reason"] and "may not decide" in refused.stderr

    cancelled = await agentloop(
        "cancel", run_id, "--reason", "test", "--json", env=env, cwd=tmp_path
    )
    assert cancelled.returncode == 0, cancelled.explain()
    assert one_document(cancelled) == {
        "workflow_id": run_id,
        "signal": "cancel",
        "request": {"reason": "test"},
    }
    assert (await result_of(handle)).status == "cancelled"
    status = await agentloop("status", run_id, "--json", env=env, cwd=tmp_path)
    assert status.returncode == 3, status.explain()
    assert one_document(status)["result"]["stop_reason"].endswith("test")


async def test_a_question_shows_the_message_command_which_answers_it(
    servers: Servers, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    servers.provider.register(question_script(run_id))
    started = await agentloop(
        "run", "When?", "--model", run_id, "--id", run_id, env=env, cwd=tmp_path
    )
    assert started.returncode == 0, started.explain()
    handle = servers.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    await wait_for_phase(handle, "awaiting_input")
    paused = await agentloop("status", run_id, env=env, cwd=tmp_path)
    assert paused.returncode == 4, paused.explain()
    command = f"agentloop message {run_id} --sender NAME --text ANSWER"
    assert "Which date do you travel?" in paused.stdout and command in paused.stdout

    sent = await agentloop(
        "message",
        run_id,
        "--sender",
        "traveller",
        "--text",
        "2026-12-01",
        "--json",
        env=env,
        cwd=tmp_path,
    )
    assert sent.returncode == 0, sent.explain()
    assert one_document(sent) == {
        "workflow_id": run_id,
        "signal": "message",
        "request": {"text": "2026-12-01", "sender": "traveller"},
    }
    result = await result_of(handle)
    assert result.status == "completed" and result.output == "Noted: 2026-12-01"


# --- commands a run cannot take ------------------------------------------------------------


async def test_a_second_run_with_a_running_runs_id_is_one_line_and_exit_2(
    client: Client, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    idle = {**env, "AGENT_LOOP_TASK_QUEUE": f"idle-{run_id}"}  # no worker: it stays running
    first = await agentloop(
        "run", "hi", "--model", "travel", "--id", run_id, env=idle, cwd=tmp_path
    )
    assert first.returncode == 0, first.explain()
    try:
        again = await agentloop(
            "run", "hi", "--model", "travel", "--id", run_id, env=idle, cwd=tmp_path
        )
    finally:
        await client.get_workflow_handle(run_id).terminate("test over")
    assert again.returncode == 2, again.explain()
    assert_no_traceback(again)
    [line] = again.stderr.splitlines()
    assert f"a run with id {run_id!r} is already running" in line, again.explain()


async def test_a_store_that_cannot_be_opened_is_named_and_exit_2(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder, not a database")
    for url in (f"sqlite:///{tmp_path}/a-file/store.db", f"sqlite:///{tmp_path}/a-file"):
        finished = await agentloop(
            "transcript", "any-run", env={**env, "AGENTLOOP_STORE_URL": url}, cwd=tmp_path
        )
        assert finished.returncode == 2, finished.explain()
        assert_no_traceback(finished)
        reading, line = finished.stderr.splitlines()
        assert reading.startswith(f"reading the store at {url} (AGENTLOOP_STORE_URL"), reading
        assert line.startswith(f"cannot open the store at {url} (AGENTLOOP_STORE_URL"), line


async def test_transcript_pointed_at_no_store_says_so_and_creates_none(
    env: dict[str, str], tmp_path: Path
) -> None:
    bare = {k: v for k, v in env.items() if k != "AGENTLOOP_STORE_URL"}
    finished = await agentloop("transcript", "any-run", env=bare, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    reading, refused = finished.stderr.splitlines()
    assert reading.startswith("reading the store at sqlite:///.agentloop/store.db"), reading
    assert "no such file .agentloop/store.db" in refused, refused
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
async def bare_namespace(client: Client, run_id: str) -> str:
    """A namespace of the test server without agentloop's search attributes."""
    return await register_bare_namespace(client, run_id)


async def test_run_on_a_namespace_without_the_search_attributes_starts_it_unindexed(
    client: Client, env: dict[str, str], bare_namespace: str, run_id: str, tmp_path: Path
) -> None:
    """As `agentloop.start_run` does (the docker-compose setup registers none)."""
    bare = {**env, "TEMPORAL_NAMESPACE": bare_namespace}
    started = await agentloop(
        "run", "hi", "--model", "travel", "--id", run_id, "--json", env=bare, cwd=tmp_path
    )
    assert started.returncode == 0, started.explain()
    assert one_document(started)["workflow_id"] == run_id
    there = await Client.connect(client.service_client.config.target_host, namespace=bare_namespace)
    handle = there.get_workflow_handle(run_id)
    try:
        description = await handle.describe()
    finally:
        await handle.terminate("test over")
    assert description.status == WorkflowExecutionStatus.RUNNING
    assert not any(
        pair.key.name.startswith("Agent") for pair in description.typed_search_attributes
    )


async def test_a_command_to_a_run_that_ended_says_it_ended_and_how(
    live: Live, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    live.provider.register(scripted(run_id, "done"))
    run_input = AgentRunInput(task="hi", provider="openai-chat", model=run_id)
    handle = await start_run(live.client, live.worker, run_id, run_input)
    assert (await result_of(handle)).status == "completed"

    commands = [
        ("approve", run_id, "call_a", "--approver", "lead"),
        ("approve", run_id, "call_a", "--approver", "lead", "--digest", "sha256:seen"),
        ("message", run_id, "--sender", "dana", "--text", "hello"),
        ("cancel", run_id),
    ]
    ended = await asyncio.gather(*(agentloop(*c, env=env, cwd=tmp_path) for c in commands))
    for finished in ended:
        assert finished.returncode == 1, finished.explain()
        assert_no_traceback(finished)
        [line] = finished.stderr.splitlines()
        assert line.startswith(f"run {run_id!r} has ended (completed): it takes no "), line
        assert f"agentloop status {run_id}" in line


# --- replay ---------------------------------------------------------------------------------


async def test_replay_json_has_one_entry_per_history(tmp_path: Path) -> None:
    env = process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")  # replay needs no server
    good = sorted(HISTORIES.glob("*.json"))
    replayed = await agentloop("replay", *map(str, good[:2]), "--json", env=env, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.explain()
    entries = one_document(replayed)
    assert [e["path"] for e in entries] == [str(p) for p in good[:2]]
    assert all(e["ok"] and e["readable"] and e["events"] > 0 for e in entries), entries

    notes = tmp_path / "notes.json"
    notes.write_text("not a history\n")
    failed = await agentloop("replay", str(notes), "--json", env=env, cwd=tmp_path)
    assert failed.returncode == 1, failed.explain()
    [entry] = one_document(failed)
    assert (entry["ok"], entry["readable"]) == (False, False)
    assert "not JSON" in entry["problem"]


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


async def test_follow_on_a_terminal_prints_the_command_once_whole_and_counts_the_wait(
    env: dict[str, str], scripted_provider: ScriptedProvider, run_id: str, tmp_path: Path
) -> None:
    """`run --follow` under a pseudo-terminal narrower than the approve command: the command
    is printed once, on one line, outside the panel; the panel counts the time waited and
    the approval timeout down, says the deadline is paused, and gives way to the result."""
    scripted_provider.register(workshop_script(run_id))
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
    argv = ("run", *WORKSHOP_RUN, "--model", run_id, "--id", run_id, "--follow")
    process = await asyncio.create_subprocess_exec(
        *AGENTLOOP,
        *argv,
        env={**env, "TERM": "xterm-256color", "COLUMNS": "80"},
        cwd=tmp_path,
        stdin=child,
        stdout=child,
        stderr=child,
    )
    os.close(child)
    received = bytearray()
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def read() -> None:
        try:
            received.extend(os.read(main, 65536))
        except OSError:  # the child side closed: the process is gone
            loop.remove_reader(main)
        changed.set()

    loop.add_reader(main, read)

    def text() -> str:
        return ANSI.sub("", received.decode(errors="replace")).replace("\r", "")

    async def until(done: Callable[[str], bool], what: str) -> str:
        deadline = loop.time() + CEILING_SECONDS
        while not done(text()):
            if loop.time() > deadline:
                raise AssertionError(
                    f"gave up after {CEILING_SECONDS:g} s waiting for {what} in:\n{text()}"
                )
            changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 1)
        return text()

    def waited(shown: str) -> list[int]:
        return [int(s) for s in re.findall(r"waiting (\d+) s; approval timeout in", shown)]

    try:
        await until(lambda t: "  reject:  agentloop reject" in t, "approve command")
        await until(lambda t: max(waited(t), default=0) >= 2, "the time waited moving")
        shown = text()
        approve = re.findall(r"^  approve: agentloop (approve .*)$", shown, re.M)
        assert len(approve) == 1, shown  # once, whole (wider than the terminal), one line
        approve_argv = approve[0].split()
        assert approve_argv[:5] == [
            "approve",
            run_id,
            "call_reserve",
            "--approver",
            "workshop-lead",
        ]
        assert len(" ".join(approve_argv)) > 80
        assert shown.count("agentloop approve") == 1, shown  # the panel only names the call
        assert "(commands above)" in shown
        assert len(set(waited(shown))) >= 2, shown
        assert re.search(r"approval timeout in \d+ (min|h) ", shown), shown
        approved = await agentloop(*approve_argv, env=env, cwd=tmp_path)
        assert approved.returncode == 0, approved.explain()
        assert await waited_for(process.wait(), "the command to exit") == 0, text()
        await until(lambda t: "status: completed" in t, "the result")
    finally:
        loop.remove_reader(main)
        os.close(main)
        if process.returncode is None:
            process.kill()
            await process.wait()
    final = text()
    assert f"{run_id}: COMPLETED (completed, exit 0)\nstatus: completed" in final, final
