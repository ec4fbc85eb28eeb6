"""A batch runs in the model's order around its writes (issue #19 item 5, seed 000: parallel
only for independent reads, dependent actions in a fixed order): the reads before the first
write run together, a read after a write runs once the write is done. Order is read off the
example service's request log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import Client

from agentloop.contract import AgentRunInput, AgentRunResult, Principal, Reconciliation
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.workflows.loop.state import Batch
from tests.support import approve_as_shown, result_of, start_run, wait_for_phase

PRINCIPAL = Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"])


def call(call_id: str, name: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


async def run_batch(
    client: Client,
    worker: Settings,
    provider: ScriptedProvider,
    run_id: str,
    calls: list[ScriptedToolCall],
) -> AgentRunResult:
    provider.register(
        Script(name=run_id, turns=[ScriptTurn(tool_calls=calls), ScriptTurn(text="Done.")])
    )
    run_input = AgentRunInput(
        task="Book p-carol into ws-101.",
        provider="openai-chat",
        model=run_id,
        tools=sorted({c.name for c in calls}),
        principal=PRINCIPAL,
    )
    handle = await start_run(client, worker, run_id, run_input)
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
async def test_a_read_after_a_write_runs_after_it(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    await run_batch(
        client,
        worker,
        scripted_provider,
        run_id,
        [
            call("c_res", "reserve_seat", workshop_id="ws-101", participant_id="p-carol"),
            call("c_chk", "check_workshop", workshop_id="ws-101"),
        ],
    )
    requests = logged(example_service)
    # The precondition check reads the workshop first; then the write, then the read after it.
    reserve = next(i for i, r in enumerate(requests) if r["endpoint"] == "workshops.reserve")
    after = [r["endpoint"] for r in requests[reserve + 1 :]]
    assert after == ["workshops.get"], [r["endpoint"] for r in requests]
    assert requests[reserve]["finished_seq"] < requests[reserve + 1]["started_seq"]
    assert example_service.records()["reservations"] == 1


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_reads_before_a_write_run_together_and_the_read_after_it_waits_for_it(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    example_service.set_delay("weather", 300)
    example_service.set_delay("trains", 300)
    try:
        await run_batch(
            client,
            worker,
            scripted_provider,
            run_id,
            [
                call("c_w", "get_weather", city="Oslo", date="2026-12-01"),
                call("c_t", "get_train_status", train_number="G1234", date="2026-12-01"),
                call("c_res", "reserve_seat", workshop_id="ws-101", participant_id="p-carol"),
                call("c_t2", "get_train_status", train_number="G5678", date="2026-12-01"),
            ],
        )
    finally:
        example_service.set_delay(None, 0)
    requests = logged(example_service)
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
