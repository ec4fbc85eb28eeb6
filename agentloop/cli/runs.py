"""Client-side: the commands about runs, from the command line to the module doing each:
start and follow (`starting.py`), read: status, transcript, list, history (`reading.py`),
drive: approve, reject, resolve, message, cancel (`driving.py`), and reset a wedged run
(`resetting.py`).
"""

from __future__ import annotations

import argparse
from typing import TypeAlias

from temporalio.client import Client

from agentloop.cli.driving import decide, send_word
from agentloop.cli.reading import (
    export_history,
    list_runs,
    read_snapshot,
    report_snapshot,
    show_transcript,
)
from agentloop.cli.resetting import reset
from agentloop.cli.starting import continue_run
from agentloop.cli.stats import show_stats
from agentloop.cli.watching import watch_run
from agentloop.contract import (
    ApprovalDecision,
    CancelRequest,
    ResolveRequest,
    UserMessage,
)
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings

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
            response=getattr(args, "respond", ""),
        )
    if args.command == "resolve":
        return ResolveRequest(
            call_id=args.call_id, outcome=args.outcome, operator=args.operator, note=args.note
        )
    if args.command == "message":
        return UserMessage(text=args.text, sender=args.sender)
    if args.command == "cancel":
        return CancelRequest(reason=args.reason, requested_by=args.by)
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
    if args.command == "reset":
        return await reset(client, args)
    if args.command == "watch":
        return await watch_run(client, args.run_id, args.from_offset, as_json=args.json)
    run = RunClient(client, args.run_id)
    if args.command == "status":
        return report_snapshot(await read_snapshot(run, wedged=True), as_json=args.json)
    if args.command == "transcript":
        return await show_transcript(
            run, settings.store_url, settings.codec_key_ring(), as_json=args.json
        )
    if args.command == "history":
        return await export_history(run, args.output, as_json=args.json)
    if isinstance(request, ApprovalDecision):
        return await decide(run, args, request)
    if isinstance(request, ResolveRequest):
        done = f"resolution sent for {args.call_id}: {args.outcome}"
    elif isinstance(request, UserMessage):
        done = f"message sent to {args.run_id}"
    else:
        assert isinstance(request, CancelRequest), args.command
        done = f"cancel requested for {args.run_id}"
    return await send_word(run, args, request, done)
