"""The `agentloop` command as a user runs it: real OS processes, no mocks.

`agentloop dev` is started, used by `run`/`status` processes and by the Temporal CLI, then
stopped with Ctrl-C (SIGINT); `cancel` and the error messages are checked against the session's
dev server; the demo runs end to end. Every wait is on a real condition (a line of output, a
process exit, the example service having seen a request) and is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from temporalio.client import Client

from agentloop.contract import AgentRunResult
from agentloop.runtime.dev_server import free_port, temporal_binary
from agentloop.scripted_provider import ScriptedToolCall
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.testing.turns import call as scripted_call
from tests.live import Live, scripted
from tests.support import (
    STOP_SECONDS,
    read_until,
    result_of,
    wait_for_phase,
    wait_until,
    waited_for,
)

pytestmark = pytest.mark.integration

AGENTLOOP = (sys.executable, "-m", "agentloop.cli")
CONSOLE_SCRIPT = Path(sys.executable).parent / "agentloop"
DEV_READY = "agentloop dev is up"
DEV_BANNER_END = "Ctrl-C stops everything."
DEV_STOPPED = "agentloop dev stopped"
TRAVEL_TASK = "Is train G1234 late on 2026-12-01, and what is the weather in Shanghai?"

# Variables of the caller's shell that would change what the processes under test do.
_SCRUBBED = (
    "AGENTLOOP_OTEL",
    "AGENTLOOP_WORKFLOW_SANDBOX",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "AGENT_LOOP_TASK_QUEUE",
    "AGENTLOOP_STORE_URL",
    "AGENTLOOP_EXAMPLE_SERVICE_URL",
    "AGENTLOOP_UI_URL",
    "AGENTLOOP_CODEC_KEYS",
)


def process_env(**overrides: str) -> dict[str, str]:
    """This environment without provider keys and agentloop's settings, plus `overrides`."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    return {**env, **overrides}


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def explain(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


async def run_process(
    *argv: str | Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = CEILING_SECONDS,
) -> Finished:
    """Run a command to its exit (bounded) and collect its output."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"gave up after {timeout:g} s waiting for {argv} to exit") from None
    assert process.returncode is not None
    return Finished(
        process.returncode, stdout.decode(), stderr.decode(), time.monotonic() - started
    )


async def agentloop(*args: str, env: Mapping[str, str], cwd: Path | None = None) -> Finished:
    return await run_process(*AGENTLOOP, *args, env=env, cwd=cwd)


def assert_no_traceback(finished: Finished) -> None:
    assert "Traceback" not in finished.stderr, finished.explain()
    assert "Traceback" not in finished.stdout, finished.explain()


def port_is_listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def port_can_be_bound(port: int) -> bool:
    """Whether a new server (which sets SO_REUSEADDR, as Temporal's does) could listen here."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
        return True


# --- agentloop dev ---------------------------------------------------------------------


@dataclass
class DevProcess:
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @property
    def output(self) -> str:
        return "".join(self.lines)


@asynccontextmanager
async def dev_process(
    argv: list[str], env: Mapping[str, str], cwd: Path
) -> AsyncIterator[DevProcess]:
    """`agentloop dev` running until its banner is complete; stopped (SIGTERM) on the way out
    if the test did not stop it."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    dev = DevProcess(process)
    assert process.stdout is not None
    stdout = process.stdout
    try:
        banner = "agentloop dev's banner"
        await read_until(stdout, dev.lines, lambda text: DEV_BANNER_END in text, banner)

        async def drain() -> None:
            # Keep reading so the pipe never fills; ends at EOF, when every writer is gone.
            while line := await stdout.readline():
                dev.lines.append(line.decode())

        dev.reader = asyncio.ensure_future(drain())
        yield dev
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)  # handled like Ctrl-C: the stack stops in order
            try:
                await asyncio.wait_for(process.wait(), STOP_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()
        if dev.reader is not None:
            dev.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await dev.reader


async def test_agentloop_dev_serves_runs_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port, ui_port, example_port, provider_port, inbox_port, metrics_port = (
        free_port() for _ in range(6)
    )
    argv = [
        str(CONSOLE_SCRIPT) if CONSOLE_SCRIPT.exists() else sys.executable,
        *([] if CONSOLE_SCRIPT.exists() else ["-m", "agentloop.cli"]),
        "dev",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--example-port",
        str(example_port),
        "--provider-port",
        str(provider_port),
        "--inbox-port",
        str(inbox_port),
        "--metrics-port",
        str(metrics_port),
        "--state-dir",
        str(tmp_path / "state"),
    ]
    started = time.monotonic()
    # `agentloop dev` is never production: a production setting left in the environment
    # demands no keys of its worker.
    dev_env = process_env(AGENTLOOP_ENV="production")
    async with dev_process(argv, dev_env, cwd=tmp_path) as dev:
        up_seconds = time.monotonic() - started
        assert DEV_READY in dev.output
        assert f"127.0.0.1:{port}" in dev.output
        assert f"http://localhost:{ui_port}" in dev.output
        assert "(scripted provider)" in dev.output  # no provider key in its environment
        inbox = f"http://127.0.0.1:{inbox_port}"
        assert f"inbox        {inbox} (local mode" in dev.output, dev.output
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        assert f"metrics      {metrics}" in dev.output, dev.output

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(f"http://127.0.0.1:{ui_port}/") as response:
                assert response.status == 200
            async with http.get(metrics) as response:  # the dev worker's, Temporal's included
                assert "temporal_worker_task_slots_available" in await response.text()
            # The inbox in local mode: a new browser is asked its name first.
            async with http.get(inbox + "/", allow_redirects=False) as response:
                assert (response.status, response.headers["location"]) == (303, "/whoami")

        env = process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{port}")
        run_id = f"cli-dev-{os.getpid()}-{int(time.time() * 1000)}"
        ran = await agentloop(
            "run",
            TRAVEL_TASK,
            "--model",
            "travel",
            "--tool",
            "get_train_status",
            "--tool",
            "get_weather",
            "--id",
            run_id,
            "--follow",
            env=env,
            cwd=tmp_path,
        )
        assert ran.returncode == 0, ran.explain()
        assert f"started {run_id}" in ran.stdout
        assert "status: completed" in ran.stdout, ran.explain()
        for call_id in ("call_train", "call_weather"):
            assert any(
                call_id in line and "succeeded" in line for line in ran.stdout.splitlines()
            ), ran.explain()
        assert re.search(r"^answer: .*G1234.*Shanghai", ran.stdout, re.MULTILINE), ran.explain()

        status = await agentloop("status", run_id, "--json", env=env, cwd=tmp_path)
        assert status.returncode == 0, status.explain()
        snapshot = json.loads(status.stdout)
        assert (snapshot["execution"], snapshot["outcome"]) == ("COMPLETED", "completed")
        assert {c["call_id"]: c["status"] for c in snapshot["result"]["calls"]} == {
            "call_train": "succeeded",
            "call_weather": "succeeded",
        }

        # The run in the inbox, for a browser that gave its name.
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.get(
                f"{inbox}/runs/{run_id}", headers={"cookie": "agentloop_inbox_user=dev-tester"}
            ) as response,
        ):
            assert response.status == 200
            page = await response.text()
        assert run_id in page and 'class="status completed"' in page, page

        listed = await run_process(
            temporal_binary(),
            "workflow",
            "list",
            "--address",
            f"127.0.0.1:{port}",
            env=process_env(),
            cwd=tmp_path,
        )
        assert listed.returncode == 0, listed.explain()
        assert run_id in listed.stdout, listed.explain()

        stop_started = time.monotonic()
        dev.process.send_signal(signal.SIGINT)
        returncode = await waited_for(dev.process.wait(), "agentloop dev to stop on Ctrl-C")
        stop_seconds = time.monotonic() - stop_started
        assert dev.reader is not None
        # EOF on the shared stdout: the temporal server child, which wrote there too, is gone.
        await waited_for(dev.reader, "the end of agentloop dev's output")

    assert returncode == 0, dev.output
    assert DEV_STOPPED in dev.output
    assert "Traceback" not in dev.output, dev.output
    assert not port_is_listening(port)
    assert port_can_be_bound(port)
    assert not port_is_listening(inbox_port)
    print(
        f"dev up in {up_seconds:.1f} s, run --follow {ran.seconds:.1f} s, stop {stop_seconds:.1f} s"
    )


def dev_argv(state_dir: Path, *extra: str) -> tuple[list[str], int]:
    """`agentloop dev` on free ports, its state in `state_dir`, and `extra` arguments; and the
    port of its Temporal frontend."""
    port, ui_port, example_port, provider_port, inbox_port, metrics_port = (
        free_port() for _ in range(6)
    )
    argv = [
        str(CONSOLE_SCRIPT),
        "dev",
        *("--port", str(port), "--ui-port", str(ui_port)),
        *("--example-port", str(example_port), "--provider-port", str(provider_port)),
        *("--inbox-port", str(inbox_port), "--metrics-port", str(metrics_port)),
        *("--state-dir", str(state_dir)),
        *extra,
    ]
    return argv, port


async def held_http_connection(port: int) -> asyncio.StreamWriter:
    """A browser's keep-alive connection to the server on `port`, once it answered a request;
    open until the caller closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert head.startswith(b"HTTP/1.1 "), (port, head)
    return writer


async def test_dev_stopped_with_browser_connections_open_starts_again_at_once(
    tmp_path: Path,
) -> None:
    """The most common thing a newcomer does: Ctrl-C, then `agentloop dev` again, a browser
    still connected to the inbox, the UI and the example service. The stopped servers closed
    their side; the connections linger on the ports, which the servers (reusing the address)
    do not mind, and neither does the check before them."""
    argv, _ = dev_argv(tmp_path / "state")
    browsed = [
        int(argv[argv.index(flag) + 1]) for flag in ("--ui-port", "--example-port", "--inbox-port")
    ]
    held: list[asyncio.StreamWriter] = []
    try:
        async with dev_process(argv, process_env(), cwd=tmp_path) as first:
            held += [await held_http_connection(port) for port in browsed]
            first.process.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(first.process.wait(), 30) == 0, first.output
        assert DEV_STOPPED in first.output, first.output

        async with dev_process(argv, process_env(), cwd=tmp_path) as again:  # on the same ports
            assert DEV_READY in again.output
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
                http.get(f"http://127.0.0.1:{browsed[-1]}/", allow_redirects=False) as inbox,
            ):
                assert (inbox.status, inbox.headers["location"]) == (303, "/whoami")
    finally:
        for writer in held:
            writer.close()


async def test_dev_takes_provider_keys_and_the_log_level_from_the_config_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "agentloop.toml"
    config.write_text(
        'openai_api_key = "sk-from-the-file-0001"\n'
        'anthropic_api_key = "sk-ant-from-the-file-0002"\n'
        'log_level = "WARNING"\n'
    )
    argv, _ = dev_argv(tmp_path / "state")
    async with dev_process(argv, process_env(AGENTLOOP_CONFIG=str(config)), cwd=tmp_path) as dev:
        # Both keys set: the real APIs, no scripted provider.
        assert "OpenAI: the OpenAI API; Anthropic: the Anthropic API" in dev.output, dev.output
        assert "(scripted provider)" not in dev.output
        dev.process.send_signal(signal.SIGINT)
        stopped = await waited_for(dev.process.wait(), "agentloop dev to stop on Ctrl-C")
        assert stopped == 0, dev.output
        assert dev.reader is not None
        await waited_for(dev.reader, "the end of agentloop dev's output")
    assert DEV_STOPPED in dev.output
    # At WARNING the worker's shutdown, logged at INFO, is not shown.
    assert "Beginning worker shutdown" not in dev.output, dev.output
    assert "from-the-file" not in dev.output


ROOT = Path(__file__).parents[2]
GETTING_STARTED = ROOT / "docs" / "getting-started.md"


def first_tool() -> tuple[str, list[list[str]]]:
    """Getting started's "The first tool of your own": `my_tools.py`, and its shell commands,
    each as its words (continuation lines joined, comments dropped)."""
    text = GETTING_STARTED.read_text(encoding="utf-8")
    section = text.split("\n## The first tool of your own\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    module = re.search(r"```python\n# my_tools.py\n(.*?)```", section, re.DOTALL)
    shell = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert module and shell, "the quickstart's my_tools.py or its commands are gone"
    lines = shell.group(1).replace("\\\n", " ").splitlines()
    commands = [shlex.split(line, comments=True) for line in lines]
    return module.group(1), [words for words in commands if words]


def split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """`NAME=value ... command args` as the variables and the command (a PYTHONPATH put
    before this process's own)."""
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, value = words[0].split("=", 1)
        env[name] = python_path(value) if name == "PYTHONPATH" else value
        words = words[1:]
    return env, words


async def test_the_first_tool_of_getting_started_runs_as_written(tmp_path: Path) -> None:
    """`my_tools.py` and the commands of "The first tool of your own", as the getting-started
    page has them: only the ports are free ones instead of the defaults, `python`/`agentloop`
    this environment's."""
    module, commands = first_tool()
    assert len(commands) == 3, commands
    (service_env, service), (dev_env, dev_words), (run_env, run_words) = map(split_env, commands)
    assert service[0] == "python" and dev_words[:2] == ["agentloop", "dev"], commands
    assert run_words[:2] == ["agentloop", "run"], commands

    orders_port = free_port()
    default_url = "http://127.0.0.1:8790"
    assert default_url in module, module
    (tmp_path / "my_tools.py").write_text(
        module.replace(default_url, f"http://127.0.0.1:{orders_port}")
    )
    # The service's path is the repository's; the rest runs where my_tools.py is.
    service_process = await asyncio.create_subprocess_exec(
        sys.executable,
        *service[1:],
        "--port",
        str(orders_port),
        env={**process_env(), **service_env},
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await wait_until(lambda: port_is_listening(orders_port), "the orders service")
        argv, port = dev_argv(tmp_path / "state", *dev_words[2:])
        async with dev_process(argv, process_env(**dev_env), cwd=tmp_path) as dev:
            # Each tool with its effect, and whether a write's lost answer can be looked up.
            assert re.search(r"^ +read_order +read$", dev.output, re.MULTILINE), dev.output
            assert re.search(r"^ +send_reply +write +looked up$", dev.output, re.MULTILINE)
            env = process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{port}", **run_env)
            ran = await agentloop(*run_words[1:], env=env, cwd=tmp_path)
    finally:
        service_process.kill()
        await service_process.wait()
    assert ran.returncode == 0, ran.explain()
    assert_no_traceback(ran)
    assert "status: completed" in ran.stdout, ran.explain()
    assert any("call_order" in line and "succeeded" in line for line in ran.stdout.splitlines()), (
        ran.explain()
    )
    assert re.search(r"^answer: Order A-17 of acme: 40.0 EUR", ran.stdout, re.MULTILINE), (
        ran.explain()
    )


def write_walkthrough() -> tuple[str, str, list[list[str]]]:
    """Getting started's "A write, its approval, its script": `my_tools.py`'s continuation, the
    script file, and the shell commands (each as its words)."""
    text = GETTING_STARTED.read_text(encoding="utf-8")
    section = text.split("\n## A write, its approval, its script\n", 1)[1]
    module = re.search(r"```python\n# my_tools.py, continued\n(.*?)```", section, re.DOTALL)
    script = re.search(r"In `scripts/refund-a17.toml`:\n\n```toml\n(.*?)```", section, re.DOTALL)
    shell = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert module and script and shell, "the walkthrough's module, script or commands are gone"
    lines = shell.group(1).replace("\\\n", " ").splitlines()
    commands = [shlex.split(line, comments=True) for line in lines]
    return module.group(1), script.group(1), [words for words in commands if words]


def exported(output: str) -> dict[str, str]:
    """The variables of the `export ...` line `agentloop dev` prints for a second shell."""
    [line] = [line for line in output.splitlines() if line.startswith("export ")]
    return dict(word.split("=", 1) for word in shlex.split(line)[1:])


async def test_the_write_walkthrough_of_getting_started_runs_as_written_from_a_second_shell(
    tmp_path: Path,
) -> None:
    """The quickstart's `my_tools.py` with the walkthrough's refund, its script file in
    `scripts/`, and its commands as written, in a second process that knows the stack only
    from the `export` line `agentloop dev` printed: the run waits for finance, is approved,
    completes, and the service made exactly one refund."""
    quickstart, _ = first_tool()
    module, script, commands = write_walkthrough()
    (dev_env, dev_words), *client_commands = map(split_env, commands)
    assert [words[:2] for _, words in [(dev_env, dev_words), *client_commands]] == [
        ["agentloop", "dev"],
        ["agentloop", "run"],
        ["agentloop", "status"],
        ["agentloop", "approve"],
        ["agentloop", "status"],
    ], commands
    orders_port = free_port()
    default_url = "http://127.0.0.1:8790"
    (tmp_path / "my_tools.py").write_text(
        (quickstart + module).replace(default_url, f"http://127.0.0.1:{orders_port}")
    )
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "refund-a17.toml").write_text(script)
    service_process = await asyncio.create_subprocess_exec(
        sys.executable,
        "examples/refunds/refunds_service.py",
        "--port",
        str(orders_port),
        env=process_env(),
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await wait_until(lambda: port_is_listening(orders_port), "the orders service")
        argv, port = dev_argv(tmp_path / "state", *dev_words[2:])
        async with dev_process(argv, process_env(**dev_env), cwd=tmp_path) as dev:
            assert re.search(r"^ +refund +write +looked up$", dev.output, re.MULTILINE)
            assert f"and the files of {tmp_path / 'scripts'}" in dev.output, dev.output
            assert "refund-a17" in dev.output
            second = exported(dev.output)
            assert second["TEMPORAL_ADDRESS"] == f"127.0.0.1:{port}", dev.output
            store = tmp_path / "state" / "store.db"
            assert second["AGENTLOOP_STORE_URL"] == f"sqlite:///{store.resolve()}"
            assert second["OPENAI_API_KEY"] == "scripted", second
            # Another folder: only the exported variables tell it where the stack is.
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir()
            env = process_env(**second)

            async def settled(words: list[str], command_env: dict[str, str]) -> Finished:
                """`agentloop status` asked again while it says the run is still running
                (exit 5): a busy machine may not have got it to its next stop yet."""
                ran = await agentloop(*words[1:], env={**env, **command_env}, cwd=elsewhere)
                deadline = time.monotonic() + CEILING_SECONDS
                while ran.returncode == 5 and time.monotonic() < deadline:
                    ran = await agentloop(*words[1:], env={**env, **command_env}, cwd=elsewhere)
                return ran

            finished = []
            for command_env, words in client_commands:
                if words[1] == "status":
                    ran = await settled(words, command_env)
                else:
                    ran = await agentloop(*words[1:], env={**env, **command_env}, cwd=elsewhere)
                finished.append(ran)
                if words[1] == "status" and len(finished) == 2:
                    assert ran.returncode == 4, ran.explain()  # awaiting approval
                    assert "agentloop approve refund-a17 call_refund" in ran.stdout
            started, _, approved, ended = finished
            assert started.returncode == 0 and approved.returncode == 0, approved.explain()
            transcript = await agentloop("transcript", "refund-a17", env=env, cwd=elsewhere)
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{orders_port}/_stats") as response,
            ):
                stats = await response.json()
    finally:
        service_process.kill()
        await service_process.wait()
    assert ended.returncode == 0, ended.explain()
    assert "status: completed" in ended.stdout
    assert re.search(r"^answer: Refunded 40.0 EUR of order A-17 \(R-1\)", ended.stdout, re.M)
    assert stats == {"created": 1}
    assert transcript.returncode == 0, transcript.explain()
    assert "tool result call_refund refund: succeeded" in transcript.stdout, transcript.explain()
    assert f"reading the store at sqlite:///{store.resolve()}" in transcript.stderr
    assert not (elsewhere / ".agentloop").exists()


async def test_dev_with_a_scripts_folder_that_is_not_there_exits_2_naming_it(
    tmp_path: Path,
) -> None:
    argv, port = dev_argv(tmp_path / "state", "--scripts", str(tmp_path / "nowhere"))
    finished = await run_process(*argv, env=process_env(), cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert f"--scripts {tmp_path / 'nowhere'}: no such folder" in finished.stderr
    assert not port_is_listening(port)  # refused before anything started


async def test_a_run_without_model_against_the_scripted_provider_is_refused(
    tmp_path: Path,
) -> None:
    # Nobody listens on TEMPORAL_ADDRESS: refused before Temporal is asked.
    env = process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    finished = await agentloop("run", "Refund order A-17", env=env, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    [line] = finished.stderr.splitlines()
    assert "--model is needed" in line and "OPENAI_API_KEY" in line, line
    assert "agentloop dev --scripts DIR" in line


# --- agentloop cancel ------------------------------------------------------------------


async def test_cancel_stops_a_run_started_from_the_command_line(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [
                scripted_call(
                    "get_train_status", "call_slow", train_number="G1234", date="2026-12-01"
                )
            ],
            "never reached",
        )
    )
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    trains_before = live.service.stats()["counts"]["trains"]
    live.service.set_delay("trains", 5_000)
    try:
        started = await agentloop(
            "run",
            "Is my train late?",
            "--model",
            run_id,
            "--tool",
            "get_train_status",
            "--id",
            run_id,
            env=env,
            cwd=tmp_path,
        )
        assert started.returncode == 0, started.explain()
        first, link = started.stdout.splitlines()[:2]
        assert first == f"started {run_id}"
        assert re.fullmatch(rf"\s*https?://\S+/workflows/{re.escape(run_id)}", link), link

        # Cancel while the train read is in flight at the service.
        await wait_until(
            lambda: live.service.stats()["counts"]["trains"] > trains_before,
            "the train read to reach the example service",
        )
        cancelled = await agentloop("cancel", run_id, "--reason", "test", env=env, cwd=tmp_path)
        assert cancelled.returncode == 0, cancelled.explain()
        assert cancelled.stdout == f"cancel requested for {run_id}\n", cancelled.explain()

        handle = live.client.get_workflow_handle(run_id, result_type=AgentRunResult)
        result = await result_of(handle)
    finally:
        live.service.set_delay("trains", 0)
    assert result.status == "cancelled", result.stop_reason
    assert "test" in result.stop_reason


async def test_approve_and_resolve_from_the_command_line(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    live.service.reset()
    reply = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refund sent."}
    live.provider.register(
        scripted(
            run_id,
            [ScriptedToolCall(id="call_a", name="send_reply", arguments=reply)],
            "done",
        )
    )
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    # The write commits but its answer is lost, and the lookup cannot say: an operator must.
    live.service.inject_fault("support.reply", "commit_then_drop")
    live.service.inject_fault("support.operation", "unavailable", count=10)
    started = await agentloop(
        "run",
        "Answer T-1001",
        "--model",
        run_id,
        "--tool",
        "send_reply",
        "--scope",
        "tickets:write",
        "--id",
        run_id,
        env=env,
        cwd=tmp_path,
    )
    assert started.returncode == 0, started.explain()
    handle = live.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    await wait_for_phase(handle, "awaiting_approval")

    refused = await agentloop(
        "approve",
        run_id,
        "call_a",
        "--approver",
        "ops",
        "--digest",
        "sha256:stale",
        env=env,
        cwd=tmp_path,
    )
    assert refused.returncode == 1 and "stale" in refused.stderr, refused.explain()
    approved = await agentloop(
        "approve", run_id, "call_a", "--approver", "ops", env=env, cwd=tmp_path
    )
    assert approved.returncode == 0, approved.explain()
    assert "send_reply" in approved.stdout and "dana@example.com" in approved.stdout
    assert "approved: call_a" in approved.stdout

    await wait_for_phase(handle, "awaiting_reconciliation")
    resolved = await agentloop(
        "resolve",
        run_id,
        "call_a",
        "--outcome",
        "applied",
        "--operator",
        "ops",
        "--note",
        "seen in the desk",
        "--json",
        env=env,
        cwd=tmp_path,
    )
    assert resolved.returncode == 0, resolved.explain()
    assert json.loads(resolved.stdout) == {
        "workflow_id": run_id,
        "signal": "resolve",
        "request": {
            "call_id": "call_a",
            "outcome": "applied",
            "operator": "ops",
            "note": "seen in the desk",
        },
    }
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert {c.call_id: c.status for c in result.calls} == {"call_a": "confirmed_after_query"}
    assert live.service.records()["replies"] == 1
    assert live.service.stats()["counts"]["support.reply"] == 1


# --- agentloop keys --------------------------------------------------------------------


async def test_keys_prints_the_public_key_as_json(tmp_path: Path) -> None:
    made = await agentloop(
        "keys", "new", "lead", "--dir", str(tmp_path), "--json", env=process_env()
    )
    assert made.returncode == 0, made.explain()
    document = json.loads(made.stdout)
    assert document["approver"] == "lead"
    assert document["public_key"].startswith("ed25519:")
    assert document["line"] == f"lead={document['public_key']}"
    assert document["key_file"] == str(tmp_path / "lead.pem")
    shown = await agentloop(
        "keys", "public", "lead", str(tmp_path / "lead.pem"), "--json", env=process_env()
    )
    assert shown.returncode == 0, shown.explain()
    assert json.loads(shown.stdout) == document


# --- errors are messages ---------------------------------------------------------------


async def test_bad_run_input_is_a_one_paragraph_message(tmp_path: Path) -> None:
    # Nobody listens on TEMPORAL_ADDRESS: the input is judged before Temporal is reached.
    env = process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    finished = await agentloop("run", "x", "--provider", "nope", env=env, cwd=tmp_path)
    assert finished.returncode != 0, finished.explain()
    assert_no_traceback(finished)
    message = finished.stderr.strip()
    assert "provider" in message, finished.explain()
    assert "nope" in message
    assert "\n\n" not in message and "Temporal" not in message, finished.explain()


async def test_unreachable_temporal_is_reported_at_the_refused_connection(tmp_path: Path) -> None:
    env = process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    finished = await run_process(CONSOLE_SCRIPT, "status", "some-id", env=env, cwd=tmp_path)
    assert finished.returncode != 0, finished.explain()
    assert_no_traceback(finished)
    assert "cannot reach Temporal" in finished.stderr, finished.explain()
    assert env["TEMPORAL_ADDRESS"] in finished.stderr
    # Reported at the refusal, not after waiting out the connect budget ("no answer within").
    assert "Connection refused" in finished.stderr, finished.explain()
    assert "no answer within" not in finished.stderr, finished.explain()


async def test_status_of_an_unknown_run_says_not_found(live: Live, tmp_path: Path) -> None:
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    finished = await agentloop("status", "does-not-exist", env=env, cwd=tmp_path)
    assert finished.returncode != 0, finished.explain()
    assert_no_traceback(finished)
    assert "not found" in finished.stderr.lower(), finished.explain()
    assert "does-not-exist" in finished.stderr


async def test_dev_refuses_a_port_in_use_naming_port_and_flag(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = await agentloop(
            "dev",
            "--port",
            str(port),
            "--ui-port",
            str(free_port()),
            "--example-port",
            str(free_port()),
            "--provider-port",
            str(free_port()),
            "--state-dir",
            str(tmp_path / "state"),
            env=process_env(),
            cwd=tmp_path,
        )
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert str(port) in finished.stderr and "--port" in finished.stderr, finished.explain()


def python_path(folder: str) -> str:
    """`folder` first on the import path, before what this process's PYTHONPATH holds."""
    return os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH", "")) if p)


FAILING_DEPENDENCIES = """
import agentloop


@agentloop.dependencies
async def orders_db():
    raise ConnectionError("orders db unreachable")
    yield None


@agentloop.tool(effect="read")
async def read_order(ctx: agentloop.ToolContext, order_id: str) -> str:
    \"\"\"An order.\"\"\"
    return order_id
"""

WORKER_START_FAILURES = {
    # case: (the worker's environment beside a reachable server, what stderr names)
    "unreachable Temporal": ({"TEMPORAL_ADDRESS": "UNREACHABLE"}, "cannot reach Temporal at"),
    "unknown namespace": (
        {"TEMPORAL_NAMESPACE": "no-such-namespace"},
        "TEMPORAL_NAMESPACE='no-such-namespace': no such namespace",
    ),
    "bad log level": ({"AGENTLOOP_LOG_LEVEL": "LOUD"}, "AGENTLOOP_LOG_LEVEL='LOUD'"),
    "failing dependencies": (
        {"AGENTLOOP_TOOLS": "failing_deps"},
        "failing_deps: its dependencies did not open: ConnectionError: orders db unreachable",
    ),
    "unusable store": (
        {"AGENTLOOP_STORE_URL": "sqlite:///a-file/store.db"},
        "AGENTLOOP_STORE_URL='sqlite:///a-file/store.db': the store cannot be used",
    ),
}


@pytest.mark.parametrize("case", list(WORKER_START_FAILURES))
async def test_a_worker_that_cannot_start_says_why_in_one_message_and_exits_2(
    client: Client, case: str, tmp_path: Path
) -> None:
    (tmp_path / "failing_deps.py").write_text(FAILING_DEPENDENCIES)
    (tmp_path / "a-file").write_text("not a folder")
    overrides, named = WORKER_START_FAILURES[case]
    env = process_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host, PYTHONPATH=python_path(".")
    )
    env.update(overrides)
    if env["TEMPORAL_ADDRESS"] == "UNREACHABLE":
        env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{free_port()}"
    finished = await run_process(CONSOLE_SCRIPT, "worker", env=env, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert named in finished.stderr, finished.explain()
    assert "agentloop worker polling" not in finished.stdout, finished.explain()


BAD_ARGUMENTS: dict[str, tuple[tuple[str, ...], dict[str, str], str]] = {
    # case: (the command's arguments, its environment, what its one line of stderr says)
    "empty --text": (
        ("message", "r1", "--sender", "dana", "--text="),
        {},
        "agentloop message: --text: String should have at least 1 character",
    ),
    "empty --operator": (
        ("resolve", "r1", "c1", "--outcome", "applied", "--operator="),
        {},
        "agentloop resolve: --operator: String should have at least 1 character",
    ),
    "empty --approver": (
        ("approve", "r1", "c1", "--approver="),
        {},
        "agentloop approve: --approver: String should have at least 1 character",
    ),
    "long --reason": (
        ("reject", "r1", "c1", "--approver", "lead", "--reason", "x" * 4_001),
        {},
        "agentloop reject: --reason: String should have at most 4000 characters",
    ),
    "bad setting in replay": (
        ("replay", str(Path(__file__).parents[1] / "histories")),
        {"AGENTLOOP_CODEC_KEYS": "no-key-id"},
        "invalid configuration: AGENTLOOP_CODEC_KEYS=",
    ),
    "state dir in a file": (
        ("dev", "--state-dir", "a-file/state"),
        {},
        "agentloop dev: cannot make the state directory a-file/state",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
async def test_bad_arguments_are_one_line_and_exit_2_before_temporal_is_reached(
    case: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    args, overrides, said = BAD_ARGUMENTS[case]
    if args[0] == "dev":  # on free ports; the last --state-dir counts
        args = tuple(dev_argv(tmp_path / "unused", *args[1:])[0][1:])
    env = process_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}", **overrides)
    finished = await agentloop(*args, env=env, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    [line] = finished.stderr.splitlines()
    assert said in line, finished.explain()
    assert "Temporal" not in line


async def test_dev_refuses_a_port_out_of_range_naming_the_option(tmp_path: Path) -> None:
    finished = await agentloop("dev", "--port", "99999", env=process_env(), cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert "argument --port: '99999' is not a port" in finished.stderr, finished.explain()


def test_output_cut_off_by_its_reader_ends_quietly_not_in_a_traceback(tmp_path: Path) -> None:
    """`agentloop config | head -0`: the reader is gone before the command writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        finished = subprocess.run(
            [*AGENTLOOP, "config"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=process_env(),
            cwd=tmp_path,
            timeout=CEILING_SECONDS,
            check=False,
        )
    finally:
        os.close(write_end)
    assert finished.returncode == 141, finished.stderr
    assert finished.stderr == b""


# --- the demo --------------------------------------------------------------------------


async def test_demo_runs_offline_and_the_slow_read_finishes_last(tmp_path: Path) -> None:
    finished = await run_process(
        sys.executable,
        "-m",
        "agentloop.cli.demo",
        env=process_env(),
        cwd=tmp_path,
        timeout=2 * CEILING_SECONDS,  # a whole stack started, run and stopped: not one wait
    )
    assert finished.returncode == 0, finished.explain()
    assert_no_traceback(finished)
    out = finished.stdout
    assert "status: completed" in out, finished.explain()
    for call_id in ("call_train", "call_weather"):
        assert re.search(rf"call {call_id}: .* -> succeeded", out), finished.explain()
    assert re.search(r"^answer: \S", out, re.MULTILINE), finished.explain()
    order = {
        endpoint: int(done)
        for endpoint, done in re.findall(
            r"^\s+(\w+)\s+started #\d+, finished #(\d+)$", out, re.MULTILINE
        )
    }
    assert set(order) >= {"trains", "weather"}, finished.explain()
    assert order["weather"] < order["trains"], finished.explain()
    print(f"demo took {finished.seconds:.1f} s")
