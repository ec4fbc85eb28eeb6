"""Client-side: the commands about runs: start and follow, read (status, transcript, list,
history), and drive (approve, reject, resolve, cancel).

A run is read the cheapest way that is true: a running run through its `status` query, a
finished one through its result, which its history holds (no worker needed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TextIO, TypeAlias, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from agentloop import search
from agentloop.cli.output import (
    PAUSED_PHASES,
    RESULT_EXIT_CODES,
    CommandError,
    Decision,
    ExitCode,
    HistoryWritten,
    ListedRun,
    RunSnapshot,
    SignalSent,
    StartedRun,
    print_json,
)
from agentloop.cli.progress import StreamedText, format_snapshot, progress_display
from agentloop.cli.stats import show_stats
from agentloop.cli.transcript import format_transcript, open_transcript_store, read_transcript
from agentloop.cli.watching import watch_run
from agentloop.client import start_run, watch
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    Limits,
    Principal,
    ResolveRequest,
    RunStatusView,
    UserMessage,
)
from agentloop.runtime.audit import mask_url
from agentloop.runtime.codec import KeyRing
from agentloop.runtime.config import Settings
from agentloop.runtime.indexing import missing_attributes, unregistered
from agentloop.runtime.signing import (
    SigningError,
    load_private_key,
    sign_decision,
    sign_resolution,
)
from agentloop.store import StoreError, StoreUnavailable

FOLLOW_POLL_SECONDS = 0.5
FOLLOW_QUERY_TIMEOUT = timedelta(seconds=5)
"""A status query that takes longer (no worker polling) is skipped; the next poll asks again."""

Handle: TypeAlias = WorkflowHandle[Any, AgentRunResult]


Request: TypeAlias = ApprovalDecision | ResolveRequest | UserMessage | CancelRequest

DIGEST_FROM_STATUS = "(the digest status shows)"
"""Stands in for `--digest` until `approve`/`reject` read it from the run's status."""


def build_request(args: argparse.Namespace) -> Request | None:
    """What `approve`, `reject`, `resolve`, `message` and `cancel` send, from the command
    line, checked before anything connects: raises ValidationError naming the bad field."""
    if args.command in ("approve", "reject"):
        return ApprovalDecision(
            call_id=args.call_id,
            args_digest=args.digest or DIGEST_FROM_STATUS,
            approved=args.command == "approve",
            approver=args.approver,
            reason=args.reason,
        )
    if args.command == "resolve":
        return ResolveRequest(
            call_id=args.call_id, outcome=args.outcome, operator=args.operator, note=args.note
        )
    if args.command == "message":
        return UserMessage(text=args.text, sender=args.sender)
    if args.command == "cancel":
        return CancelRequest(reason=args.reason)
    return None


async def client_command(
    client: Client, settings: Settings, args: argparse.Namespace, request: Request | None
) -> int:
    """The commands about one existing run (and `list`); `request` is what `build_request`
    made of the command line."""
    if args.command == "list":
        return await list_runs(client, args)
    if args.command == "stats":
        return await show_stats(client, args)
    if args.command == "continue":
        return await continue_run(client, settings, args)
    if args.command == "watch":
        return await watch_run(client, args.run_id, args.from_offset, as_json=args.json)
    handle = client.get_workflow_handle(args.run_id, result_type=AgentRunResult)
    if args.command == "status":
        return report_snapshot(await read_snapshot(handle), as_json=args.json)
    if args.command == "transcript":
        return await show_transcript(
            handle, settings.store_url, settings.codec_key_ring(), as_json=args.json
        )
    if args.command == "history":
        return await export_history(handle, args.output, as_json=args.json)
    if isinstance(request, ApprovalDecision):
        return await decide(handle, args, request)
    if isinstance(request, ResolveRequest):
        return await resolve(handle, args, request)
    if isinstance(request, UserMessage):
        done = f"message sent to {args.run_id}"
        return await send_signal(handle, "message", request, done, as_json=args.json)
    assert isinstance(request, CancelRequest), args.command
    done = f"cancel requested for {args.run_id}"
    return await send_signal(handle, "cancel", request, done, as_json=args.json)


