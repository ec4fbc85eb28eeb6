"""A batch runs in the model's order around its writes (issue #19 item 5, seed 000: parallel
only for independent reads, dependent actions in a fixed order): the reads before the first
write run together, a read after a write runs once the write is done. Order is read off the
example service's request log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentloop.contract import AgentRunResult, Principal, Reconciliation
from agentloop.demo.services import ExampleService
from agentloop.scripted_provider import ScriptedToolCall, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.workflows.loop.state import Batch
from tests.live import Live, agent_input, scripted
from tests.support import approve_as_shown, result_of, start_run, wait_for_phase

PRINCIPAL = Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"])


async def run_batch(live: Live, run_id: str, calls: list[ScriptedToolCall]) -> AgentRunResult:
    live.provider.register(scripted(run_id, ScriptTurn(tool_calls=calls), "Done."))
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Book p-carol into ws-101.",
        sorted({c.name for c in calls}),
        principal=PRINCIPAL,
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    await approve_as_shown(handle, pending, "workshop-lead")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert {c.call_id: c.status for c in result.calls} == {c.id: "succeeded" for c in calls}
    assert result.usage.human_waits == 1  # the one approval
    return result


def logged(service: ExampleService) -> list[dict[str, Any]]:
    """The business requests, each once, in the order they started."""
    requests: list[dict[str, Any]] = service.stats()["requests"]
    return requests


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_read_after_a_write_runs_after_it(live: Live, run_id: str) -> None:
    await run_batch(
        live,
        run_id,
        [
            scripted_call("reserve_seat", "c_res", workshop_id="ws-101", participant_id="p-carol"),
            scripted_call("check_workshop", "c_chk", workshop_id="ws-101"),
        ],
    )
    requests = logged(live.service)
    # The precondition check reads the workshop first; then the write, then the read after it.
    reserve = next(i for i, r in enumerate(requests) if r["endpoint"] == "workshops.reserve")
    after = [r["endpoint"] for r in requests[reserve + 1 :]]
    assert after == ["workshops.get"], [r["endpoint"] for r in requests]
    assert requests[reserve]["finished_seq"] < requests[reserve + 1]["started_seq"]
    assert live.service.records()["reservations"] == 1


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_reads_before_a_write_run_together_and_the_read_after_it_waits_for_it(
    live: Live, run_id: str
) -> None:
    live.service.set_delay("weather", 300)
    live.service.set_delay("trains", 300)
    try:
        await run_batch(
            live,
            run_id,
            [
                scripted_call("get_weather", "c_w", city="Oslo", date="2026-12-01"),
                scripted_call("get_train_status", "c_t", train_number="G1234", date="2026-12-01"),
                scripted_call(
                    "reserve_seat", "c_res", workshop_id="ws-101", participant_id="p-carol"
                ),
                scripted_call("get_train_status", "c_t2", train_number="G5678", date="2026-12-01"),
            ],
        )
    finally:
        live.service.set_delay(None, 0)
    requests = logged(live.service)
    names = [r["endpoint"] for r in requests]
    weather, first_train = requests[names.index("weather")], requests[names.index("trains")]
    reserve = requests[names.index("workshops.reserve")]
    second_train = requests[len(names) - 1 - names[::-1].index("trains")]
    assert second_train is not first_train
    # The two reads were in flight together, both done before the write started.
    assert weather["started_seq"] < first_train["finished_seq"]
    assert first_train["started_seq"] < weather["finished_seq"]
    assert max(weather["finished_seq"], first_train["finished_seq"]) < reserve["started_seq"]
    # The read the model put after the write started once the write had finished.
    assert reserve["finished_seq"] < second_train["started_seq"]
    assert names.count("trains") == 2 and names.count("workshops.reserve") == 1


def test_reads_wait_for_every_write_before_them_whatever_holds_it() -> None:
    batch = Batch(order=["r1", "w1", "r2", "r3", "w2", "r4"], reads=["r1", "r2", "r3", "r4"])
    batch.writes = ["w1", "w2"]
    assert batch.reads_ready() == ["r1"]
    batch.reads.remove("r1")
    assert batch.reads_ready() == []
    batch.writes.remove("w1")  # w1 ran, its outcome unknown: the reads after it still wait
    batch.unknown = ["w1"]
    assert batch.reads_ready() == []
    batch.unknown = []
    assert batch.reads_ready() == ["r2", "r3"]
    batch.reads = ["r4"]
    batch.writes = []
    batch.reconciling = {
        "w2": Reconciliation(
            call_id="w2",
            tool="reserve_seat",
            idempotency_key="k",
            known="",
            since=datetime(2026, 12, 1, tzinfo=UTC),
        )
    }
    assert batch.reads_ready() == []
