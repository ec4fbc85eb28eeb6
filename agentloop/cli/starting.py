"""Client-side: starting a run (`run`, `continue`) from the command line, and following it
to its end."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import uuid
from datetime import timedelta
from typing import Any, TextIO

from temporalio.client import Client, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError

from agentloop import search
from agentloop.cli.driving import private_key
from agentloop.cli.output import CommandError, ExitCode, RunSnapshot, StartedRun, print_json
from agentloop.cli.progress import StreamedText, progress_display
from agentloop.cli.reading import (
    ended_snapshot,
    execution_status,
    read_snapshot,
    report_snapshot,
    snapshot_of_view,
)
from agentloop.contract import AgentRunInput, AgentRunResult, Limits, Principal, RunStatusView
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings

FOLLOW_POLL_SECONDS = 0.5
FOLLOW_QUERY_TIMEOUT = timedelta(seconds=5)
"""A status query that takes longer (no worker polling) is skipped; the next poll asks again."""


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
        " travel, travel_booking, refunds; or a file of the folder given to `agentloop dev"
        " --scripts DIR`)",
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
        fallbacks=[_fallback(given) for given in args.fallbacks],
        tools=args.tools,
        principal=Principal(subject=args.subject, tenant=args.tenant, scopes=args.scopes),
        limits=Limits.model_validate(limits),
        stream=not args.no_stream,
        publish_events=settings.publish_events == "on",
        task_family=args.family,
        require_verification=args.require_verification,
        **({"compensate": args.compensate} if args.compensate else {}),
    )
    problem = search.run_input_problem(run_input)
    if problem:
        raise CommandError(f"invalid run input: {problem}", ExitCode.USAGE)
    return run_input


def _fallback(given: str) -> dict[str, str]:
    """`--fallback PROVIDER:MODEL` as `AgentRunInput.fallbacks` takes it (the provider is
    checked there, naming the field)."""
    provider, colon, model = given.partition(":")
    if not colon or not provider or not model:
        raise CommandError(
            f"--fallback {given!r}: expected PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-5",
            ExitCode.USAGE,
        )
    return {"provider": provider, "model": model}


def for_people(args: argparse.Namespace) -> TextIO:
    """Where messages for people go: stdout, except under --json, which keeps stdout for the
    one JSON document."""
    return sys.stderr if args.json else sys.stdout


async def run(
    client: Client, settings: Settings, args: argparse.Namespace, run_input: AgentRunInput
) -> int:
    workflow_id = args.id or f"agent-run-{uuid.uuid4().hex[:12]}"
    # Indexed where the namespace has agentloop's search attributes, unindexed elsewhere.
    run_client = await RunClient.start(
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
    following = await follow(run_client, for_people(args))
    return report_snapshot(following, as_json=args.json)


async def continue_run(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    """The previous run's input (through continue-as-new: its principal, tenant included),
    with a new task, the budget granted here, and continue_from."""
    started = await RunClient(client, args.run_id).start_input()
    if started is None:
        raise CommandError(
            f"run {args.run_id!r} was started without an input agentloop reads:"
            " there is nothing to continue",
            ExitCode.FAILED,
        )
    previous = started.model_dump(mode="json", exclude_unset=True)
    limits = {**previous.get("limits", {}), "max_model_calls": args.max_model_calls}
    if args.max_tool_calls is not None:
        limits["max_tool_calls"] = args.max_tool_calls
    run_input = AgentRunInput.model_validate(
        {
            **previous,
            "task": args.task,
            "limits": limits,
            "continue_from": args.run_id,
            # Signed for the previous run's input and id: the new run is signed with --key.
            "principal_signature": None,
        }
    )
    args.id = args.id or f"{args.run_id}-continued-{uuid.uuid4().hex[:6]}"
    return await run(client, settings, args, run_input)


async def follow(run: RunClient, stream: TextIO) -> RunSnapshot:
    """Show the run's progress on `stream` until it ends, with the model's text as the run's
    stream brings it; its end, or where it was when Ctrl-C stopped following (the run itself
    goes on)."""
    result = asyncio.ensure_future(run.result())
    interrupted = asyncio.Event()
    streamed = StreamedText()
    reading = asyncio.ensure_future(read_stream(run, streamed))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    try:
        view = await poll_progress(run, result, interrupted, stream, streamed)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        reading.cancel()
    if result.done():
        return await ended_snapshot(run.id, await execution_status(run), result)
    result.cancel()
    print(
        f"stopped following {run.id}; the run goes on: agentloop status {run.id}",
        file=sys.stderr,
    )
    return snapshot_of_view(run.id, view) if view else await read_snapshot(run, wedged=True)


async def read_stream(run: RunClient, streamed: StreamedText) -> None:
    """The run's stream into `streamed`, for as long as following goes on. The stream is
    display: a run that publishes none (or a server that cannot serve it) shows no text."""
    with contextlib.suppress(RPCError, WorkflowUpdateFailedError):
        async for event in run.watch():
            streamed.take(event)


async def poll_progress(
    run: RunClient,
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
    with progress_display(run.id, stream) as show:
        while not (result.done() or interrupted.is_set()):
            try:
                view = await run.status(timeout=FOLLOW_QUERY_TIMEOUT)
            except (RPCError, WorkflowQueryFailedError):
                pass  # not answerable right now (no worker polling yet): the next poll asks again
            else:
                show(view, streamed)
            await asyncio.wait(
                either, timeout=FOLLOW_POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
    stop.cancel()
    return view