# provider -> (the setting holding its key, the real model used when it is set)
REAL_MODELS = {
    "openai-chat": ("openai_api_key", "gpt-4o-mini"),
    "openai-responses": ("openai_api_key", "gpt-4o-mini"),
    "anthropic": ("anthropic_api_key", "claude-sonnet-4-5"),
}
SCRIPTED_KEY = "scripted"
"""The API key `agentloop dev` and the test harness give the official clients to reach the
scripted provider."""


def run_model(args: argparse.Namespace, settings: Settings) -> str:
    """`--model`, or the provider's real default model when its API key is set; without
    either, the scripted provider would have to guess a script: exit 2 saying so."""
    if args.model:
        return str(args.model)
    if args.provider not in REAL_MODELS:
        return ""  # the run input names the bad provider
    key_field, default_model = REAL_MODELS[args.provider]
    if getattr(settings, key_field) not in (None, "", SCRIPTED_KEY):
        return default_model
    raise CommandError(
        f"agentloop {args.command}: --model is needed: without {key_field.upper()} the"
        " model is the scripted provider's, and --model names the script it plays (built in:"
        " travel, refunds; or a file of the folder given to `agentloop dev --scripts DIR`)",
        ExitCode.USAGE,
    )


def build_run_input(args: argparse.Namespace, settings: Settings) -> AgentRunInput:
    """The run input from the command line; raises ValidationError naming the bad field (or
    CommandError: a tenant or family no run could be found by)."""
    limits: dict[str, Any] = {}
    if args.max_model_calls is not None:
        limits["max_model_calls"] = args.max_model_calls
    if args.max_tool_calls is not None:
        limits["max_tool_calls"] = args.max_tool_calls
    run_input = AgentRunInput(
        task=args.task,
        instructions=args.instructions,
        provider=args.provider,
        model=run_model(args, settings),
        tools=args.tools,
        principal=Principal(subject=args.subject, tenant=args.tenant, scopes=args.scopes),
        limits=Limits.model_validate(limits),
        stream=not args.no_stream,
        publish_events=settings.publish_events == "on",
        task_family=args.family,
    )
    problem = search.run_input_problem(run_input)
    if problem:
        raise CommandError(f"invalid run input: {problem}", ExitCode.USAGE)
    return run_input


def for_people(args: argparse.Namespace) -> TextIO:
    """Where messages for people go: stdout, except under --json, which keeps stdout for the
    one JSON document."""
    return sys.stderr if args.json else sys.stdout


# --- starting and following runs ------------------------------------------------------------------


async def run(
    client: Client, settings: Settings, args: argparse.Namespace, run_input: AgentRunInput
) -> int:
    workflow_id = args.id or f"agent-run-{uuid.uuid4().hex[:12]}"
    # Indexed where the namespace has agentloop's search attributes, unindexed elsewhere.
    handle = await start_run(
        client,
        run_input,
        id=workflow_id,
        task_queue=settings.task_queue,
        indexed=None if getattr(args, "index", True) else False,
        principal_key=private_key(args, "AGENTLOOP_STARTER_KEY"),
    )
    started = StartedRun(workflow_id=workflow_id, url=settings.run_url(workflow_id))
    if args.json and not args.follow:
        print_json(started)
        return ExitCode.OK
    print(f"started {workflow_id}\n  {started.url}", file=for_people(args), flush=True)
    if not args.follow:
        return ExitCode.OK
    following = await follow(client, handle, for_people(args))
    return report_snapshot(following, as_json=args.json)


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
    run_input = AgentRunInput.model_validate(
        {
            **previous,
            "task": args.task,
            "limits": limits,
            "continue_from": args.run_id,
            # Signed for the previous run's id: the new run's principal is signed with --key.
            "principal_signature": None,
        }
    )
    args.id = args.id or f"{args.run_id}-continued-{uuid.uuid4().hex[:6]}"
    return await run(client, settings, args, run_input)


async def follow(client: Client, handle: Handle, stream: TextIO) -> RunSnapshot:
    """Show the run's progress on `stream` until it ends, with the model's text as the run's
    stream brings it; its end, or where it was when Ctrl-C stopped following (the run itself
    goes on)."""
    result = asyncio.ensure_future(handle.result())
    interrupted = asyncio.Event()
    streamed = StreamedText()
    reading = asyncio.ensure_future(read_stream(client, handle.id, streamed))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    try:
        view = await poll_progress(handle, result, interrupted, stream, streamed)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        reading.cancel()
    if result.done():
        return await ended_snapshot(handle.id, await execution_status(handle), result)
    result.cancel()
    print(
        f"stopped following {handle.id}; the run goes on: agentloop status {handle.id}",
        file=sys.stderr,
    )
    return snapshot_of_view(handle.id, view) if view else await read_snapshot(handle)


