"""Client-side: `agentloop reset`, taking a wedged run (its workflow task keeps failing) back
to its last good workflow task, on the workers of today."""

from __future__ import annotations

import argparse
import sys

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentloop.cli.output import CommandError, ExitCode, print_json
from agentloop.operations.failing_tasks import NothingToReset, ResetDone, reset_run


async def reset(client: Client, args: argparse.Namespace) -> int:
    """Reset the run to `--to`, by default to the last workflow task completed before its
    task began to fail; refuses (exit 1) a run that is not wedged unless `--to` is given."""
    reason = args.reason or "agentloop reset: the workflow task kept failing"
    try:
        done = await reset_run(client, args.run_id, to_event_id=args.to, reason=reason)
    except NothingToReset as exc:
        raise CommandError(f"agentloop reset: {exc}", ExitCode.FAILED) from None
    except RPCError as exc:
        if exc.status not in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.NOT_FOUND):
            raise
        raise CommandError(
            f"agentloop reset: the server refused to reset {args.run_id}: {exc.message}",
            ExitCode.FAILED,
        ) from None
    if args.json:
        print_json(done)
    else:
        print(reset_report(done), flush=True)
    return ExitCode.OK


def reset_report(done: ResetDone) -> str:
    lines = []
    if done.failing is not None:
        lines.append(f"{done.workflow_id} was wedged: {done.failing.describe()}")
    lines += [
        f"reset {done.workflow_id} to event {done.reset_event_id} (a completed workflow task): "
        f"run {done.old_run_id} was terminated, run {done.new_run_id} goes on from there",
        "signals and updates received after that event are applied again; "
        f"`agentloop status {done.workflow_id}` shows where it is",
    ]
    if done.failing is not None and done.failing.cause == "NON_DETERMINISTIC_ERROR":
        print(
            "the error was a nondeterminism error: if the workers still run the code that "
            "diverged, the new run will fail the same way",
            file=sys.stderr,
        )
    return "\n".join(lines)
