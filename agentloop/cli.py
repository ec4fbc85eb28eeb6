"""The `agentloop` command: a dev stack, a worker, and the client side of runs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agentloop import search
from agentloop.config import VARIABLES, ConfigError, Settings, load_config
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    Limits,
    Principal,
    ResolveRequest,
    RunStatusView,
    describe_validation_error,
)
from agentloop.worker import connect

FOLLOW_POLL_SECONDS = 0.5
CONNECT_TIMEOUT_SECONDS = 10.0
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
    }
)
"""Settings `agentloop dev` sets itself (its own server, store and services): not checked."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentloop", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    dev = commands.add_parser(
        "dev",
        help="run Temporal dev server + UI, example service, "
        "scripted provider and a worker until Ctrl-C",
    )
    dev.add_argument("--port", type=int, default=7233, help="Temporal frontend port")
    dev.add_argument("--ui-port", type=int, default=8233)
    dev.add_argument("--example-port", type=int, default=8787)
    dev.add_argument("--provider-port", type=int, default=8788)
    dev.add_argument("--state-dir", type=Path, default=Path(".agentloop"))
    dev.add_argument(
        "--persist",
        action="store_true",
        help="keep workflow history across restarts (in STATE_DIR/temporal.db)",
    )

    commands.add_parser("worker", help="run a worker (configuration from the environment)")

    config = commands.add_parser(
        "config",
        help="check the configuration and print each setting, where it came from "
        "(env, file, default), secrets masked",
    )
    config.add_argument("--json", action="store_true", help="print it as a JSON object")

    run = commands.add_parser("run", help="start an agent run and print its id and UI link")
    run.add_argument("task")
    run.add_argument("--provider", default="openai-chat")
    run.add_argument("--model", default="travel")
    run.add_argument(
        "--tool", action="append", default=[], dest="tools", help="allow this tool (repeat)"
    )
    run.add_argument("--instructions", default="")
    run.add_argument("--id", help="workflow id (default: a new one)")
    run.add_argument("--subject", default="cli-user")
    run.add_argument("--scope", action="append", default=[], dest="scopes")
    run.add_argument("--max-model-calls", type=int)
    run.add_argument("--max-tool-calls", type=int)
    run.add_argument("--no-stream", action="store_true")
    run.add_argument("--follow", action="store_true", help="print progress until the run ends")
    run.add_argument(
        "--no-index",
        dest="index",
        action="store_false",
        help="start without the search attributes (a namespace without them)",
    )

    lister = commands.add_parser("list", help="find runs by phase, status, provider, tenant")
    lister.add_argument("--awaiting-approval", action="store_true")
    lister.add_argument("--phase")
    lister.add_argument("--status", help="completed, limit_reached, ... or running")
    lister.add_argument("--provider")
    lister.add_argument("--tenant")
    lister.add_argument("--limit", type=int, default=50)
    lister.add_argument("--json", action="store_true")

    for name, text in (("status", "show a run's status"), ("cancel", "cancel a run")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("run_id")
        if name == "cancel":
            sub.add_argument("--reason", default="")

    for name, text in (("approve", "approve a pending call"), ("reject", "reject a pending call")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("run_id")
        sub.add_argument("call_id")
        sub.add_argument("--approver", required=True)
        sub.add_argument("--reason", default="")
        sub.add_argument(
            "--digest",
            help="the args digest you were shown (default: the one "
            "`status` shows now, after printing the arguments)",
        )

    cont = commands.add_parser(
        "continue", help="start a new run on a finished run's transcript, with a new budget"
    )
    cont.add_argument("run_id")
    cont.add_argument("--task", default="Continue where you stopped.")
    cont.add_argument(
        "--max-model-calls",
        type=int,
        required=True,
        help="the model calls granted to the new run (never inherited)",
    )
    cont.add_argument("--max-tool-calls", type=int)
    cont.add_argument("--id", help="workflow id of the new run")
    cont.add_argument("--follow", action="store_true")

    resolve = commands.add_parser("resolve", help="say whether a write of unknown outcome happened")
    resolve.add_argument("run_id")
    resolve.add_argument("call_id")
    resolve.add_argument("--outcome", choices=["applied", "not_applied"], required=True)
    resolve.add_argument("--operator", required=True)
    resolve.add_argument("--note", default="")

    history = commands.add_parser(
        "history", help="export a run's full history as JSON (what `replay` reads)"
    )
    history.add_argument("run_id")
    history.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write it here (default: stdout)"
    )

    replay = commands.add_parser(
        "replay",
        help="replay exported histories against today's workflow code (no server needed)",
    )
    replay.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a history JSON file, or a folder: every *.json in it",
    )
    codec = commands.add_parser(
        "codec-server",
        help="serve the Temporal UI's remote codec endpoint (POST /decode, /encode) with the "
        "keys of AGENTLOOP_CODEC_KEYS, so the UI shows encrypted history decrypted",
    )
    codec.add_argument("--port", type=int, default=8081)
    codec.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default 127.0.0.1: whoever reaches it can decrypt)",
    )
    codec.add_argument(
        "--origin",
        action="append",
        dest="origins",
        metavar="URL",
        help="the UI origin a browser may call it from (repeat; default http://localhost:8233 "
        "and http://127.0.0.1:8233)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = asyncio.run(dispatch(args))
    except KeyboardInterrupt:
        code = 130
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """Exit without interpreter teardown, once all output is flushed.

    The Temporal client's Rust threads can outlive the event loop and abort a finalizing
    interpreter ("Fatal Python error: PyGILState_Release", exit -6) after the command has done
    its work (temporalio/sdk-python#300). Everything that needs closing is closed by now.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


async def dispatch(args: argparse.Namespace) -> int:
    if args.command == "replay":  # needs nothing but the files
        return await replay_files(args.paths)
    if args.command == "config":
        return show_config(as_json=args.json)
    if args.command == "codec-server":  # needs nothing but the keys
        return await codec_server(args)
    # Checked before anything starts or connects; `dev` replaces some settings itself.
    try:
        settings = load_config(skip=DEV_REPLACES if args.command == "dev" else ()).settings
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.command == "dev":
        return await dev(args)
    if args.command == "worker":
        from agentloop.worker import serve

        await serve(settings)
        return 0
    run_input: AgentRunInput | None = None
    if args.command == "run":
        # Bad input is reported before anything else, Temporal reachable or not.
        try:
            run_input = build_run_input(args)
        except ValidationError as exc:
            print(f"invalid run input: {describe_validation_error(exc)}", file=sys.stderr)
            return 2
    try:
        client = await asyncio.wait_for(connect(settings), CONNECT_TIMEOUT_SECONDS)
    except (RuntimeError, TimeoutError) as exc:
        reason = str(exc) or f"no answer within {CONNECT_TIMEOUT_SECONDS:g} s"
        print(
            f"cannot reach Temporal at {settings.temporal_address}: {reason}\n"
            "start one with `agentloop dev`, or set TEMPORAL_ADDRESS",
            file=sys.stderr,
        )
        return 2
    try:
        if run_input is not None:
            return await run(client, settings, args, run_input)
        if args.command == "list":
            return await list_runs(client, args)
        handle = client.get_workflow_handle(args.run_id, result_type=AgentRunResult)
        if args.command == "history":
            return await export_history(handle, args.output)
        if args.command == "status":
            return await show_status(handle)
        if args.command in ("approve", "reject"):
            return await decide(handle, args, approved=args.command == "approve")
        if args.command == "continue":
            return await continue_run(client, settings, args)
        if args.command == "resolve":
            await handle.signal(
                "resolve",
                ResolveRequest(
                    call_id=args.call_id,
                    outcome=args.outcome,
                    operator=args.operator,
                    note=args.note,
                ),
            )
            print(f"resolution sent for {args.call_id}: {args.outcome}")
            return 0
        await handle.signal("cancel", CancelRequest(reason=args.reason))
        print(f"cancel requested for {args.run_id}")
        return 0
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            what = f"run {args.run_id!r}" if hasattr(args, "run_id") else "namespace"
            print(
                f"{what} not found on {settings.temporal_address} "
                f"(namespace {settings.temporal_namespace}): {exc.message}",
                file=sys.stderr,
            )
        else:
            print(f"temporal: {exc}", file=sys.stderr)
        return 1


def show_config(as_json: bool) -> int:
    """The effective configuration, one `NAME=value (source)` line per setting (or JSON),
    secrets masked; exit 2 with the problems when it is invalid."""
    try:
        loaded = load_config()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(loaded.as_json(), indent=2))
    else:
        print("\n".join(loaded.lines()))
    return 0


def build_run_input(args: argparse.Namespace) -> AgentRunInput:
    """The run input from the command line; raises ValidationError naming the bad field."""
    limits: dict[str, Any] = {}
    if args.max_model_calls is not None:
        limits["max_model_calls"] = args.max_model_calls
    if args.max_tool_calls is not None:
        limits["max_tool_calls"] = args.max_tool_calls
    return AgentRunInput(
        task=args.task,
        instructions=args.instructions,
        provider=args.provider,
        model=args.model,
        tools=args.tools,
        principal=Principal(subject=args.subject, scopes=args.scopes),
        limits=Limits.model_validate(limits),
        stream=not args.no_stream,
    )


async def run(
    client: Client, settings: Settings, args: argparse.Namespace, run_input: AgentRunInput
) -> int:
    workflow_id = args.id or f"agent-run-{uuid.uuid4().hex[:12]}"
    handle = await client.start_workflow(
        WORKFLOW_NAME,
        run_input,
        id=workflow_id,
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
        static_summary=run_input.summary(),
        search_attributes=search.initial(run_input) if getattr(args, "index", True) else None,
    )
    print(f"started {workflow_id}\n  {settings.run_url(workflow_id)}", flush=True)
    if not args.follow:
        return 0
    return await follow(handle)


async def follow(handle: WorkflowHandle[Any, AgentRunResult]) -> int:
    """Print each phase change and each call outcome until the run ends, then the result."""
    result_task = asyncio.ensure_future(handle.result())
    seen: set[str] = set()
    while not result_task.done():
        try:
            view = await handle.query("status", result_type=RunStatusView)
        except RPCError:
            view = None
        if view is not None:
            for line in progress_lines(view):
                if line not in seen:
                    seen.add(line)
                    print(line, flush=True)
        await asyncio.wait([result_task], timeout=FOLLOW_POLL_SECONDS)
    try:
        result = result_task.result()
    except WorkflowFailureError as exc:
        print(f"run failed: {exc.cause}", file=sys.stderr)
        return 1
    print(format_result(result))
    return 0 if result.status == "completed" else 1


def progress_lines(view: RunStatusView) -> list[str]:
    lines = [f"turn {view.turn}: {view.phase}"]
    lines += [
        f"  {c.call_id} {c.tool} -> {c.status}"
        for c in view.calls
        if c.status not in ("proposed", "running")
    ]
    return lines


def format_result(result: AgentRunResult) -> str:
    lines = [f"status: {result.status} ({result.stop_reason})"]
    for call in result.calls:
        lines.append(
            f"  call {call.call_id}: {call.tool} {json.dumps(call.arguments)} "
            f"-> {call.status} {call.result_summary[:120]}"
        )
    usage = result.usage
    lines.append(
        f"usage: {usage.model_calls} model calls, {usage.tool_calls} tool calls, "
        f"{usage.input_tokens + usage.output_tokens} tokens"
    )
    if result.output is not None:
        output = result.output if isinstance(result.output, str) else json.dumps(result.output)
        lines.append(f"answer: {output}")
    if result.status != "completed" and result.report:
        lines.append(result.report)
    return "\n".join(lines)


async def list_runs(client: Client, args: argparse.Namespace) -> int:
    """A visibility query over the runs' search attributes."""
    phase = "awaiting_approval" if args.awaiting_approval else args.phase
    query = search.list_query(
        phase=phase, status=args.status, provider=args.provider, tenant=args.tenant
    )
    found = []
    async for execution in client.list_workflows(query, limit=args.limit):
        attributes = execution.typed_search_attributes
        found.append(
            {
                "workflow_id": execution.id,
                "run_id": execution.run_id,
                "phase": attributes.get(search.AGENT_PHASE),
                "status": attributes.get(search.AGENT_STATUS),
                "provider": attributes.get(search.AGENT_PROVIDER),
                "tenant": attributes.get(search.AGENT_TENANT),
                "started": execution.start_time.isoformat() if execution.start_time else None,
            }
        )
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for run in found:
            print(
                f"{run['workflow_id']}  {run['phase']}  {run['status']}  {run['provider']}  "
                f"{run['tenant']}"
            )
        print(f"{len(found)} run(s) matching {query}", file=sys.stderr)
    return 0


async def continue_run(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    """The previous run's input, with a new task, the budget granted here, and continue_from."""
    handle = client.get_workflow_handle(args.run_id)
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [previous] = await client.data_converter.decode(payloads[:1], [dict[str, Any]])
        break
    limits = {**previous.get("limits", {}), "max_model_calls": args.max_model_calls}
    if args.max_tool_calls is not None:
        limits["max_tool_calls"] = args.max_tool_calls
    try:
        run_input = AgentRunInput.model_validate(
            {**previous, "task": args.task, "limits": limits, "continue_from": args.run_id}
        )
    except ValidationError as exc:
        print(f"invalid run input: {describe_validation_error(exc)}", file=sys.stderr)
        return 2
    args.id = args.id or f"{args.run_id}-continued-{uuid.uuid4().hex[:6]}"
    return await run(client, settings, args, run_input)


async def decide(
    handle: WorkflowHandle[Any, AgentRunResult], args: argparse.Namespace, approved: bool
) -> int:
    """Send a decision through the `decide_approval` update, which says at once whether it
    counted; the decision is bound to the args digest shown here."""
    digest = args.digest
    if digest is None:
        view = await handle.query("status", result_type=RunStatusView)
        pending = next((p for p in view.pending_approvals if p["call_id"] == args.call_id), None)
        if pending is None:
            print(f"no call {args.call_id!r} is waiting for approval", file=sys.stderr)
            return 1
        print(f"{pending['tool']} {json.dumps(pending['arguments'])}  [{pending['args_digest']}]")
        digest = pending["args_digest"]
    verdict = await handle.execute_update(
        "decide_approval",
        ApprovalDecision(
            call_id=args.call_id,
            args_digest=digest,
            approved=approved,
            approver=args.approver,
            reason=args.reason,
        ),
        result_type=ApprovalVerdict,
    )
    if not verdict.accepted:
        print(f"decision refused: {verdict.reason}", file=sys.stderr)
        return 1
    print(f"{'approved' if approved else 'rejected'}: {args.call_id}")
    return 0


async def show_status(handle: WorkflowHandle[Any, AgentRunResult]) -> int:
    description = await handle.describe()
    print(f"{handle.id}: {description.status.name if description.status else 'UNKNOWN'}")
    view = await handle.query("status", result_type=RunStatusView)
    print(json.dumps(view.model_dump(mode="json"), indent=2))
    return 0


async def export_history(handle: WorkflowHandle[Any, AgentRunResult], output: Path | None) -> int:
    """The run's full history (so far, if it still runs) as the JSON `replay` reads."""
    history = await handle.fetch_history()
    text = history.to_json() + "\n"
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {output}: {len(history.events)} events of {handle.id}")
    return 0


async def replay_files(paths: Sequence[Path]) -> int:
    """One line per history: ok, FAIL (what diverged) or ERROR (not a readable history)."""
    from agentloop.replay import replay_each

    # Each failure is reported in its line; the SDK's own log of it would only repeat it.
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    all_ok = True
    async for report in replay_each(paths):
        all_ok = all_ok and report.ok
        print(report.line(), flush=True)
    return 0 if all_ok else 1


async def codec_server(args: argparse.Namespace) -> int:
    """Serve the codec endpoint until SIGINT or SIGTERM; exit 2 when the keys are unset or
    malformed or the port is taken."""
    from agentloop.codec import DEFAULT_UI_ORIGINS, EncryptionCodec, serve_codec_server

    try:
        loaded = load_config(skip=set(VARIABLES) - {"codec_keys"})
        ring = loaded.settings.codec_key_ring()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if ring is None:
        print(
            "agentloop codec-server: AGENTLOOP_CODEC_KEYS is not set: set it to the keys the"
            " workers encrypt with (ID:BASE64KEY[,ID:BASE64KEY...], the first active)",
            file=sys.stderr,
        )
        return 2
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
        return 2
    print("agentloop codec-server stopped", flush=True)
    return 0


async def dev(args: argparse.Namespace) -> int:
    from agentloop.audit import DEFAULT_REDACT_FIELDS, configure_logging, settings_secrets
    from agentloop.devstack import DevStack, DevStackError, DevStackPorts

    configure_logging(
        fmt="console",
        secrets=settings_secrets(Settings.from_env()),
        redact_fields=DEFAULT_REDACT_FIELDS,
    )
    ports = DevStackPorts(args.port, args.ui_port, args.example_port, args.provider_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with DevStack(ports, state_dir=args.state_dir, persist_history=args.persist) as stack:
            settings = stack.settings
            openai = settings.openai_base_url or "the OpenAI API"
            anthropic = settings.anthropic_base_url or "the Anthropic API"
            print(
                "agentloop dev is up\n"
                f"  Temporal     127.0.0.1:{ports.temporal} (namespace default)\n"
                f"  Temporal UI  http://localhost:{ports.ui}\n"
                f"  example svc  {stack.settings.example_service_url}\n"
                f"  models       OpenAI: {openai}; Anthropic: {anthropic}"
                f"{' (scripted provider)' if stack.scripted_provider else ''}\n"
                f"  worker       task queue {stack.settings.task_queue!r}\n"
                "Ctrl-C stops everything.",
                flush=True,
            )
            await stop.wait()
    except DevStackError as exc:
        print(f"agentloop dev: {exc}", file=sys.stderr)
        return 2
    print("agentloop dev stopped", flush=True)
    return 0


if __name__ == "__main__":
    main()