async def read_stream(client: Client, workflow_id: str, streamed: StreamedText) -> None:
    """The run's stream into `streamed`, for as long as following goes on. The stream is
    display: a run that publishes none (or a server that cannot serve it) shows no text."""
    with contextlib.suppress(RPCError, WorkflowUpdateFailedError):
        async for event in watch(client, workflow_id):
            streamed.take(event)


async def poll_progress(
    handle: Handle,
    result: asyncio.Future[AgentRunResult],
    interrupted: asyncio.Event,
    stream: TextIO,
    streamed: StreamedText,
) -> RunStatusView | None:
    """Poll the `status` query into the progress display until the result is ready or
    following is interrupted; the last view seen."""
    stop = asyncio.ensure_future(interrupted.wait())
    either: list[asyncio.Future[Any]] = [result, stop]
    view = None
    with progress_display(handle.id, stream) as show:
        while not (result.done() or interrupted.is_set()):
            try:
                view = await query_status(handle, FOLLOW_QUERY_TIMEOUT)
            except (RPCError, WorkflowQueryFailedError):
                pass  # not answerable right now (no worker polling yet): the next poll asks again
            else:
                show(view, streamed)
            await asyncio.wait(
                either, timeout=FOLLOW_POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
    stop.cancel()
    return view


# --- reading runs ---------------------------------------------------------------------------------


async def query_status(handle: Handle, timeout: timedelta | None = None) -> RunStatusView:
    view: RunStatusView = await handle.query(
        "status", result_type=RunStatusView, rpc_timeout=timeout
    )
    return view


async def execution_status(handle: Handle) -> str:
    """Temporal's word for where the run is: RUNNING, COMPLETED, FAILED, TERMINATED, ..."""
    description = await handle.describe()
    return description.status.name if description.status else "UNKNOWN"


async def read_snapshot(handle: Handle) -> RunSnapshot:
    """A running run's `status` query, or a finished run's result (a finished run needs no
    worker: its result is in the history)."""
    execution = await execution_status(handle)
    if execution == "RUNNING":
        return snapshot_of_view(handle.id, await query_status(handle))
    return await ended_snapshot(handle.id, execution, handle.result())


def snapshot_of_view(workflow_id: str, view: RunStatusView) -> RunSnapshot:
    code = ExitCode.PAUSED if view.phase in PAUSED_PHASES else ExitCode.RUNNING
    return snapshot(workflow_id, "RUNNING", code, status=view)


async def ended_snapshot(
    workflow_id: str, execution: str, result: Awaitable[AgentRunResult]
) -> RunSnapshot:
    try:
        ended = await result
    except WorkflowFailureError as exc:
        return snapshot(workflow_id, execution, ExitCode.FAILED, failure=str(exc.cause))
    return snapshot(workflow_id, execution, RESULT_EXIT_CODES[ended.status], result=ended)


def snapshot(
    workflow_id: str,
    execution: str,
    code: ExitCode,
    *,
    status: RunStatusView | None = None,
    result: AgentRunResult | None = None,
    failure: str | None = None,
) -> RunSnapshot:
    """The snapshot, its outcome named after its exit code."""
    return RunSnapshot(
        workflow_id=workflow_id,
        execution=execution,
        outcome=code.name.lower(),
        exit_code=code,
        status=status,
        result=result,
        failure=failure,
    )


def report_snapshot(found: RunSnapshot, as_json: bool) -> int:
    if as_json:
        print_json(found)
    else:
        print(format_snapshot(found), flush=True)
    return found.exit_code


async def show_transcript(
    handle: Handle, store_url: str, keys: KeyRing | None, as_json: bool
) -> int:
    """The run's conversation from the store (decrypted with `keys`, the codec's), walked
    back from the run's transcript head. A store that cannot be opened or reached exits 2
    before the run is read; one that lacks the run's transcript, or holds it under a key not
    in `keys`, 1."""
    where = f"the store at {mask_url(store_url)} (AGENTLOOP_STORE_URL: where workers write)"
    print(f"reading {where}", file=sys.stderr, flush=True)
    try:
        store = open_transcript_store(store_url, keys)
    except StoreUnavailable as exc:
        raise CommandError(f"cannot open {where}: {exc}", ExitCode.USAGE) from None
    try:
        found = await read_snapshot(handle)
        head = await transcript_head(handle, found)
        events = await read_transcript(store, head)
    except StoreUnavailable as exc:
        raise CommandError(f"cannot reach {where}: {exc}", ExitCode.USAGE) from None
    except StoreError as exc:
        raise CommandError(
            f"cannot read the transcript of {handle.id} from {where}: {exc}", ExitCode.FAILED
        ) from None
    finally:
        await store.close()
    if as_json:
        print_json(events)
    elif events:
        ledger = found.result or found.status
        print(format_transcript(events, ledger.calls if ledger else []))
    else:
        print(f"{handle.id} has no transcript yet", file=sys.stderr)
    return ExitCode.OK


async def transcript_head(handle: Handle, found: RunSnapshot) -> str:
    if found.result is not None:
        return found.result.transcript_head
    # A run that failed without a result: its state up to the failure tells the head.
    view = found.status or await query_status(handle)
    return view.transcript_head


async def list_runs(client: Client, args: argparse.Namespace) -> int:
    """A visibility query over the runs' search attributes; on a namespace without them, a
    line saying which are missing and how to register them (not an empty list: no run could
    be found by them there)."""
    try:
        missing = await missing_attributes(client)
    except RPCError as exc:
        if exc.status not in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED):
            raise
        missing = []  # the server does not say: the query itself will tell
    if missing:
        server = client.service_client.config.target_host
        print(f"agentloop list: {unregistered(missing, client.namespace, server)}", file=sys.stderr)
        return ExitCode.USAGE
    phase = "awaiting_approval" if args.awaiting_approval else args.phase
    query = search.list_query(
        phase=phase, status=args.status, provider=args.provider, tenant=args.tenant
    )
    found = []
    async for execution in client.list_workflows(query, limit=args.limit):
        attributes = execution.typed_search_attributes
        found.append(
            ListedRun(
                workflow_id=execution.id,
                run_id=execution.run_id,
                phase=attributes.get(search.AGENT_PHASE),
                status=attributes.get(search.AGENT_STATUS),
                provider=attributes.get(search.AGENT_PROVIDER),
                tenant=attributes.get(search.AGENT_TENANT),
                started=execution.start_time.isoformat() if execution.start_time else None,
            )
        )
    if args.json:
        print_json(found)
    else:
        for run in found:
            print(f"{run.workflow_id}  {run.phase}  {run.status}  {run.provider}  {run.tenant}")
        print(f"{len(found)} run(s) matching {query}", file=sys.stderr)
    return ExitCode.OK


