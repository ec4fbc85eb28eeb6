"""Whether a namespace has agentloop's search attributes: what the worker asks before a run
started without them may upsert them, and how long it trusts the answer."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    ListSearchAttributesRequest,
    ListSearchAttributesResponse,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentloop import search
from agentloop.runtime.indexing import Registration, missing_attributes

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
ALL_NAMES = [key.name for key in search.ALL]


class FakeOperator:
    """The operator service of a server whose namespaces have `registered`; `fail` makes
    the next answer an error."""

    def __init__(self, registered: dict[str, dict[str, IndexedValueType.ValueType]]) -> None:
        self.registered = registered
        self.asked: list[str] = []
        self.fail: RPCError | None = None
        self.answering = asyncio.Event()
        self.answering.set()
        self.called = asyncio.Event()

    async def list_search_attributes(
        self, request: ListSearchAttributesRequest, **_: Any
    ) -> ListSearchAttributesResponse:
        self.asked.append(request.namespace)
        self.called.set()
        await self.answering.wait()
        if self.fail is not None:
            failure, self.fail = self.fail, None
            raise failure
        return ListSearchAttributesResponse(
            custom_attributes=self.registered.get(request.namespace, {}),
            system_attributes={"WorkflowType": KEYWORD},
        )


class FakeClient:
    def __init__(self, operator: FakeOperator) -> None:
        self.operator_service = operator
        self.namespace = "default"


def fake_client(
    registered: dict[str, dict[str, IndexedValueType.ValueType]],
) -> tuple[Client, FakeOperator]:
    operator = FakeOperator(registered)
    return cast(Client, FakeClient(operator)), operator


async def test_missing_names_what_is_not_a_keyword_attribute_of_the_namespace() -> None:
    text = IndexedValueType.INDEXED_VALUE_TYPE_TEXT
    client, _ = fake_client(
        {
            "full": dict.fromkeys(ALL_NAMES, KEYWORD),
            "partial": {"AgentPhase": KEYWORD, "AgentTenant": text},
        }
    )
    assert await missing_attributes(client, "full") == []
    assert await missing_attributes(client, "partial") == [
        "AgentStatus",
        "AgentProvider",
        "AgentTenant",  # registered, but as Text: `=` would not find runs by it
    ]
    assert await missing_attributes(client) == ALL_NAMES  # the client's own namespace


async def test_a_worker_asks_once_per_namespace_and_trusts_the_answer_for_a_while() -> None:
    client, operator = fake_client({"full": dict.fromkeys(ALL_NAMES, KEYWORD)})
    now = [0.0]
    registration = Registration(client, remembered_seconds=30, clock=lambda: now[0])

    operator.answering.clear()
    starting = [asyncio.ensure_future(registration.indexable("full")) for _ in range(5)]
    await operator.called.wait()  # the first asks; the other four have started meanwhile
    operator.answering.set()
    assert await asyncio.gather(*starting) == [True] * 5
    assert await registration.indexable("bare") is False
    assert operator.asked == ["full", "bare"]

    now[0] = 29.0
    assert await registration.indexable("bare") is False
    assert operator.asked == ["full", "bare"]

    # Registered meanwhile: runs started once the answer is old are indexed.
    operator.registered["bare"] = dict.fromkeys(ALL_NAMES, KEYWORD)
    now[0] = 31.0
    assert await registration.indexable("bare") is True
    assert operator.asked == ["full", "bare", "bare"]


@pytest.mark.parametrize("status", [RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.UNAVAILABLE])
async def test_a_check_that_fails_counts_as_unregistered_for_a_while(
    status: RPCStatusCode,
) -> None:
    client, operator = fake_client({"full": dict.fromkeys(ALL_NAMES, KEYWORD)})
    now = [0.0]
    registration = Registration(client, remembered_seconds=30, clock=lambda: now[0])
    operator.fail = RPCError("no", status, b"")
    assert await registration.indexable("full") is False
    now[0] = 29.0
    assert await registration.indexable("full") is False  # not asked again by every run
    assert operator.asked == ["full"]
    now[0] = 31.0
    assert await registration.indexable("full") is True
    assert operator.asked == ["full", "full"]


def test_the_commands_register_each_attribute_on_the_namespace() -> None:
    assert search.create_commands(["AgentPhase", "AgentTenant"], "acme") == (
        "temporal operator search-attribute create --namespace acme --name AgentPhase "
        "--type Keyword && temporal operator search-attribute create --namespace acme "
        "--name AgentTenant --type Keyword"
    )
