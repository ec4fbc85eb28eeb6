"""A team's own tool module, written as a user of agentloop would write it: the tests copy it
into a temporary folder outside the package and load it with `AGENTLOOP_TOOLS=team_tools` into
an `agentloop worker` process. Its system of record is the example service (workshops and
the support desk), reached over its own HTTP session."""

from __future__ import annotations

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

WORKSHOP_TENANTS = {"ws-101": "acme", "ws-102": "acme", "ws-103": "globex"}
"""Which tenant each workshop belongs to: the object-level rule only this team's code knows."""
LONG_REPLY = 40
"""A reply longer than this needs a human's approval (the team's own approval rule)."""


@dataclass
class TeamDeps:
    session: aiohttp.ClientSession
    base_url: str

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        try:
            async with self.session.request(method, self.base_url + path, **kwargs) as resp:
                return resp.status, await resp.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:
            raise TransientError(f"service unreachable: {exc}") from exc


@agentloop.dependencies
async def team_service(settings: agentloop.Settings) -> AsyncIterator[TeamDeps]:
    timeout = aiohttp.ClientTimeout(total=settings.tool_http_timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield TeamDeps(session, settings.example_service_url)


WorkshopId = Annotated[str, Field(pattern=r"^ws-[0-9]{3}$", description="e.g. ws-101")]


def _owned(ctx: ToolContext[TeamDeps], workshop_id: str) -> None:
    owner = WORKSHOP_TENANTS.get(workshop_id)
    if owner != ctx.principal.tenant:
        raise PermissionDenied(
            f"workshop {workshop_id} belongs to another tenant than {ctx.principal.tenant}"
        )


@agentloop.tool(effect="read", scopes=["team:read"])
async def team_workshop(ctx: ToolContext[TeamDeps], workshop_id: WorkshopId) -> Any:
    """A workshop of this tenant: title, seats left, who is booked."""
    _owned(ctx, workshop_id)
    status, body = await ctx.deps.request("GET", f"/workshops/{quote(workshop_id)}")
    if status != 200:
        raise BusinessRefusal(f"no workshop {workshop_id}")
    return {**body, "asked_by": ctx.principal.subject, "tenant": ctx.principal.tenant}


async def _may_book(ctx: ToolContext[TeamDeps], workshop_id: str, participant_id: str) -> None:
    _owned(ctx, workshop_id)


async def _booking(ctx: ToolContext[TeamDeps], workshop_id: str, participant_id: str) -> Outcome:
    status, body = await ctx.deps.request(
        "GET", f"/workshops/operations/{quote(ctx.idempotency_key, safe='')}"
    )
    if status == 404:
        return Outcome(state="not_applied")
    if status != 200:
        raise TransientError(f"lookup answered {status}")
    if body.get("state") == "applied":
        return Outcome(state="applied", record={**body.get("record", {}), "found_by": "team"})
    return Outcome(state="unknown")


@agentloop.tool(
    effect="write",
    scopes=["team:write"],
    precondition=_may_book,
    lookup_outcome=_booking,
    timeout_seconds=20,
)
async def team_book(
    ctx: ToolContext[TeamDeps],
    workshop_id: WorkshopId,
    participant_id: Annotated[str, Field(pattern=r"^p-[a-z]+$")],
) -> Any:
    """Book a seat for a participant in one of this tenant's workshops."""
    _owned(ctx, workshop_id)
    try:
        status, body = await ctx.deps.request(
            "POST",
            f"/workshops/{quote(workshop_id)}/reservations",
            json={"participant_id": participant_id},
            headers={"Idempotency-Key": ctx.idempotency_key},
        )
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OutcomeUnknown(f"no answer after sending: {exc!r}") from exc
    if status >= 500:
        raise OutcomeUnknown(f"service error {status}")
    if status >= 400:
        raise BusinessRefusal(str(body.get("error", {}).get("message", status)))
    return {**body, "idempotency_key": ctx.idempotency_key}


@agentloop.approval_rule("long_reply")
def long_reply(arguments: Mapping[str, Any], principal: Principal) -> bool:
    return len(str(arguments.get("body", ""))) > LONG_REPLY


async def _reply_found(ctx: ToolContext[TeamDeps], ticket_id: str, body: str) -> Outcome:
    status, found = await ctx.deps.request(
        "GET", f"/support/operations/{quote(ctx.idempotency_key, safe='')}"
    )
    if status == 200 and found.get("state") == "applied":
        return Outcome(state="applied", record=found.get("record"))
    return Outcome(state="not_applied" if status == 404 else "unknown")


@agentloop.tool(
    effect="write",
    needs_approval="long_reply",
    on_reject="tell_model",
    lookup_outcome=_reply_found,
)
async def team_reply(ctx: ToolContext[TeamDeps], ticket_id: str, body: str) -> Any:
    """Reply to a support ticket's customer (a long reply waits for a human)."""
    status, answer = await ctx.deps.request(
        "POST",
        f"/support/tickets/{quote(ticket_id)}/replies",
        json={"recipient": "dana@example.com", "body": body},
        headers={"Idempotency-Key": ctx.idempotency_key},
    )
    if status >= 400:
        raise BusinessRefusal(str(answer))
    return answer


@agentloop.verifier("seat_booked")
async def seat_booked(ctx: VerifyContext) -> Verdict:
    """The answer is done only when a booking of this run is at the system of record."""
    booked = [c for c in ctx.calls if c.tool == "team_book" and c.idempotency_key]
    for booking in booked:
        if (await ctx.lookup(booking)).state == "applied":
            return Verdict(passed=True, reason=f"{booking.call_id} is booked")
    return Verdict(passed=False, reason="no seat is booked yet")
