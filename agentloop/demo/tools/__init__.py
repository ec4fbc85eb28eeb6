"""The example tools: travel, workshops and a support desk, over the example service standing
in for systems of record. A tool module like any team's: `AGENTLOOP_TOOLS=agentloop.demo.tools`
loads it (`agentloop dev` and `make demo` always do)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp

from agentloop.demo.tools.http import ExampleDeps, ServiceClient
from agentloop.demo.tools.support import read_ticket, search_policy, send_reply, ticket_answered
from agentloop.demo.tools.travel import (
    book_train,
    cancel_booking,
    get_train_status,
    get_weather,
    pay_booking,
)
from agentloop.demo.tools.workshops import check_workshop, reserve_seat
from agentloop.runtime.config import Settings
from agentloop.tools.decorator import dependencies

EXAMPLE_TOOLS = (
    get_train_status,
    get_weather,
    book_train,
    cancel_booking,
    pay_booking,
    check_workshop,
    reserve_seat,
    read_ticket,
    search_policy,
    send_reply,
)


@dependencies
async def example_service(settings: Settings) -> AsyncIterator[ExampleDeps]:
    """One HTTP session to the example service (`AGENTLOOP_EXAMPLE_SERVICE_URL`) per worker."""
    timeout = aiohttp.ClientTimeout(total=settings.tool_http_timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield ExampleDeps(ServiceClient(settings.example_service_url, session))


__all__ = ["EXAMPLE_TOOLS", "ExampleDeps", "example_service", "ticket_answered"]
