"""Client-side: driving a run (`approve`, `reject`, `resolve`, `message`, `cancel`): decisions
signed with the person's key, bound to what the run shows, refused plainly once it ended."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.service import RPCError, RPCStatusCode

from agentloop.argument_edits import EditError, edited_arguments
from agentloop.cli.output import (
    CommandError,
    Decision,
    ExitCode,
    RunSnapshot,
    SignalSent,
    print_json,
)
from agentloop.cli.reading import read_snapshot
from agentloop.contract import (
    CANCEL_SIGNAL,
    MESSAGE_SIGNAL,
    RESOLVE_SIGNAL,
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    PendingApproval,
    ResolveRequest,
    UserMessage,
)
from agentloop.run_client import RunClient
from agentloop.runtime.signing import (
    SigningError,
    load_private_key,
    sign_decision,
    sign_resolution,
    sign_word,
)


def private_key(args: argparse.Namespace, variable: str) -> Ed25519PrivateKey | None:
    """The key of `--key`, or of the file `variable` names (None: neither is given)."""
    key_file = args.key or os.environ.get(variable) or None
    try:
        return load_private_key(key_file) if key_file else None
    except SigningError as exc:
        raise CommandError(f"agentloop {args.command}: {exc}", ExitCode.USAGE) from None


async def decide(run: RunClient, args: argparse.Namespace, request: ApprovalDecision) -> int:
    """Send a decision through the `decide_approval` update, which says whether it counted;
    the decision is bound to the args digest shown here, and signed with `--key` (or
    $AGENTLOOP_APPROVER_KEY) for this run chain."""
    shown: PendingApproval | None = None
    approved = request.approved
    digest = args.digest
    key = private_key(args, "AGENTLOOP_APPROVER_KEY")
    editing = bool(getattr(args, "set", None) or getattr(args, "patch", None))
    view = None
    if digest is None or key is not None or editing:
        found = await read_snapshot(run)
        if found.status is None:
            raise run_ended(found, "decision")
        view = found.status
    if digest is None or editing:
        assert view is not None
        shown = next((p for p in view.pending_approvals if p.call_id == args.call_id), None)
        if shown is None:
            reason = f"no call {args.call_id!r} is waiting for approval"
            unknown = Decision(
                workflow_id=run.id,
                call_id=args.call_id,
                approved=approved,
                accepted=False,
                reason=reason,
            )
            return report_decision(unknown, as_json=args.json)
        digest = digest or shown.args_digest
        if not args.json:
            print(f"{shown.tool} {json.dumps(shown.arguments)}  [{digest}]")
        request = request.model_copy(update={"args_digest": digest})
    if editing:
        assert shown is not None
        request = request.model_copy(update={"edited_arguments": _edited(args, shown)})
        if not args.json:
            print(f"approving with {json.dumps(request.edited_arguments)}")
    if key is not None:
        assert view is not None
        first = view.run_chain[0] if view.run_chain else ""
        request = sign_decision(request, key, workflow_id=run.id, run=first)
    verdict: ApprovalVerdict = await unless_ended(run, "decision", run.decide(request))
    decision = Decision(
        workflow_id=run.id,
        call_id=args.call_id,
        approved=approved,
        accepted=verdict.accepted,
        reason=verdict.reason,
        args_digest=digest,
        tool=shown.tool if shown else None,
        arguments=shown.arguments if shown else None,
        edited_arguments=request.edited_arguments,
    )
    return report_decision(decision, as_json=args.json)


def _edited(args: argparse.Namespace, shown: PendingApproval) -> dict[str, Any]:
    try:
        return edited_arguments(shown.arguments, args.set, args.patch)
    except EditError as exc:
        raise CommandError(f"agentloop {args.command}: {exc}", ExitCode.USAGE) from None


async def send_word(
    run: RunClient,
    args: argparse.Namespace,
    request: ResolveRequest | UserMessage | CancelRequest,
    done: str,
) -> int:
    """`resolve`, `message` and `cancel`, signed with `--key` (or $AGENTLOOP_APPROVER_KEY) for
    this run chain: a worker with approver keys takes only signed ones."""
    key = private_key(args, "AGENTLOOP_APPROVER_KEY")
    if key is not None:
        if isinstance(request, CancelRequest) and not request.requested_by:
            raise CommandError(
                "agentloop cancel --key: say whose key it is with --by NAME", ExitCode.USAGE
            )
        found = await read_snapshot(run)
        if found.status is None:
            raise run_ended(found, SIGNAL_NOUNS[signal_of(request)])
        chain = found.status.run_chain
        first = chain[0] if chain else ""
        if isinstance(request, ResolveRequest):
            request = sign_resolution(request, key, workflow_id=run.id, run=first)
        elif isinstance(request, UserMessage):
            request = sign_word(request, key, workflow_id=run.id, run=first)
        else:
            request = sign_word(request, key, workflow_id=run.id, run=first)
    return await send_signal(run, request, done, as_json=args.json)


def signal_of(request: ResolveRequest | UserMessage | CancelRequest) -> str:
    if isinstance(request, ResolveRequest):
        return RESOLVE_SIGNAL
    return CANCEL_SIGNAL if isinstance(request, CancelRequest) else MESSAGE_SIGNAL


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
    run: RunClient,
    request: ResolveRequest | CancelRequest | UserMessage,
    done: str,
    as_json: bool,
) -> int:
    """`resolve`, `cancel` and `message`: delivered is all a signal can tell; the run acts in
    its own time."""
    name = signal_of(request)
    if isinstance(request, ResolveRequest):
        sending = run.resolve(request)
    elif isinstance(request, CancelRequest):
        sending = run.cancel(request)
    else:
        sending = run.answer(request)
    await unless_ended(run, SIGNAL_NOUNS[name], sending)
    if as_json:
        print_json(SignalSent(workflow_id=run.id, signal=name, request=request))
    else:
        print(done)
    return ExitCode.OK


T = TypeVar("T")
SIGNAL_NOUNS = {
    RESOLVE_SIGNAL: "resolution",
    CANCEL_SIGNAL: "cancel request",
    MESSAGE_SIGNAL: "message",
}


async def unless_ended(run: RunClient, what: str, sending: Awaitable[T]) -> T:
    """`sending` (a signal or update to the run); when the server says the run is not there
    because it has ended, a `CommandError` saying so, with how it ended."""
    try:
        return await sending
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        try:
            found = await read_snapshot(run)
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
