"""Travel tools: public reads of train status and weather (seed 000, case one), and a train
booking that can be paid and undone.

`book_train` declares its undo (`compensate="cancel_booking"`): a run that ends without
delivering (the payment declined, a rejection, a cancel, a limit) offers to cancel the
booking it made, under its `compensate` policy. Every write is sent under the run's
idempotency key, and each can be looked up by it when its answer was lost.
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
from agentloop.tools.contract import ToolContext
from agentloop.tools.decorator import tool

ISO_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
TRAIN_NUMBER = r"^[A-Z]{0,2}[0-9]{1,5}$"
BOOKING_ID = r"^b-[0-9a-f]{12}$"


class TrainStatusArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    train_number: str = Field(pattern=TRAIN_NUMBER, description="e.g. G1234")
    date: str = Field(pattern=ISO_DATE, description="ISO date YYYY-MM-DD")


class WeatherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(min_length=1, max_length=64)
    date: str = Field(pattern=ISO_DATE, description="ISO date YYYY-MM-DD")


class BookTrainArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    train_number: str = Field(pattern=TRAIN_NUMBER, description="e.g. G1234")
    date: str = Field(pattern=ISO_DATE, description="ISO date YYYY-MM-DD")
    traveller: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9 .'-]{0,63}$", description="full name")


class BookingArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    booking_id: str = Field(pattern=BOOKING_ID, description="as book_train returned it")


class PayBookingArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    booking_id: str = Field(pattern=BOOKING_ID, description="as book_train returned it")
    payment_token: str = Field(pattern=r"^pm-[a-z0-9-]{1,40}$", description="e.g. pm-visa-1")


def _q(value: str) -> str:
    return quote(value, safe="")


@tool(effect="read")
async def get_train_status(ctx: ToolContext[ExampleDeps], args: TrainStatusArgs) -> Any:
    """Status of a train on a date: on time, delayed (by how much) or cancelled."""
    number = _q(args.train_number)
    return await ctx.deps.example.get_json(f"/travel/trains/{number}", {"date": args.date})


@tool(effect="read")
async def get_weather(ctx: ToolContext[ExampleDeps], args: WeatherArgs) -> Any:
    """Weather forecast for a city on a date."""
    city = _q(args.city)
    return await ctx.deps.example.get_json(f"/travel/weather/{city}", {"date": args.date})


async def _operation(ctx: ToolContext[ExampleDeps], asked: dict[str, Any]) -> Outcome:
    """What the service holds under the call's idempotency key, for the request `asked`."""
    path = f"/travel/operations/{_q(ctx.idempotency_key)}"
    return await lookup_operation(ctx.deps.example, path, asked)


async def _booking_outcome(ctx: ToolContext[ExampleDeps], args: BookTrainArgs) -> Outcome:
    return await _operation(ctx, args.model_dump())


@tool(
    effect="write",
    scopes=["travel:write"],
    timeout_seconds=WRITE_TOOL_TIMEOUT_SECONDS,
    action="travel.book",
    lookup_outcome=_booking_outcome,
    compensate="cancel_booking",
)
async def book_train(ctx: ToolContext[ExampleDeps], args: BookTrainArgs) -> Any:
    """Book a seat on a train for a traveller; answers the booking (with its booking_id),
    which is unpaid until pay_booking."""
    return await ctx.deps.example.post_json(
        "/travel/bookings", args.model_dump(), headers=idempotency_headers(ctx)
    )


async def _cancellation_outcome(ctx: ToolContext[ExampleDeps], args: BookingArgs) -> Outcome:
    return await _operation(ctx, {"booking_id": args.booking_id, "cancel": True})


@tool(
    effect="write",
    scopes=["travel:write"],
    timeout_seconds=WRITE_TOOL_TIMEOUT_SECONDS,
    action="travel.cancel",
    lookup_outcome=_cancellation_outcome,
)
async def cancel_booking(ctx: ToolContext[ExampleDeps], args: BookingArgs) -> Any:
    """Cancel a train booking (refused when it is already cancelled)."""
    return await ctx.deps.example.post_json(
        f"/travel/bookings/{_q(args.booking_id)}/cancellation", {}, headers=idempotency_headers(ctx)
    )


async def _payment_outcome(ctx: ToolContext[ExampleDeps], args: PayBookingArgs) -> Outcome:
    return await _operation(ctx, args.model_dump())


@tool(
    effect="write",
    scopes=["travel:write"],
    timeout_seconds=WRITE_TOOL_TIMEOUT_SECONDS,
    action="travel.pay",
    lookup_outcome=_payment_outcome,
)
async def pay_booking(ctx: ToolContext[ExampleDeps], args: PayBookingArgs) -> Any:
    """Pay a booking with a payment token; a declined card is refused for good."""
    return await ctx.deps.example.post_json(
        f"/travel/bookings/{_q(args.booking_id)}/payment",
        {"payment_token": args.payment_token},
        headers=idempotency_headers(ctx),
    )
