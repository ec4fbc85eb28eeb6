"""Tools written without saying their effect, as a `charge_card` is when nobody thought of
retries (tests/loop/test_safe_defaults.py): each commits a seat at the example service under the
call's idempotency key, then fails as a flaky upstream does, with a transient error. Left
undeclared on purpose: the default must make them writes (every shipped tool says its
effect)."""

from __future__ import annotations

from urllib.parse import quote

import agentloop
from agentloop.demo.tools import example_service  # their dependencies: the service's client
from agentloop.demo.tools.http import IDEMPOTENCY_HEADER, ExampleDeps, lookup_operation
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import ToolContext

__all__ = ["book_seat", "book_seat_unchecked", "example_service"]


async def _commit_then_fail(
    ctx: ToolContext[ExampleDeps], workshop_id: str, participant_id: str
) -> str:
    # A read has no key: then the service is asked without one, as such a tool would.
    headers = {IDEMPOTENCY_HEADER: ctx.idempotency_key} if ctx.idempotency_key else {}
    await ctx.deps.example.post_json(
        f"/workshops/{quote(workshop_id, safe='')}/reservations",
        {"participant_id": participant_id},
        headers=headers,
    )
    raise agentloop.TransientError("the gateway answered 503 after the booking committed")


async def _booked(ctx: ToolContext[ExampleDeps], workshop_id: str, participant_id: str) -> Outcome:
    path = f"/workshops/operations/{quote(ctx.idempotency_key, safe='')}"
    asked = {"workshop_id": workshop_id, "participant_id": participant_id}
    return await lookup_operation(ctx.deps.example, path, asked)


@agentloop.tool(lookup_outcome=_booked)
async def book_seat(ctx: ToolContext[ExampleDeps], workshop_id: str, participant_id: str) -> str:
    """Book a seat in a workshop; its outcome can be looked up."""
    return await _commit_then_fail(ctx, workshop_id, participant_id)


@agentloop.tool
async def book_seat_unchecked(
    ctx: ToolContext[ExampleDeps], workshop_id: str, participant_id: str
) -> str:
    """Book a seat in a workshop; nothing can say afterwards whether it did."""
    return await _commit_then_fail(ctx, workshop_id, participant_id)
