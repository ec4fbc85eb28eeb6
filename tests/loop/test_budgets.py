"""The budget ledger: every limit stops the run with its name, before an operation starts."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentloop.adapters.openai_chat import CHAT_ITEM_ALLOWANCE
from agentloop.contract import AgentRunInput, Limits, RunStatusView
from agentloop.contract import Usage as RunUsage
from agentloop.events import Usage
from agentloop.policies import budgets
from agentloop.pricing import DEFAULT_PRICES, PriceTable
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptUsage
from agentloop.testing.turns import call as scripted_call
from tests.live import Live, agent_input, scripted
from tests.loop.test_properties import examples
from tests.support import result_of, start_run

T0 = datetime(2026, 1, 1)


def test_the_longest_matching_prefix_prices_a_model() -> None:
    table = PriceTable()
    assert table.price("gpt-4o-mini-2024-07-18") == DEFAULT_PRICES["gpt-4o-mini"]
    assert table.price("gpt-4o-2024-08-06") == DEFAULT_PRICES["gpt-4o"]
    assert table.price("travel") is None
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000)
    assert table.cost("gpt-4o", usage) == pytest.approx(2.5 + 5.0)
    assert table.cost("unknown-model", usage) == 0.0
    assert table.unpriced_problem("gpt-4o-2024-08-06") is None
    assert "model 'travel' has no price" in (table.unpriced_problem("travel") or "")


def test_overrides_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"gpt-4o": [1, 2], "house-model": [0.5, 0.5]}')
    table = PriceTable.with_overrides(str(path))
    assert table.price("gpt-4o") == (1.0, 2.0) and table.price("house-model-v2") == (0.5, 0.5)


def test_cost_blocks_the_next_model_call_once_spent() -> None:
    limits = Limits(max_cost_usd=0.25)

    assert budgets.model_call_blocked(limits, RunUsage(cost_usd=0.2)) is None
    blocked = budgets.model_call_blocked(limits, RunUsage(cost_usd=0.25))
    assert blocked == budgets.OverCap("max_cost_usd", "$0.2500 of $0.2500 spent")
    assert blocked.sentence == "max_cost_usd: $0.2500 of $0.2500 spent"
    left = budgets.limits_left(limits, RunUsage(cost_usd=0.2), T0, T0)
    assert left.cost_usd == pytest.approx(0.05)


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_max_cost_stops_the_run_before_the_call_that_would_exceed_it(
    live: Live, run_id: str
) -> None:
    model = f"priced-{run_id}"  # $1000 per million tokens: $0.001 a token
    weather = {"city": "Oslo", "date": "2026-12-01"}
    live.provider.register(
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
                    usage=ScriptUsage(prompt_tokens=900, completion_tokens=0),  # $0.90 a call
                )
                for i in range(8)
            ],
        )
    )
    run_input = agent_input(
        model,
        "anthropic",
        "Weather in Oslo every day",
        ["get_weather"],
        limits=Limits(max_cost_usd=5.0),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    result = await result_of(handle)
    assert result.status == "limit_reached"
    # Stopped before a call whose input alone might pass the cap, saying by how much.
    assert result.stop_reason.startswith("max_cost_usd: the next model call could cost")
    assert "short)" in result.stop_reason
    assert result.usage.cost_usd <= 5.0
    requests = [r for r in live.provider.requests if r["script"] == model]
    assert 1 < len(requests) == result.usage.model_calls < 8
    assert result.usage.cost_usd == pytest.approx(0.9 * len(requests))
    # Each call was sent the output-token limit that keeps it within what was left.
    sent = [r["body"]["max_tokens"] for r in requests]
    assert sent[-1] < sent[0] <= 4096, sent
    for n, limit in enumerate(sent):
        assert 0.9 * (n + 1) + limit / 1000 <= 5.0, (n, limit)
    view = await handle.query("status", result_type=RunStatusView)
    assert view.limits_left is not None
    assert view.limits_left.cost_usd == pytest.approx(5.0 - result.usage.cost_usd)


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_cost_cap_on_a_model_without_a_price_fails_the_run_at_start(
    live: Live, run_id: str
) -> None:
    """Before, each of its calls cost 0 and the cap never bound.
    The worker knows its prices (its pricing file); the run refuses on what it says."""
    live.provider.register(scripted(run_id, "Done."))
    capped = AgentRunInput(
        task="Hello", provider="openai-chat", model=run_id, limits=Limits(max_cost_usd=1.0)
    )
    handle = await start_run(live.client, live.worker, run_id, capped)
    with pytest.raises(WorkflowFailureError) as failure:
        await result_of(handle)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidInput" and cause.non_retryable
    assert f"model {run_id!r} has no price" in cause.message
    assert "AGENTLOOP_PRICING_FILE" in cause.message and "[input, output]" in cause.message
    assert not [r for r in live.provider.requests if r["script"] == run_id]
    # Without a cap, the same model runs (its calls cost 0, as nothing binds them).
    uncapped = capped.model_copy(update={"limits": Limits()})
    result = await result_of(
        await start_run(live.client, live.worker, f"{run_id}-uncapped", uncapped)
    )
    assert result.status == "completed" and result.usage.cost_usd == 0.0


def test_children_starting_together_share_what_is_left_fairly() -> None:
    limits = Limits(
        max_model_calls=10,
        max_tool_calls=20,
        max_total_tokens=10_000,
        max_cost_usd=1.0,
        per_tool={"get_weather": 5},
    )
    usage = RunUsage(
        model_calls=3, tool_calls=4, input_tokens=3_000, output_tokens=1_000, cost_usd=0.2
    )
    left = budgets.limits_left(limits, usage, T0, T0.replace(second=30))
    common = {"children": 2, "unstarted_calls": 2, "tools_left": {"get_weather": 3}}

    fair = budgets.child_limits(left, **common)
    # 10 - 3 used - 1 kept for the parent = 6 model calls; 20 - 4 - 2 unstarted = 14 tool calls.
    assert (fair.max_model_calls, fair.max_tool_calls) == (3, 7)
    # Tokens and cost: the parent keeps a share of its own for its next call.
    assert fair.max_total_tokens == 2_000 and fair.max_cost_usd == pytest.approx(0.8 / 3)
    assert fair.deadline_seconds == pytest.approx(570) and fair.per_tool == {"get_weather": 1}
    # Two slices never add up past what is left, whatever a child asks for.
    greedy = budgets.child_limits(left, **common, requested_model_calls=9, requested_tool_calls=50)
    assert (greedy.max_model_calls, greedy.max_tool_calls) == (3, 7)
    modest = budgets.child_limits(left, **common, requested_model_calls=1, requested_tool_calls=0)
    assert (modest.max_model_calls, modest.max_tool_calls) == (1, 0)


def test_each_check_names_the_cap_as_a_code_beside_its_sentence() -> None:
    """The cap is a field, not a prefix to read back: the stop reason is `CAP: DETAIL`."""
    limits = Limits(max_model_calls=2, max_tool_calls=3, per_tool={"t": 1})
    over = budgets.model_call_blocked(limits, RunUsage(model_calls=2))
    assert over == budgets.OverCap("max_model_calls", "2 model calls used")
    assert over.sentence == "max_model_calls: 2 model calls used"
    batch = budgets.tool_batch_blocked(limits, RunUsage(tool_calls=2), Counter(), ["a", "b"])
    assert batch is not None and batch.cap == "max_tool_calls"
    per_tool = budgets.tool_batch_blocked(limits, RunUsage(), Counter({"t": 1}), ["t"])
    assert per_tool == budgets.OverCap("per_tool", "t used 1 of 1, the batch needs 1")
    children = budgets.children_blocked(Limits(max_model_calls=4), RunUsage(model_calls=3), 1)
    assert children is not None and children.cap == "max_model_calls"


def test_a_child_needs_a_model_call_of_its_own_and_one_left_for_the_parent() -> None:
    limits = Limits(max_model_calls=4)
    assert budgets.children_blocked(limits, RunUsage(model_calls=2), 1) is None
    assert budgets.children_blocked(limits, RunUsage(model_calls=3), 1) is not None
    assert budgets.children_blocked(limits, RunUsage(model_calls=2), 2) is not None
    assert budgets.children_blocked(limits, RunUsage(model_calls=3), 0) is None


@given(
    input_bound=st.integers(0, 200_000),
    tokens_left=st.none() | st.integers(-1_000, 300_000),
    cost_left=st.none() | st.floats(-1.0, 50.0),
    price=st.none() | st.tuples(st.floats(0.0, 2_000.0), st.floats(0.0, 2_000.0)),
    requested=st.none() | st.integers(1, 100_000),
)
@settings(max_examples=500)
def test_a_reserved_call_fits_every_cap_or_is_not_started(
    input_bound: int,
    tokens_left: int | None,
    cost_left: float | None,
    price: tuple[float, float] | None,
    requested: int | None,
) -> None:
    cap = budgets.output_token_cap(input_bound, tokens_left, cost_left, price, requested)
    if isinstance(cap, budgets.OverCap):
        assert cap.cap in ("max_total_tokens", "max_cost_usd") and cap.detail.endswith("short)")
        return
    if cap is None:
        assert requested is None and tokens_left is None  # a cost cap alone may not bind
        return
    assert cap >= budgets.MIN_OUTPUT_TOKENS or (requested is not None and cap == requested)
    if requested is not None:
        assert cap <= requested
    if tokens_left is not None:
        assert input_bound + cap <= tokens_left
    if cost_left is not None and price is not None:
        cost = (input_bound * price[0] + cap * price[1]) / 1_000_000
        assert cost <= cost_left + 1e-9


turns = st.lists(
    st.tuples(st.integers(0, 2_000), st.integers(0, 6_000)),  # (prompt chars, answer chars)
    min_size=1,
    max_size=6,
)


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_generated_runs_end_at_or_under_their_token_cap(live: Live, run_id: str) -> None:
    cases = examples(st.tuples(turns, st.integers(1_500, 12_000)), 12)
    for n, (script_turns, cap) in enumerate(cases):
        name = f"{run_id}-{n}"
        live.provider.register(
            scripted(
                name,
                *(
                    ScriptTurn(
                        text="x" * prompt,  # padding the next request by as much
                        tool_calls=[
                            scripted_call(
                                "get_weather",
                                f"c_{name}_{i}",
                                city="Oslo",
                                date=f"2026-12-{i + 1:02d}",
                            )
                        ],
                    )
                    for i, (prompt, _) in enumerate(script_turns)
                ),
                # Never empty: an empty answer is sent back (blocked-not-completed).
                ScriptTurn(text="y" * max(1, script_turns[-1][1])),
            )
        )
        run_input = agent_input(
            name,
            "openai-chat",
            "Weather in Oslo, again and again.",
            ["get_weather"],
            limits=Limits(max_total_tokens=cap, max_model_calls=10, max_tool_calls=10),
        )
        result = await result_of(await start_run(live.client, live.worker, name, run_input))
        used = result.usage.input_tokens + result.usage.output_tokens
        assert used <= cap, (cap, used, result.stop_reason)
        requests = [r for r in live.provider.requests if r["script"] == name]
        assert len(requests) == result.usage.model_calls
        # Each call was sent what was left of the cap after its input; once the transcript is
        # measured (from the second call), that shrinks as the budget is spent.
        limits = [r["body"]["max_completion_tokens"] for r in requests]
        assert all(limit <= cap for limit in limits), (cap, limits)
        assert limits[1:] == sorted(limits[1:], reverse=True), limits
        if result.status == "limit_reached":
            assert result.stop_reason.startswith("max_total_tokens"), result.stop_reason


LONG_TASK = "Summarise the weather in Oslo this week for a traveller. " * 37  # ~2.1 KB


def counted(scripted_provider: ScriptedProvider, model: str) -> list[int]:
    return [c["input_tokens"] for c in scripted_provider.token_counts if c["script"] == model]


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
@pytest.mark.parametrize(
    ("provider", "limits"),
    [
        ("anthropic", Limits(max_total_tokens=1500)),
        ("openai-chat", Limits(max_total_tokens=1500)),
        ("openai-responses", Limits(max_total_tokens=1500)),
        ("anthropic", Limits(max_cost_usd=1.5)),  # $0.001 a token: 1500 tokens
        ("openai-chat", Limits(max_cost_usd=1.5)),
    ],
)
async def test_a_small_cap_asks_the_providers_count_when_the_bound_would_refuse(
    live: Live, run_id: str, provider: str, limits: Limits
) -> None:
    model = f"priced-{run_id}"
    live.provider.register(scripted(model, "Mild, then rain."))
    assert len(LONG_TASK.encode()) > 2_000
    run_input = AgentRunInput.model_validate(
        {"task": LONG_TASK, "provider": provider, "model": model, "tools": [], "limits": limits}
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "completed", result.stop_reason
    [tokens] = counted(live.provider, model)  # the counter was asked once
    requests = [r for r in live.provider.requests if r["script"] == model]
    assert len(requests) == result.usage.model_calls == 1
    # A third of the bound. Chat Completions is counted in the Responses API's shape, given
    # some room per item (`CHAT_ITEM_ALLOWANCE`): the scripted provider bills the Chat shape.
    assert 400 < result.usage.input_tokens < 1500 / 2
    reserved = tokens + (CHAT_ITEM_ALLOWANCE * 2 if provider == "openai-chat" else 0)
    assert result.usage.input_tokens <= reserved
    if provider != "openai-chat":
        assert tokens == result.usage.input_tokens
    used = result.usage.input_tokens + result.usage.output_tokens
    assert used <= 1500 and result.usage.cost_usd <= 1.5
    # The call reserved the count, not the bound: its output could use the rest of the cap.
    body = requests[0]["body"]
    sent = body.get("max_tokens") or body.get("max_output_tokens") or body["max_completion_tokens"]
    assert 1500 - reserved - 1 <= sent <= 1500 - reserved  # the cost cap's division may round


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_call_whose_counted_input_does_not_fit_is_still_refused(
    live: Live, run_id: str
) -> None:
    live.provider.register(scripted(run_id, "never sent"))
    run_input = agent_input(run_id, "anthropic", LONG_TASK, [], limits=Limits(max_total_tokens=500))
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "limit_reached"
    [tokens] = counted(live.provider, run_id)
    assert result.stop_reason.startswith(
        f"max_total_tokens: the next model call needs up to {tokens} input"
    )
    assert result.stop_reason.endswith("(its input as the provider counted it)")
    assert result.usage.model_calls == 0
    assert [r for r in live.provider.requests if r["script"] == run_id] == []
