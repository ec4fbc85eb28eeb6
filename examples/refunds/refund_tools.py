"""The refunds team's tools, as the agent sees them: read an order, refund it.

Loaded by a worker with `AGENTLOOP_TOOLS=refund_tools` (this folder on PYTHONPATH). The
system of record is `refunds_service.py`, reached at `REFUNDS_URL`. agentloop owns the
durable parts (retries, approvals, idempotency keys, finding out what a lost write did); this
module owns what only the team knows: who may see which order, what a valid refund is, and
how to ask the service whether a refund happened.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

import aiohttp
from pydantic import Field

import agentloop
from agentloop import (
    BusinessRefusal,
    Outcome,
    OutcomeUnknown,
    PermissionDenied,
    Principal,
    ToolContext,
    TransientError,
    Verdict,
    VerifyContext,
)

DEFAULT_URL = "http://127.0.0.1:8790"
LARGE_REFUND_EUR = 100.0
"""Above this, a human in finance approves the refund before it is made."""


@dataclass(frozen=True)
class RefundsApi:
    """The module's dependencies (`ctx.deps`): one HTTP session for the worker's life."""

    session: aiohttp.ClientSession
    base_url: str

    async def get(self, path: str) -> tuple[int, Any]:
        try:
            async with self.session.get(self.base_url + path) as resp:
                return resp.status, await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            # A read changes nothing, so agentloop may simply try it again.
            raise TransientError(f"refunds service unreachable: {exc!r}") from exc

    async def order(self, order_id: str) -> dict[str, Any]:
        status, body = await self.get(f"/orders/{quote(order_id, safe='')}")
        if status == 404:
            raise BusinessRefusal(f"there is no order {order_id}")
        if status != 200:
            raise TransientError(f"GET /orders/{order_id} answered {status}")
        return dict(body)


@agentloop.dependencies
async def refunds_api(settings: agentloop.Settings) -> AsyncIterator[RefundsApi]:
    # Read when the worker starts, not at import: tests point it at their own service.
    base_url = os.environ.get("REFUNDS_URL", DEFAULT_URL).rstrip("/")
    timeout = aiohttp.ClientTimeout(total=settings.tool_http_timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield RefundsApi(session, base_url)


OrderId = Annotated[str, Field(pattern=r"^[A-Z]-[0-9]+$", description="e.g. A-17")]
Amount = Annotated[float, Field(gt=0, description="in EUR")]


async def _own_order(ctx: ToolContext[RefundsApi], order_id: str) -> dict[str, Any]:
    """The order, if it is the principal's tenant's: the object-level check only this team's
    code can make (a scope says "may refund", not "may refund this order")."""
    order = await ctx.deps.order(order_id)
    if order["tenant"] != ctx.principal.tenant:
        raise PermissionDenied(f"order {order_id} belongs to another tenant")
    return order


@agentloop.tool(effect="read")
async def read_order(ctx: ToolContext[RefundsApi], order_id: OrderId) -> dict[str, Any]:
    """Look up one of the customer's orders: its amount in EUR and whether it has already
    been refunded. Read the order before refunding it."""
    return await _own_order(ctx, order_id)


async def _may_refund(ctx: ToolContext[RefundsApi], order_id: OrderId, amount: Amount) -> None:
    # Runs before approval is asked for: a finance approver never sees a refund that the
    # service would refuse anyway.
    order = await _own_order(ctx, order_id)
    if order["refunded"]:
        raise BusinessRefusal(f"order {order_id} is already refunded")
    if amount > order["amount"]:
        raise BusinessRefusal(f"{amount} EUR is more than order {order_id}'s {order['amount']} EUR")


async def _refund_made(ctx: ToolContext[RefundsApi], order_id: OrderId, amount: Amount) -> Outcome:
    status, body = await ctx.deps.get(f"/refunds/operations/{quote(ctx.idempotency_key, safe='')}")
    if status == 404:
        return Outcome(state="not_applied")
    if status == 200 and body.get("state") == "applied":
        return Outcome(state="applied", record=body.get("record"))
    raise TransientError(f"refund lookup answered {status}")


@agentloop.tool(
    effect="write",
    scopes=["refunds:write"],
    needs_approval="large_refund",
    precondition=_may_refund,
    lookup_outcome=_refund_made,
)
async def refund(ctx: ToolContext[RefundsApi], order_id: OrderId, amount: Amount) -> Any:
    """Refund an order to the customer's original payment method, fully or in part. An
    order is refunded at most once, and never for more than its amount. Refunds over 100 EUR
    wait for a finance approver first; the refund is only made once approved."""
    # Ownership and amount were checked by the precondition before this runs.
    try:
        async with ctx.deps.session.post(
            ctx.deps.base_url + "/refunds",
            json={"order_id": order_id, "amount": amount},
            headers={"Idempotency-Key": ctx.idempotency_key},
        ) as resp:
            status, body = resp.status, await resp.json(content_type=None)
    except aiohttp.ClientConnectorError as exc:
        # Never connected, so nothing was sent: safe to try again under the same key.
        raise TransientError(f"refunds service unreachable: {exc!r}") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        # Sent, but no answer: the refund may have been made. agentloop asks `_refund_made`.
        raise OutcomeUnknown(f"no answer to the refund: {exc!r}") from exc
    if status >= 500:
        raise OutcomeUnknown(f"refunds service error {status}")
    if status >= 400:
        raise BusinessRefusal(str(body.get("error", {}).get("message", f"refused ({status})")))
    return body


@agentloop.approval_rule("large_refund")
def large_refund(arguments: Mapping[str, Any], principal: Principal) -> bool:
    return float(arguments.get("amount", 0)) > LARGE_REFUND_EUR


@agentloop.verifier("refund_recorded")
async def refund_recorded(ctx: VerifyContext) -> Verdict:
    """An answer is final only once the service holds a refund this run made: the model
    saying "refunded" is not evidence."""
    for call in ctx.calls:
        if call.tool == "refund" and call.idempotency_key:
            outcome = await ctx.lookup(call)
            if outcome.state == "applied":
                return Verdict(passed=True, reason=f"refund {call.call_id} is recorded")
    return Verdict(passed=False, reason="no refund of this run is recorded at the service")