async def export_history(handle: Handle, output: Path | None, as_json: bool) -> int:
    """The run's full history (so far, if it still runs) as the JSON `replay` reads."""
    history = await handle.fetch_history()
    text = history.to_json() + "\n"
    if output is None:
        sys.stdout.write(text)  # one JSON document already, --json or not
        return ExitCode.OK
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.FAILED
    written = HistoryWritten(workflow_id=handle.id, path=output, events=len(history.events))
    if as_json:
        print_json(written)
    else:
        print(f"wrote {output}: {written.events} events of {handle.id}")
    return ExitCode.OK


# --- driving runs ---------------------------------------------------------------------------------


def private_key(args: argparse.Namespace, variable: str) -> Ed25519PrivateKey | None:
    """The key of `--key`, or of the file `variable` names (None: neither is given)."""
    key_file = args.key or os.environ.get(variable) or None
    try:
        return load_private_key(key_file) if key_file else None
    except SigningError as exc:
        raise CommandError(f"agentloop {args.command}: {exc}", ExitCode.USAGE) from None


async def decide(handle: Handle, args: argparse.Namespace, request: ApprovalDecision) -> int:
    """Send a decision through the `decide_approval` update, which says whether it counted;
    the decision is bound to the args digest shown here, and signed with `--key` (or
    $AGENTLOOP_APPROVER_KEY) for this run chain."""
    shown: dict[str, Any] | None = None
    approved = request.approved
    digest = args.digest
    key = private_key(args, "AGENTLOOP_APPROVER_KEY")
    view = None
    if digest is None or key is not None:
        found = await read_snapshot(handle)
        if found.status is None:
            raise run_ended(found, "decision")
        view = found.status
    if digest is None:
        assert view is not None
        shown = next((p for p in view.pending_approvals if p["call_id"] == args.call_id), None)
        if shown is None:
            reason = f"no call {args.call_id!r} is waiting for approval"
            unknown = Decision(
                workflow_id=handle.id,
                call_id=args.call_id,
                approved=approved,
                accepted=False,
                reason=reason,
            )
            return report_decision(unknown, as_json=args.json)
        digest = shown["args_digest"]
        if not args.json:
            print(f"{shown['tool']} {json.dumps(shown['arguments'])}  [{digest}]")
        request = request.model_copy(update={"args_digest": digest})
    if key is not None:
        assert view is not None
        run = view.run_chain[0] if view.run_chain else ""
        request = sign_decision(request, key, workflow_id=handle.id, run=run)
    verdict = await unless_ended(
        handle,
        "decision",
        handle.execute_update("decide_approval", request, result_type=ApprovalVerdict),
    )
    decision = Decision(
        workflow_id=handle.id,
        call_id=args.call_id,
        approved=approved,
        accepted=verdict.accepted,
        reason=verdict.reason,
        args_digest=digest,
        tool=shown["tool"] if shown else None,
        arguments=shown["arguments"] if shown else None,
    )
    return report_decision(decision, as_json=args.json)


