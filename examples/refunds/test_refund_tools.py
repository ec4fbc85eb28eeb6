"""The tools' own code, called directly: no Temporal, no worker, only the refunds service.

A declared tool stays callable like the function as written, so its logic is unit-tested
like any other async function."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import refund_tools
from refund_tools import RefundsApi
from refunds_service import RefundsService

import agentloop
from agentloop.testing import tool_context, verify_context

ACME = agentloop.Principal(subject="d", tenant="acme")


@pytest.fixture
async def api(service: RefundsService) -> AsyncIterator[RefundsApi]:
    async with aiohttp.ClientSession() as session:
        yield RefundsApi(session, service.base_url)


async def test_read_order_shows_the_tenants_own_order(api: RefundsApi) -> None:
    order = await refund_tools.read_order(tool_context(api, principal=ACME), order_id="A-17")

    assert order == {"order_id": "A-17", "tenant": "acme", "amount": 40.0, "refunded": False}


async def test_read_order_refuses_another_tenants_order(api: RefundsApi) -> None:
    with pytest.raises(agentloop.PermissionDenied):
        await refund_tools.read_order(tool_context(api, principal=ACME), order_id="G-9")
    with pytest.raises(agentloop.BusinessRefusal):
        await refund_tools.read_order(tool_context(api, principal=ACME), order_id="Z-1")


async def test_refund_is_idempotent_by_key(api: RefundsApi, service: RefundsService) -> None:
    ctx = tool_context(api, principal=ACME, idempotency_key="run-1/c1")

    first = await refund_tools.refund(ctx, order_id="A-17", amount=40.0)
    again = await refund_tools.refund(ctx, order_id="A-17", amount=40.0)

    assert first == again and service.created == 1
    with pytest.raises(agentloop.BusinessRefusal, match="already refunded"):
        await refund_tools.refund(
            tool_context(api, principal=ACME, idempotency_key="run-1/c2"),
            order_id="A-17",
            amount=40.0,
        )


async def test_only_large_refunds_need_approval() -> None:
    assert refund_tools.large_refund({"amount": 100.01}, ACME)  # the rule as written
    assert not refund_tools.large_refund({"amount": 100.0}, ACME)


async def test_done_only_once_the_service_holds_the_refund(api: RefundsApi) -> None:
    arguments = {"order_id": "A-17", "amount": 40.0}
    # The run's ledger, as the verifier gets it; `ctx.lookup` asks the refund tool's lookup.
    made = {"call_id": "c1", "tool": "refund", "arguments": arguments, "idempotency_key": "k1"}
    ctx = verify_context(api, answer="Refunded.", calls=[made], tools=[refund_tools.refund])

    assert not (await refund_tools.refund_recorded.evaluate(ctx)).passed
    await refund_tools.refund(tool_context(api, principal=ACME, idempotency_key="k1"), **arguments)
    assert (await refund_tools.refund_recorded.evaluate(ctx)).passed
