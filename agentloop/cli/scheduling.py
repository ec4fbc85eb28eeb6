"""`agentloop schedule create|list|pause|resume|trigger|delete`: runs on a schedule
(`agentloop.operations.schedules`), the run options read as `agentloop run` reads them."""

from __future__ import annotations

import argparse
import sys

from temporalio.client import Client, ScheduleAlreadyRunningError
from temporalio.service import RPCError, RPCStatusCode

from agentloop.cli.output import CommandError, ExitCode, print_json
from agentloop.contract import AgentRunInput
from agentloop.operations import schedules
from agentloop.runtime.config import Settings

UNSIGNABLE = (
    "agentloop schedule create: this configuration requires signed starts"
    " (AGENTLOOP_STARTER_KEYS), and a scheduled run cannot be signed: a start signature is for"
    " one run id, once, within ten minutes, and each firing is a new run the Temporal server"
    " starts. Workers requiring signatures would refuse every firing. Schedule runs only on"
    " workers with AGENTLOOP_PRINCIPAL_SIGNING=optional (their own task queue), or start them"
    " from a signing front end on its own timer."
)


def check_signing(settings: Settings) -> None:
    """Refuse (exit 2) a schedule whose every run the workers would refuse, unsigned."""
    if settings.principal_signatures().required:
        raise CommandError(UNSIGNABLE, ExitCode.USAGE)


async def schedule_command(
    client: Client, settings: Settings, args: argparse.Namespace, run_input: AgentRunInput | None
) -> int:
    """`run_input`: what `create` fires, read from the command line before connecting."""
    try:
        if args.schedule_command == "create":
            assert run_input is not None
            return await create(client, settings, args, run_input)
        if args.schedule_command == "list":
            return await show_list(client, as_json=args.json)
        return await act(client, args)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CommandError(f"schedule {args.name!r} not found", ExitCode.FAILED) from None
        if exc.status == RPCStatusCode.INVALID_ARGUMENT:  # a cron expression Temporal refused
            raise CommandError(f"agentloop schedule: {exc.message}", ExitCode.USAGE) from None
        raise
    except ScheduleAlreadyRunningError:
        raise CommandError(
            f"schedule {args.name!r} exists already: delete it first, or give another name",
            ExitCode.USAGE,
        ) from None


async def create(
    client: Client, settings: Settings, args: argparse.Namespace, run_input: AgentRunInput
) -> int:
    try:
        await schedules.create_schedule(
            client,
            args.name,
            run_input,
            cron=args.cron,
            every=args.every,
            task_queue=settings.task_queue,
            overlap=args.overlap,
            catchup_window=args.catchup_window,
            paused=args.paused,
            note=args.note,
            indexed=args.index,
        )
    except ValueError as exc:
        raise CommandError(f"agentloop schedule create: {exc}", ExitCode.USAGE) from None
    created = await schedules.describe_schedule(client, args.name)
    if args.json:
        print_json(created)
    else:
        print(f"created schedule {args.name}: {', '.join(created.when)}")
        print(f"  runs: {args.name}-<scheduled time>, task family {args.family or args.name}")
    return ExitCode.OK


async def show_list(client: Client, *, as_json: bool) -> int:
    found = await schedules.list_schedules(client)
    if as_json:
        print_json(found)
        return ExitCode.OK
    if not found:
        print("no schedules of agentloop runs", file=sys.stderr)
    for summary in found:
        state = "paused" if summary.paused else "active"
        upcoming = summary.next_times[0] if summary.next_times and not summary.paused else "-"
        print(f"{summary.name}  {state}  {', '.join(summary.when)}  next {upcoming}")
        if summary.note:
            print(f"  note: {summary.note}")
    return ExitCode.OK


async def act(client: Client, args: argparse.Namespace) -> int:
    """pause, resume, trigger, delete: one word to the schedule, said back."""
    command = args.schedule_command
    if command == "pause":
        await schedules.pause_schedule(client, args.name, note=args.note)
    elif command == "resume":
        await schedules.resume_schedule(client, args.name, note=args.note)
    elif command == "trigger":
        await schedules.trigger_schedule(client, args.name)
    else:
        assert command == "delete", command
        await schedules.delete_schedule(client, args.name)
    done = {"pause": "paused", "resume": "resumed", "trigger": "triggered", "delete": "deleted"}
    if args.json:
        print_json({"schedule": args.name, "done": done[command]})
    else:
        print(f"schedule {args.name} {done[command]}")
    return ExitCode.OK
