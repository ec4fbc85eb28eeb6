"""The budget ledger: every limit stops the run with its name, before an operation starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from agentloop.config import Settings
from agentloop.contract import AgentRunInput, Limits, RunStatusView
from agentloop.contract import Usage as RunUsage
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.demo.scripted_provider.scripts import ScriptUsage
from agentloop.events import Usage
from agentloop.policies import budgets
from agentloop.pricing import DEFAULT_PRICES, PriceTable
from tests.support import start_run


def test_the_longest_matching_prefix_prices_a_model() -> None:
    table = PriceTable()
    assert table.price("gpt-4o-mini-2024-07-18") == DEFAULT_PRICES["gpt-4o-mini"]
    assert table.price("gpt-4o-2024-08-06") == DEFAULT_PRICES["gpt-4o"]
    assert table.price("travel") is None
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000)
    assert table.cost("gpt-4o", usage) == pytest.approx(2.5 + 5.0)
    assert table.cost("unknown-model", usage) == 0.0


def test_overrides_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"gpt-4o": [1, 2], "house-model": [0.5, 0.5]}')
    table = PriceTable.with_overrides(str(path))
    assert table.price("gpt-4o") == (1.0, 2.0) and table.price("house-model-v2") == (0.5, 0.5)


def test_cost_blocks_the_next_model_call_once_spent() -> None:
    limits = Limits(max_cost_usd=0.25)

    assert budgets.model_call_blocked(limits, RunUsage(cost_usd=0.2)) is None
    blocked = budgets.model_call_blocked(limits, RunUsage(cost_usd=0.25))
    assert blocked is not None and blocked.startswith("max_cost_usd")
    left = budgets.limits_left(
        limits, RunUsage(cost_usd=0.2), *([__import__("datetime").datetime(2026, 1, 1)] * 2)
    )
    assert left.cost_usd == pytest.approx(0.05)


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_max_cost_stops_the_run_before_the_call_that_would_exceed_it(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    run_id: str,
) -> None:
    model = f"priced-{run_id}"
    weather = {"city": "Oslo", "date": "2026-12-01"}
    scripted_provider.register(
        Script(
            name=model,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        ScriptedToolCall(
                            id=f"call_{i}",
                            name="get_weather",
                            arguments={**weather, "date": f"2026-12-0{i + 1}"},
                        )
                    ],
                    usage=ScriptUsage(prompt_tokens=100, completion_tokens=0),  # $0.10 a call
                )
                for i in range(6)
            ],
        )
    )
    run_input = AgentRunInput(
        task="Weather in Oslo every day",
        provider="anthropic",
        model=model,
        tools=["get_weather"],
        limits=Limits(max_cost_usd=0.25),
    )
    handle = await start_run(client, worker, run_id, run_input)
    result = await handle.result()
    assert result.status == "limit_reached"
    assert result.stop_reason.startswith("max_cost_usd")
    assert result.usage.model_calls == 3
    assert result.usage.cost_usd == pytest.approx(0.3)
    assert len([r for r in scripted_provider.requests if r["script"] == model]) == 3
    view = await handle.query("status", result_type=RunStatusView)
    assert view.limits_left is not None and view.limits_left.cost_usd == 0.0
