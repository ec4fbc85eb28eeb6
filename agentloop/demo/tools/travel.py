"""Travel tools: public reads of train status and weather (seed 000, case one)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agentloop.demo.tools.http import ExampleDeps
from agentloop.tools.contract import ToolContext
from agentloop.tools.decorator import tool

ISO_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


class TrainStatusArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    train_number: str = Field(pattern=r"^[A-Z]{0,2}[0-9]{1,5}$", description="e.g. G1234")
    date: str = Field(pattern=ISO_DATE, description="ISO date YYYY-MM-DD")


class WeatherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(min_length=1, max_length=64)
    date: str = Field(pattern=ISO_DATE, description="ISO date YYYY-MM-DD")


@tool(effect="read")
async def get_train_status(ctx: ToolContext[ExampleDeps], args: TrainStatusArgs) -> Any:
    """Status of a train on a date: on time, delayed (by how much) or cancelled."""
    number = quote(args.train_number, safe="")
    return await ctx.deps.example.get_json(f"/travel/trains/{number}", {"date": args.date})


@tool(effect="read")
async def get_weather(ctx: ToolContext[ExampleDeps], args: WeatherArgs) -> Any:
    """Weather forecast for a city on a date."""
    city = quote(args.city, safe="")
    return await ctx.deps.example.get_json(f"/travel/weather/{city}", {"date": args.date})
