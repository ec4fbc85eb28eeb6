"""Workshop tools over the example service (a read, and a seat reservation).

`reserve_seat` is the canonical exactly-once write: it is approved by a human, checked against
the system of record first (eligibility), sent with the run's idempotency key, and its outcome
can be asked for afterwards by that key when the answer was lost.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agentloop.demo.tools.http import (
    WRITE_TOOL_TIMEOUT_SECONDS,
    ExampleDeps,
    idempotency_headers,
    lookup_operation,
)
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import BusinessRefusal, ToolContext
from agentloop.tools.decorator import tool

WORKSHOP_ID = r"^ws-[0-9]{3,6}$"
PARTICIPANT_ID = r"^p-[a-z][a-z0-9-]{0,30}$"


class CheckWorkshopArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workshop_id: str = Field(pattern=WORKSHOP_ID, description="e.g. ws-101")


class ReserveSeatArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workshop_id: str = Field(pattern=WORKSHOP_ID, description="e.g. ws-101")
    participant_id: str = Field(pattern=PARTICIPANT_ID, description="e.g. p-alice")


def _q(value: str) -> str:
    return quote(value, safe="")


@tool(effect="read", scopes=["workshops:read"])
async def check_workshop(ctx: ToolContext[ExampleDeps], args: CheckWorkshopArgs) -> Any:
    """A workshop's title, date, capacity, seats left, whether it is members-only, and who is
    booked."""
    return await ctx.deps.example.get_json(f"/workshops/{_q(args.workshop_id)}")


async def _eligible(ctx: ToolContext[ExampleDeps], args: ReserveSeatArgs) -> None:
    ws, participant = _q(args.workshop_id), _q(args.participant_id)
    answer = await ctx.deps.example.get_json(f"/workshops/{ws}/eligibility/{participant}")
    if not answer.get("eligible"):
        raise BusinessRefusal(answer.get("reason") or "not eligible")


async def _reservation_outcome(ctx: ToolContext[ExampleDeps], args: ReserveSeatArgs) -> Outcome:
    path = f"/workshops/operations/{_q(ctx.idempotency_key)}"
    asked = {"workshop_id": args.workshop_id, "participant_id": args.participant_id}
    return await lookup_operation(ctx.deps.example, path, asked)


@tool(
    effect="write",
    scopes=["workshops:write"],
    needs_approval=True,
    # Seats are a scarce resource the workshop lead allocates; nobody else may approve.
    approvers=["workshop-lead"],
    action="workshops.reserve_seat",
    timeout_seconds=WRITE_TOOL_TIMEOUT_SECONDS,
    precondition=_eligible,
    lookup_outcome=_reservation_outcome,
)
async def reserve_seat(ctx: ToolContext[ExampleDeps], args: ReserveSeatArgs) -> Any:
    """Reserve a seat in a workshop for a participant. Needs a human's approval; refused when
    the participant is not eligible, already booked, or the workshop is full."""
    return await ctx.deps.example.post_json(
        f"/workshops/{_q(args.workshop_id)}/reservations",
        {"participant_id": args.participant_id},
        headers=idempotency_headers(ctx),
    )
