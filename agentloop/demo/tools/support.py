"""Support-desk tools over the example service (two reads, and a reply).

`send_reply` emails a customer, so it needs approval, and the approval binds to the exact
arguments (the args digest covers recipient and body): an approved reply cannot be re-aimed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agentloop.activity_io import Verdict
from agentloop.demo.tools.http import (
    WRITE_TOOL_TIMEOUT_SECONDS,
    ExampleDeps,
    idempotency_headers,
    lookup_operation,
)
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import ToolContext, WithState
from agentloop.tools.decorator import VerifyContext, tool, verifier

TICKET_ID = r"^T-[0-9]{1,8}$"
EMAIL = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"


class ReadTicketArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket_id: str = Field(pattern=TICKET_ID, description="e.g. T-1001")


class SearchPolicyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=3, max_length=200, description="keywords, e.g. 'late refund'")


class SendReplyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket_id: str = Field(pattern=TICKET_ID, description="e.g. T-1001")
    recipient: str = Field(pattern=EMAIL, max_length=254, description="the email to send to")
    body: str = Field(min_length=1, max_length=5_000, description="the reply text")


@tool(effect="read", scopes=["tickets:read"])
async def read_ticket(ctx: ToolContext[ExampleDeps], args: ReadTicketArgs) -> Any:
    """A support ticket: customer email, subject, message, status and replies so far."""
    ticket = await ctx.deps.example.get_json(f"/support/tickets/{quote(args.ticket_id, safe='')}")
    return WithState(ticket, {"ticket": args.ticket_id})


@tool(effect="read", scopes=["tickets:read"])
async def search_policy(ctx: ToolContext[ExampleDeps], args: SearchPolicyArgs) -> Any:
    """Search the support policies by keywords; returns matching policy texts."""
    found = await ctx.deps.example.get_json("/support/policies", {"query": args.query})
    results = found.get("results") if isinstance(found, dict) else None
    best = results[0].get("policy_id") if isinstance(results, list) and results else None
    return WithState(found, {"policy": best})  # None: no policy adopted (yet)


async def _reply_outcome(ctx: ToolContext[ExampleDeps], args: SendReplyArgs) -> Outcome:
    path = f"/support/operations/{quote(ctx.idempotency_key, safe='')}"
    asked = {"ticket_id": args.ticket_id, "recipient": args.recipient, "body": args.body}
    return await lookup_operation(ctx.deps.example, path, asked)


@tool(
    effect="write",
    scopes=["tickets:write"],
    needs_approval=True,
    action="support.send_reply",
    # A rejected draft is feedback, not the end of the ticket: the model may write a better one
    # (which needs its own approval: other text, other digest).
    on_reject="tell_model",
    timeout_seconds=WRITE_TOOL_TIMEOUT_SECONDS,
    lookup_outcome=_reply_outcome,
)
async def send_reply(ctx: ToolContext[ExampleDeps], args: SendReplyArgs) -> Any:
    """Email a reply to a ticket's customer. Needs a human's approval of the exact recipient
    and text."""
    sent = await ctx.deps.example.post_json(
        f"/support/tickets/{quote(args.ticket_id, safe='')}/replies",
        {"recipient": args.recipient, "body": args.body},
        headers=idempotency_headers(ctx),
    )
    return WithState(sent, {"reply_sent_to": args.recipient})


@verifier("ticket_answered")
async def ticket_answered(ctx: VerifyContext) -> Verdict:
    """The ticket the run read was answered: its task state names the ticket and a reply sent,
    and the system of record has that reply under its key."""
    ticket, sent = ctx.task_state.get("ticket"), ctx.task_state.get("reply_sent_to")
    if not ticket or not sent:
        return Verdict(
            passed=False, reason=f"task state shows no reply sent: {dict(ctx.task_state)}"
        )
    replies = [
        c for c in ctx.calls if c.tool == "send_reply" and c.arguments.get("ticket_id") == ticket
    ]
    for call in replies:
        if (await ctx.lookup(call)).state == "applied":
            return Verdict(passed=True, reason=f"{ticket} answered ({call.call_id})")
    return Verdict(passed=False, reason=f"no reply to {ticket} is on record")
