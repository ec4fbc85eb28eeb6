"""The refund agent end to end: real Temporal, the real refunds service, a scripted model.

Every test counts what happened at the service, not only what the run says happened."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from refunds_service import RefundsService

import agentloop
from agentloop.testing import Harness, Turn, call, reply

pytestmark = pytest.mark.integration

DANA = {"subject": "dana", "tenant": "acme", "scopes": ["refunds:write"]}
TOOLS = ["read_order", "refund"]


def sent_to_model(harness: Harness, model: str) -> list[dict[str, Any]]:
    """The chat messages of the last request the scripted `model` received."""
    bodies = [r["body"] for r in harness.requests if r["script"] == model]
    assert bodies, f"the model {model} was never called"
    messages: list[dict[str, Any]] = bodies[-1]["messages"]
    return messages


def tool_results(harness: Harness, model: str) -> dict[str, str]:
    """What the model was told each call returned, by call id."""
    return {
        m["tool_call_id"]: str(m["content"])
        for m in sent_to_model(harness, model)
        if m["role"] == "tool"
    }


def calls_by_id(result: agentloop.AgentRunResult) -> dict[str, Any]:
    return {c.call_id: c for c in result.calls}


def refund_a17(amount: float = 40.0) -> Sequence[Turn]:
    return [
        [call("read_order", "c1", order_id="A-17")],
        [call("refund", "c2", order_id="A-17", amount=amount)],
        reply(f"Refunded {amount} EUR."),
    ]


async def test_a_small_refund_is_made_once(harness: Harness, service: RefundsService) -> None:
    result = await harness.run(
        "Refund order A-17", tools=TOOLS, principal=DANA, turns=refund_a17(), run_id="refund-small"
    )

    assert (result.status, result.output) == ("completed", "Refunded 40.0 EUR.")
    assert [(c.call_id, c.tool, c.status) for c in result.calls] == [
        ("c1", "read_order", "succeeded"),
        ("c2", "refund", "succeeded"),
    ]
    key = calls_by_id(result)["c2"].idempotency_key
    assert key and service.created == 1
    assert service.refunds[key].order_id == "A-17"
    # This run's: the session's other tests share the harness (`harness.violations`: all).
    assert harness.violations_for("refund-small") == []


async def test_another_tenants_order_is_neither_read_nor_refunded(
    harness: Harness, service: RefundsService
) -> None:
    model = harness.script(
        [
            [call("read_order", "c1", order_id="G-9")],
            [call("refund", "c2", order_id="G-9", amount=30.0)],
            reply("I cannot refund order G-9."),
        ],
        name="refund-other-tenant",
    )
    result = await harness.run(
        "Refund order G-9", model=model, tools=TOOLS, principal=DANA, run_id="refund-g9"
    )

    calls = calls_by_id(result)
    assert calls["c1"].status == "failed"
    # The precondition refused the write before it could run, or be offered for approval.
    assert (calls["c2"].decision, calls["c2"].attempts) == ("precondition_failed", 0)
    told = tool_results(harness, model)
    assert "permission" in told["c1"].lower()
    assert "another tenant" in told["c2"]
    assert result.status == "completed"
    assert service.created == 0
    assert harness.violations_for("refund-g9") == []


async def test_a_large_refund_waits_for_finance(harness: Harness, service: RefundsService) -> None:
    handle = await harness.start(
        "Refund 200 EUR of order A-18",
        tools=TOOLS,
        principal=DANA,
        turns=[[call("refund", "c1", order_id="A-18", amount=200.0)], reply("Refunded.")],
    )

    waiting = await harness.wait_for_phase(handle, "awaiting_approval")
    assert [p.call_id for p in waiting.pending_approvals] == ["c1"]
    assert service.created == 0
    shown = await harness.approve(handle, "c1", approver="finance")  # as status shows it
    assert shown.arguments == {"order_id": "A-18", "amount": 200.0}
    result = await harness.result(handle)

    assert result.status == "completed"
    assert calls_by_id(result)["c1"].status == "succeeded"
    assert service.created == 1
    assert harness.violations_for(handle.id) == []


async def test_a_lost_answer_is_looked_up_not_resent(
    harness: Harness, service: RefundsService
) -> None:
    service.drop_next_answer = True
    result = await harness.run(
        "Refund order A-17", tools=TOOLS, principal=DANA, turns=refund_a17(), run_id="refund-lost"
    )

    assert not service.drop_next_answer, "the refund never reached the service"
    refund = calls_by_id(result)["c2"]
    # The lookup by idempotency key found the refund: confirmed, and never sent twice.
    assert (refund.status, refund.attempts) == ("confirmed_after_query", 1)
    assert result.status == "completed"
    assert service.created == 1
    assert list(service.refunds) == [refund.idempotency_key]
    assert harness.violations_for("refund-lost") == []


async def test_done_means_recorded_at_the_service(
    harness: Harness, service: RefundsService
) -> None:
    model = harness.script(
        [
            reply("done"),  # before any refund: the verifier sends the model back to work
            [call("refund", "c1", order_id="A-17", amount=40.0)],
            reply("done"),
        ],
        name="refund-verified",
    )
    result = await harness.run(
        "Refund order A-17",
        model=model,
        tools=TOOLS,
        principal=DANA,
        completion_check="refund_recorded",
        run_id="refund-verified-run",
    )

    assert (result.status, result.output) == ("completed", "done")
    assert result.usage.model_calls == 3
    assert [(c.call_id, c.status) for c in result.calls] == [("c1", "succeeded")]
    second_request = harness.requests_for("refund-verified-run")[1]["body"]
    assert "no refund of this run is recorded" in str(second_request["messages"])
    assert service.created == 1
    assert harness.violations_for("refund-verified-run") == []


async def test_a_finished_run_replays(harness: Harness, service: RefundsService) -> None:
    handle = await harness.start(
        "Refund 200 EUR of order A-18",
        tools=TOOLS,
        principal=DANA,
        turns=[
            [call("read_order", "c1", order_id="A-18")],
            [call("refund", "c2", order_id="A-18", amount=200.0)],
            reply("Refunded."),
        ],
        run_id="refund-replayed",
    )
    await harness.approve(handle, "c2", approver="finance")
    assert (await harness.result(handle)).status == "completed"

    # Its history (model calls, the approval signal, the refund) replays against today's code.
    await harness.replay("refund-replayed")
    assert service.created == 1
