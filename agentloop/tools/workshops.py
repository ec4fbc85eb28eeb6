"""Activity-side: workshop tools over the example service (a read, and a seat reservation).

`reserve_seat` is the canonical exactly-once write: it is approved by a human, checked against
the system of record first (eligibility), sent with the run's idempotency key, and its outcome
can be asked for afterwards by that key when the answer was lost.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agentloop.tool_spec import Outcome
from agentloop.tools.contract import ToolContext, ToolError, define_tool
from agentloop.tools.http import (
    WRITE_TOOL_TIMEOUT_SECONDS,
    ServiceClient,
    idempotency_headers,
    lookup_operation,
)

WORKSHOP_ID = r"^ws-[0-9]{3,6}$"
PARTICIPANT_ID = r"^p-[a-z][a-z0-9-]{0,30}$"


class CheckWorkshopArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workshop_id: str = Field(pattern=WORKSHOP_ID, description="e.g. ws-101")


class ReserveSeatArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workshop_id: str = Field(pattern=WORKSHOP_ID, description="e.g. ws-101")
    participant_id: str = Field(pattern=PARTICIPANT_ID, description="e.g. p-alice")


def _client(ctx: ToolContext) -> ServiceClient:
    client: ServiceClient = ctx.services.example
    return client


def _q(value: str) -> str:
    return quote(value, safe="")


async def _check_workshop(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await _client(ctx).get_json(f"/workshops/{_q(args['workshop_id'])}")


async def _eligible(args: dict[str, Any], ctx: ToolContext) -> None:
    ws, participant = _q(args["workshop_id"]), _q(args["participant_id"])
    answer = await _client(ctx).get_json(f"/workshops/{ws}/eligibility/{participant}")
    if not answer.get("eligible"):
        raise ToolError(answer.get("reason") or "not eligible", error_class="business")


async def _reserve_seat(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await _client(ctx).post_json(
        f"/workshops/{_q(args['workshop_id'])}/reservations",
        {"participant_id": args["participant_id"]},
        headers=idempotency_headers(ctx),
    )


async def _reservation_outcome(idempotency_key: str, ctx: ToolContext) -> Outcome:
    return await lookup_operation(_client(ctx), f"/workshops/operations/{_q(idempotency_key)}")


check_workshop = define_tool(
    "check_workshop",
    CheckWorkshopArgs,
    _check_workshop,
    description="A workshop's title, date, capacity, seats left, whether it is members-only, "
    "and who is booked.",
    required_scopes=["workshops:read"],
)

reserve_seat = define_tool(
    "reserve_seat",
    ReserveSeatArgs,
    _reserve_seat,
    precondition=_eligible,
    lookup_outcome=_reservation_outcome,
    description="Reserve a seat in a workshop for a participant. Needs a human's approval; "
    "refused when the participant is not eligible, already booked, or the workshop is full.",
    effect="write",
    required_scopes=["workshops:write"],
    needs_approval=True,
    # Seats are a scarce resource the workshop lead allocates; nobody else may approve.
    approvers=["workshop-lead"],
    action="workshops.reserve_seat",
    timeout_seconds=WRITE_TOOL_TIMEOUT_SECONDS,
)

WORKSHOP_TOOLS = [check_workshop, reserve_seat]