async def resolve(handle: Handle, args: argparse.Namespace, request: ResolveRequest) -> int:
    """The `resolve` signal, signed with `--key` (or $AGENTLOOP_APPROVER_KEY) for this run
    chain: a worker with approver keys takes only a signed word."""
    key = private_key(args, "AGENTLOOP_APPROVER_KEY")
    if key is not None:
        found = await read_snapshot(handle)
        if found.status is None:
            raise run_ended(found, SIGNAL_NOUNS["resolve"])
        chain = found.status.run_chain
        run = chain[0] if chain else ""
        request = sign_resolution(request, key, workflow_id=handle.id, run=run)
    done = f"resolution sent for {args.call_id}: {args.outcome}"
    return await send_signal(handle, "resolve", request, done, as_json=args.json)


def report_decision(decision: Decision, as_json: bool) -> int:
    if as_json:
        print_json(decision)
    if not decision.accepted:
        print(f"decision refused: {decision.reason}", file=sys.stderr)
        return ExitCode.FAILED
    if not as_json:
        print(f"{'approved' if decision.approved else 'rejected'}: {decision.call_id}")
    return ExitCode.OK


async def send_signal(
    handle: Handle,
    name: Literal["resolve", "cancel", "message"],
    request: ResolveRequest | CancelRequest | UserMessage,
    done: str,
    as_json: bool,
) -> int:
    """`resolve`, `cancel` and `message`: delivered is all a signal can tell; the run acts in
    its own time."""
    await unless_ended(handle, SIGNAL_NOUNS[name], handle.signal(name, request))
    if as_json:
        print_json(SignalSent(workflow_id=handle.id, signal=name, request=request))
    else:
        print(done)
    return ExitCode.OK


T = TypeVar("T")
SIGNAL_NOUNS = {"resolve": "resolution", "cancel": "cancel request", "message": "message"}


async def unless_ended(handle: Handle, what: str, sending: Awaitable[T]) -> T:
    """`sending` (a signal or update to the run); when the server says the run is not there
    because it has ended, a `CommandError` saying so, with how it ended."""
    try:
        return await sending
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        try:
            found = await read_snapshot(handle)
        except RPCError:
            raise exc from None  # no such run at all: "not found" it is
        if found.status is not None:
            raise
        raise run_ended(found, what) from None


def run_ended(found: RunSnapshot, what: str) -> CommandError:
    """A run that ended takes no `what` (decision, message, ...) any more: exit 1."""
    status = found.result.status if found.result is not None else found.execution.lower()
    return CommandError(
        f"run {found.workflow_id!r} has ended ({status}): it takes no {what} any more;"
        f" `agentloop status {found.workflow_id}` shows how it ended",
        ExitCode.FAILED,
    )
