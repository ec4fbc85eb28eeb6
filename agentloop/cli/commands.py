"""The `agentloop` command: the entry point and the commands that are not about one run.

Its arguments are declared in `parser.py`; the commands about runs are in `runs.py`; what
scripts rely on (exit codes, the --json documents) in `output.py`; what people see (progress,
results) in `progress.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from pydantic import ValidationError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agentloop.cli.keys import approver_keys
from agentloop.cli.output import CommandError, ExitCode, ReplayedHistory, print_json
from agentloop.cli.parser import build_parser
from agentloop.cli.runs import build_request, client_command
from agentloop.cli.scheduling import check_signing, schedule_command
from agentloop.cli.starting import build_run_input, run
from agentloop.cli.stats import with_learned_limits
from agentloop.client import StartupError, connect_checked
from agentloop.contract import describe_validation_error
from agentloop.runtime import tracing
from agentloop.runtime.codec import ENCODING, PayloadDecryptionError
from agentloop.runtime.config import VARIABLES, ConfigError, Settings, load_config
from agentloop.search import Unsearchable

if TYPE_CHECKING:  # imported where used: `agentloop dev` only
    from agentloop.cli.dev import DevStack, DevStackPorts

DEV_REPLACES = frozenset(
    {
        "temporal_address",
        "temporal_api_key",
        "temporal_tls_cert",
        "temporal_tls_key",
        "temporal_tls_ca",
        "store_url",
        "example_service_url",
        "ui_url",
        "inbox_url",
        "env",
    }
)
"""Settings `agentloop dev` sets itself (its own server, store and services): not checked."""


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = asyncio.run(dispatch(args))
    except KeyboardInterrupt:
        code = ExitCode.INTERRUPTED
    except BrokenPipeError:  # `agentloop status RUN | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = ExitCode.BROKEN_PIPE
    except Exception:  # a bug: its traceback, then the same orderly exit as any other
        traceback.print_exc()
        code = ExitCode.FAILED
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """Exit without interpreter teardown, once all output is flushed.

    The Temporal client's Rust threads can outlive the event loop and abort a finalizing
    interpreter ("Fatal Python error: PyGILState_Release", exit -6) after the command has done
    its work (temporalio/sdk-python#300). Everything that needs closing is closed by now.
    """
    # os._exit skips OpenTelemetry's exit hook: spans still buffered are sent first.
    with contextlib.suppress(Exception):
        tracing.flush(load_config(check=False).settings)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


async def dispatch(args: argparse.Namespace) -> int:
    """Run the command. An error the CLI knows (bad arguments or run input, a bad
    configuration, Temporal or the store unusable, a tool module failing, a run not found or
    ended, ...) is one message on stderr and its exit code (`explain_error`): only a bug shows
    a traceback."""
    settings: Settings | None = None
    try:
        if args.command in STANDALONE:
            return await standalone(args)
        # Checked before anything starts or connects; `dev` replaces some settings itself.
        settings = load_config(skip=DEV_REPLACES if args.command == "dev" else ()).settings
        return await with_settings(args, settings)
    except Exception as exc:
        explained = explain_error(exc, args, settings)
        if explained is None:
            raise
        message, code = explained
        print(message, file=sys.stderr)
        return code


STANDALONE = frozenset({"replay", "config", "codec-server", "keys", "scripts"})
"""Commands that need no settings but their own (files, keys): a bad configuration does not
stop them."""


async def standalone(args: argparse.Namespace) -> int:
    if args.command == "replay":
        return await replay_files(args.paths, as_json=args.json)
    if args.command == "config":
        return show_config(as_json=args.json)
    if args.command == "codec-server":
        return await codec_server(args)
    if args.command == "scripts":
        from agentloop.cli.scripts import check_scripts

        return check_scripts(args.paths, as_json=args.json)
    return approver_keys(args)


async def with_settings(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "dev":
        return await dev(args, settings)
    if args.command == "worker":
        return await worker(settings, args)
    if args.command == "inbox":
        return await inbox(args, settings)
    if args.command == "store":  # the store alone, not Temporal
        from agentloop.cli.store import store_command

        return await store_command(settings, args)
    if args.command == "mcp":  # talks to the MCP servers, not to Temporal
        from agentloop.cli.mcp import mcp_command

        return await mcp_command(settings, args)
    # Bad input is reported before anything else, Temporal reachable or not.
    run_input = build_run_input(args, settings) if starts_runs(args) else None
    if run_input is not None and args.command == "schedule":
        check_signing(settings)
    request = build_request(args)
    client = await connect_checked(settings)
    if run_input is not None:
        run_input = await with_learned_limits(client, args, run_input)
    if args.command == "schedule":
        return await schedule_command(client, settings, args, run_input)
    if run_input is None:
        return await client_command(client, settings, args, request)
    return await run(client, settings, args, run_input)


def starts_runs(args: argparse.Namespace) -> bool:
    """`run` and `schedule create`: both read the run options (`add_run_input_options`)."""
    return args.command == "run" or getattr(args, "schedule_command", None) == "create"


RUN_INPUT_MODELS = frozenset({"AgentRunInput", "Principal", "Limits"})
OPTIONS = {
    "text": "--text",
    "sender": "--sender",
    "approver": "--approver",
    "reason": "--reason",
    "operator": "--operator",
    "note": "--note",
    "args_digest": "--digest",
    "call_id": "CALL_ID",
}
"""The option each field of a signal's payload comes from."""


def explain_error(
    exc: Exception, args: argparse.Namespace, settings: Settings | None
) -> tuple[str, ExitCode] | None:
    """The one message for an error a command ended with, and the code to exit with; None
    for an error this does not know (a bug: its traceback shows)."""
    from agentloop.inbox import InboxUnsafe
    from agentloop.runtime.dev_server import DevStackError
    from agentloop.tools.plugins import PluginError

    command = f"agentloop {args.command}"
    if isinstance(exc, CommandError):
        return str(exc), exc.code
    if isinstance(exc, ConfigError):
        return str(exc), ExitCode.USAGE
    if isinstance(exc, ValidationError):
        if exc.title in RUN_INPUT_MODELS:
            return f"invalid run input: {describe_validation_error(exc)}", ExitCode.USAGE
        return f"{command}: {describe_bad_arguments(exc)}", ExitCode.USAGE
    if isinstance(exc, StartupError | PluginError | DevStackError | Unsearchable | InboxUnsafe):
        return f"{command}: {exc}", ExitCode.USAGE
    if isinstance(exc, WorkflowAlreadyStartedError):
        return (
            f"{command}: a run with id {exc.workflow_id!r} is already running: give another"
            f" --id (or none, for a new one), or see it with `agentloop status {exc.workflow_id}`",
            ExitCode.USAGE,
        )
    if settings is not None and isinstance(exc, RPCError | PayloadDecryptionError | KeyError):
        return explain_client_error(exc, args, settings)
    return None


def describe_bad_arguments(exc: ValidationError) -> str:
    """`--text: String should have at least 1 character (got '')`: each field named by the
    option it came from."""
    return describe_validation_error(exc, OPTIONS)


def explain_client_error(
    exc: Exception, args: argparse.Namespace, settings: Settings
) -> tuple[str, ExitCode] | None:
    """What went wrong reaching or reading a run, in one message, and the code to exit with;
    None for an error this does not know (a bug: let its traceback show)."""
    what = f"run {args.run_id!r}" if hasattr(args, "run_id") else "the runs"
    if isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND:
        where = f"{settings.temporal_address} (namespace {settings.temporal_namespace})"
        missing = what if hasattr(args, "run_id") else "namespace"
        return f"{missing} not found on {where}: {exc.message}", ExitCode.FAILED
    if isinstance(exc, RPCError):
        return f"temporal: {exc}", ExitCode.FAILED
    if isinstance(exc, PayloadDecryptionError):  # keys set, but not the ones it was written with
        return f"cannot read {what}: {exc}", ExitCode.USAGE
    if ENCODING in str(exc):  # the SDK's converter met an encrypted payload without a codec
        return (
            f"cannot read {what}: its payloads are encrypted ({ENCODING}) and "
            "AGENTLOOP_CODEC_KEYS is not set: set it to the keys the workers use",
            ExitCode.USAGE,
        )
    return None


def show_config(as_json: bool) -> int:
    """The effective configuration, one `NAME=value (source)` line per setting (or JSON),
    secrets masked; exit 2 with the problems when it is invalid."""
    try:
        loaded = load_config()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return ExitCode.USAGE
    if as_json:
        print_json(loaded.as_json())
    else:
        print("\n".join(loaded.lines()))
    return ExitCode.OK


async def replay_files(paths: Sequence[Path], as_json: bool) -> int:
    """One line per history: ok, FAIL (what diverged) or ERROR (not a readable history)."""
    from agentloop.cli.replay import replay_each

    # Each failure is reported in its line; the SDK's own log of it would only repeat it.
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    replayed: list[ReplayedHistory] = []
    async for report in replay_each(paths):
        replayed.append(ReplayedHistory.of(report))
        if not as_json:
            print(report.line(), flush=True)
    if as_json:
        print_json(replayed)
    return ExitCode.OK if all(r.ok for r in replayed) else ExitCode.FAILED


async def codec_server(args: argparse.Namespace) -> int:
    """Serve the codec endpoint until SIGINT or SIGTERM; exit 2 when the keys are unset or
    malformed or the port is taken."""
    from agentloop.runtime.codec import DEFAULT_UI_ORIGINS, EncryptionCodec, serve_codec_server

    try:
        loaded = load_config(skip=set(VARIABLES) - {"codec_keys"})
        ring = loaded.settings.codec_key_ring()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return ExitCode.USAGE
    if ring is None:
        print(
            "agentloop codec-server: AGENTLOOP_CODEC_KEYS is not set: set it to the keys the"
            " workers encrypt with (ID:BASE64KEY[,ID:BASE64KEY...], the first active)",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    origins = args.origins or list(DEFAULT_UI_ORIGINS)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def ready() -> None:
        url = f"http://{args.host}:{args.port}"
        print(
            f"agentloop codec-server on {url} (POST /decode, /encode)\n"
            f"  keys          {ring.describe()}\n"
            f"  UI origins    {', '.join(origins)}\n"
            f"  Temporal UI   set the codec server endpoint (Codec Server settings) to {url}\n"
            f"  temporal CLI  --codec-endpoint {url}\n"
            "Ctrl-C stops it.",
            flush=True,
        )

    try:
        await serve_codec_server(
            EncryptionCodec.from_ring(ring),
            host=args.host,
            port=args.port,
            origins=origins,
            stop=stop,
            ready=ready,
        )
    except OSError as exc:
        print(
            f"agentloop codec-server: cannot listen on {args.host}:{args.port}:"
            f" {exc.strerror or exc}: pass --port PORT",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    print("agentloop codec-server stopped", flush=True)
    return ExitCode.OK


async def inbox(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the inbox until SIGINT or SIGTERM; exit 2 when it would listen beyond
    127.0.0.1 without --auth-header, or the port is taken."""
    from agentloop.inbox import InboxOptions, InboxServer, check_exposure

    problems = settings.inbox_problems()
    if problems:
        raise ConfigError(problems)
    options = InboxOptions(
        auth_header=args.auth_header,
        tenants=settings.inbox_tenant_map(),
        key=settings.inbox_memo_key(),
        wait=timedelta(seconds=settings.inbox_wait_seconds),
        refresh=timedelta(seconds=settings.inbox_refresh_seconds),
    )
    check_exposure(args.host, options)
    client = await connect_checked(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        server = InboxServer(client, options, args.host, args.port)
        async with server:
            who = (
                f"the user in the {args.auth_header} header"
                if args.auth_header
                else "a name given once per browser (local mode)"
            )
            print(
                f"agentloop inbox on {server.url}\n"
                f"  Temporal  {settings.temporal_address} (namespace"
                f" {settings.temporal_namespace})\n"
                f"  who acts  {who}\n"
                "Ctrl-C stops it.",
                flush=True,
            )
            await stop.wait()
    except OSError as exc:
        raise CommandError(
            f"agentloop inbox: cannot listen on {args.host}:{args.port}: {exc}: pass --port PORT",
            ExitCode.USAGE,
        ) from None
    print("agentloop inbox stopped", flush=True)
    return ExitCode.OK


def requested_tools(args: argparse.Namespace) -> list[str]:
    """`--tools A --tools B,C` as `[A, B, C]`."""
    return [m.strip() for option in args.tools for m in option.split(",") if m.strip()]


async def worker(settings: Settings, args: argparse.Namespace) -> int:
    """The tool modules are loaded, and every problem with them reported, before connecting;
    `serve` checks the store, Temporal and the namespace before it polls."""
    from agentloop.worker import load_worker_toolbox, serve

    settings.check_production()  # before any tool module is imported or anything connects
    toolbox = load_worker_toolbox(settings, requested_tools(args))
    await serve(settings, toolbox)
    return ExitCode.OK


async def dev(args: argparse.Namespace, settings: Settings) -> int:
    """`settings`: the configuration (environment and file) the stack starts from, but for
    what it replaces with its own (`DEV_REPLACES`). Beside the stack, the inbox on
    127.0.0.1 in local mode (a name typed once per browser); the worker's notices link there."""
    from agentloop.cli.dev import DevStack, DevStackPorts
    from agentloop.inbox import InboxOptions, InboxServer
    from agentloop.runtime.audit import DEFAULT_REDACT_FIELDS, configure_logging, settings_secrets
    from agentloop.runtime.dev_server import ensure_port_free

    configure_logging(
        level=settings.log_level,
        fmt="console",
        secrets=settings_secrets(settings),
        redact_fields=DEFAULT_REDACT_FIELDS,
    )
    ports = DevStackPorts(
        args.port, args.ui_port, args.example_port, args.provider_port, args.metrics_port
    )
    ensure_port_free(args.inbox_port, "the inbox", "--inbox-port")  # before anything starts
    inbox_url = f"http://127.0.0.1:{args.inbox_port}"
    # No key: the inbox checks with its own process's worker's (`InboxOptions.memo_key`).
    options = InboxOptions(
        tenants=settings.inbox_tenant_map(),
        wait=timedelta(seconds=settings.inbox_wait_seconds),
        refresh=timedelta(seconds=settings.inbox_refresh_seconds),
    )
    settings = settings.model_copy(update={"inbox_url": inbox_url})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with DevStack(
        ports,
        state_dir=args.state_dir,
        persist_history=args.persist,
        tools=requested_tools(args),
        settings=settings,
        scripts_dir=args.scripts,
    ) as stack:
        assert stack.client is not None
        async with InboxServer(stack.client, options, "127.0.0.1", args.inbox_port):
            print(dev_banner(stack, ports, inbox_url), flush=True)
            await stop.wait()
    print("agentloop dev stopped", flush=True)
    return ExitCode.OK


def dev_banner(stack: DevStack, ports: DevStackPorts, inbox_url: str) -> str:
    """Where each part of `agentloop dev` is, and what a second shell needs."""
    settings = stack.settings
    openai = settings.openai_base_url or "the OpenAI API"
    anthropic = settings.anthropic_base_url or "the Anthropic API"
    return (
        "agentloop dev is up\n"
        f"  Temporal     127.0.0.1:{ports.temporal} (namespace default)\n"
        f"  Temporal UI  http://localhost:{ports.ui}\n"
        "               to see how each run stands and ended in its list: Workflows page,\n"
        "               Configure Columns, add AgentStatus, AgentPhase (and AgentTaskFamily)\n"
        f"  inbox        {inbox_url} (local mode: a name typed once per browser)\n"
        f"  example svc  {settings.example_service_url}\n"
        f"  models       OpenAI: {openai}; Anthropic: {anthropic}"
        f"{' (scripted provider)' if stack.scripted_provider else ''}\n"
        f"  worker       task queue {settings.task_queue!r}, tools:\n"
        + "".join(f"    {line}\n" for line in stack.tool_effects())
        + "".join(f"  {line}\n" for line in stack.where_things_live())
        + "In a second shell, before `agentloop run`, `status`, `transcript`, ...:\n"
        + f"{stack.export_line()}\n"
        + "Ctrl-C stops everything."
    )


if __name__ == "__main__":
    main()
