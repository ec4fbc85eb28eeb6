"""Activity-side: support-desk tools over the example service (two reads, and a reply).

`send_reply` emails a customer, so it needs approval, and the approval binds to the exact
arguments (the args digest covers recipient and body): an approved reply cannot be re-aimed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agentloop.tool_spec import Outcome
from agentloop.tools.contract import ToolContext, define_tool
from agentloop.tools.http import (
    WRITE_TOOL_TIMEOUT_SECONDS,
    ServiceClient,
    idempotency_headers,
    lookup_operation,
)

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


def _client(ctx: ToolContext) -> ServiceClient:
    client: ServiceClient = ctx.services.example
    return client


async def _read_ticket(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await _client(ctx).get_json(f"/support/tickets/{quote(args['ticket_id'], safe='')}")


async def _search_policy(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await _client(ctx).get_json("/support/policies", {"query": args["query"]})


async def _send_reply(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await _client(ctx).post_json(
        f"/support/tickets/{quote(args['ticket_id'], safe='')}/replies",
        {"recipient": args["recipient"], "body": args["body"]},
        headers=idempotency_headers(ctx),
    )


async def _reply_outcome(idempotency_key: str, ctx: ToolContext) -> Outcome:
    path = f"/support/operations/{quote(idempotency_key, safe='')}"
    return await lookup_operation(_client(ctx), path)


read_ticket = define_tool(
    "read_ticket",
    ReadTicketArgs,
    _read_ticket,
    description="A support ticket: customer email, subject, message, status and replies so far.",
    required_scopes=["tickets:read"],
)

search_policy = define_tool(
    "search_policy",
    SearchPolicyArgs,
    _search_policy,
    description="Search the support policies by keywords; returns matching policy texts.",
    required_scopes=["tickets:read"],
)

send_reply = define_tool(
    "send_reply",
    SendReplyArgs,
    _send_reply,
    lookup_outcome=_reply_outcome,
    description="Email a reply to a ticket's customer. Needs a human's approval of the exact "
    "recipient and text.",
    effect="write",
    required_scopes=["tickets:write"],
    needs_approval=True,
    action="support.send_reply",
    # A rejected draft is feedback, not the end of the ticket: the model may write a better one
    # (which needs its own approval: other text, other digest).
    on_reject="tell_model",
    timeout_seconds=WRITE_TOOL_TIMEOUT_SECONDS,
)

SUPPORT_TOOLS = [read_ticket, search_policy, send_reply]
