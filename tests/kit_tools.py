"""A team's tool module for the tests of `agentloop.testing` (tests/operations/test_testing.py): an
in-memory desk, and a tool for each way a run waits for a person. The harness's worker loads
it by name (`tests.kit_tools`), in the test process, so tests read the same `DESK`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import agentloop
from agentloop import Outcome, ToolContext, Verdict, VerifyContext


@dataclass
class Desk:
    notes: dict[str, str] = field(default_factory=lambda: {"N-1": "printer broken"})
    sent: dict[str, str] = field(default_factory=dict)
    """Messages sent, by idempotency key."""
    closed: dict[str, str] = field(default_factory=dict)
    """Closed notes, with the resolution code a person gave."""


DESK = Desk()


@agentloop.dependencies
async def desk() -> AsyncIterator[Desk]:
    yield DESK


@agentloop.tool(effect="read", scopes=["desk:read"])
async def read_note(ctx: ToolContext[Desk], note_id: str) -> Any:
    """A note, for the principal's tenant `acme` only."""
    if ctx.principal.tenant != "acme":
        raise agentloop.PermissionDenied("not this tenant's desk")
    return agentloop.WithState(ctx.deps.notes[note_id], {"note": note_id})


async def _was_sent(ctx: ToolContext[Desk], body: str) -> Outcome:
    if ctx.idempotency_key in ctx.deps.sent:
        return Outcome(state="applied", record=ctx.deps.sent[ctx.idempotency_key])
    return Outcome(state="not_applied")


@agentloop.tool(effect="write", needs_approval=True, approvers=["boss"], lookup_outcome=_was_sent)
async def send(ctx: ToolContext[Desk], body: str) -> str:
    """Send a message; the boss approves each one first."""
    ctx.deps.sent[ctx.idempotency_key] = body
    return "sent"


@agentloop.tool(effect="write")
async def close(ctx: ToolContext[Desk], note_id: str) -> str:
    """Close a note; asks for the resolution code first."""
    if ctx.reply is None:
        raise agentloop.InputNeeded("Which resolution code?", {"note_id": note_id})
    ctx.deps.closed[ctx.reply.pending["note_id"]] = ctx.reply.text
    return f"closed with {ctx.reply.text}"


async def _nobody_knows(ctx: ToolContext[Desk], body: str) -> Outcome:
    return Outcome(state="unknown", record="the post office does not say")


@agentloop.tool(effect="write", lookup_outcome=_nobody_knows)
async def post(ctx: ToolContext[Desk], body: str) -> str:
    """Post a letter: its answer is always lost, and nobody can say whether it went."""
    raise agentloop.OutcomeUnknown("the answer was lost")


@agentloop.verifier("message_sent")
async def message_sent(ctx: VerifyContext) -> Verdict:
    """Done once the desk holds a message this run sent."""
    for call in ctx.calls:
        if call.tool == "send" and (await ctx.lookup(call)).state == "applied":
            return Verdict(passed=True, reason=f"{call.call_id} is at the desk")
    return Verdict(passed=False, reason="no message of this run is at the desk")
