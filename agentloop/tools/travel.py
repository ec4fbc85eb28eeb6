"""Travel tools: public reads of train status and weather (seed 000, case one)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agentloop.tools.contract import ToolContext, define_tool

ISO_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


class TrainStatusArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    train_number: str = Field(pattern=r"^[A-Z]{0,2}[0-9]{1,5}$", description="e.g. G1234")
    date: str = Field(pattern=ISO_DATE, description="ISO date YYYY-MM-DD")


class WeatherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(min_length=1, max_length=64)
    date: str = Field(pattern=ISO_DATE, description="ISO date YYYY-MM-DD")


async def _train_status(args: dict[str, Any], ctx: ToolContext) -> Any:
    number = quote(args["train_number"], safe="")
    return await ctx.services.example.get_json(f"/travel/trains/{number}", {"date": args["date"]})


async def _weather(args: dict[str, Any], ctx: ToolContext) -> Any:
    city = quote(args["city"], safe="")
    return await ctx.services.example.get_json(f"/travel/weather/{city}", {"date": args["date"]})


get_train_status = define_tool(
    "get_train_status",
    TrainStatusArgs,
    _train_status,
    description="Status of a train on a date: on time, delayed (by how much) or cancelled.",
)

get_weather = define_tool(
    "get_weather",
    WeatherArgs,
    _weather,
    description="Weather forecast for a city on a date.",
    local=True,
)

TRAVEL_TOOLS = [get_train_status, get_weather]
