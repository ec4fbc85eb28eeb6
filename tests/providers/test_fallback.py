"""Falling back across providers (issue #48, item 3): real dev server, the official clients
over HTTP to the scripted provider, which checks each protocol's pairing and echo rules on
every request (`clean_fakes` asserts it saw no violation, from either model's side).

The first model answers 503 to every attempt of its second turn; the run goes on with its
fallback, in the fallback's protocol, from the same transcript (a tool call made under the
first protocol answered under the second), and says so in its ledger, status and stream. Its
tokens and cost are the fallback's. A refusal, or a request the provider refused, never falls
back. The scripted errors carry `retry-after-ms: 10`, so the first model's retries take
milliseconds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentloop.cli.output import CommandError
from agentloop.cli.parser import build_parser
from agentloop.cli.starting import build_run_input
from agentloop.contract import AgentRunInput, AgentRunResult, FallbackModel, Limits, Provider
from agentloop.policies.checks import input_problem
from agentloop.policies.fallback import UNAVAILABLE, fallback_after
from agentloop.run_client import watch
from agentloop.run_events import RunEvent
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptedError, ScriptUsage
from agentloop.testing.turns import call as scripted_call
from agentloop.workflows.steps import MODEL_RETRY
from tests.live import Live, agent_input, scripted
from tests.support import result_of, start_run, waited_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
ATTEMPTS = MODEL_RETRY.maximum_attempts
UNAVAILABLE_EVERY_ATTEMPT = [ScriptedError(status=503, retry_after_ms="10")] * ATTEMPTS
FALLBACK_USAGE = ScriptUsage(prompt_tokens=300, completion_tokens=20)
PRICE_PER_TOKEN = 1000.0 / 1_000_000
"""`priced-...` models in the session's price table (tests/conftest.py)."""


def turns(
    *, second_turn_errors: list[ScriptedError], first_served_by: Provider | None = None
) -> list[ScriptTurn]:
    """A train lookup, then the answer; both models play the same turns. The fallback's first
    turn was served by the first model (`first_served_by`): the provider checks it comes back
    as that model said it, translated to the fallback's protocol."""
    return [
        ScriptTurn(
            tool_calls=[scripted_call("get_train_status", "call_t", **TRAIN)],
            expect_tool_results={"call_t": "G1234"},
            served_by=first_served_by,
        ),
        ScriptTurn(
            text="G1234 is {{call_t.status}}", errors=second_turn_errors, usage=FALLBACK_USAGE
        ),
    ]


async def stream_of(live: Live, run_id: str) -> list[RunEvent]:
    async def read() -> list[RunEvent]:
        return [event async for event in watch(live.client, run_id)]

    return await waited_for(read(), f"the stream of {run_id}")


@pytest.mark.parametrize(
    ("first", "fallback"),
    [("openai-chat", "anthropic"), ("anthropic", "openai-responses")],
)
async def test_unavailable_model_falls_back_in_its_protocol(
    live: Live, run_id: str, first: Provider, fallback: Provider
) -> None:
    down, backup = f"down-{run_id}", f"priced-backup-{run_id}"
    live.provider.register(
        Script(name=down, turns=turns(second_turn_errors=UNAVAILABLE_EVERY_ATTEMPT))
    )
    live.provider.register(
        Script(name=backup, turns=turns(second_turn_errors=[], first_served_by=first))
    )
    run_input = agent_input(
        down,
        first,
        "Is G1234 on time?",
        ["get_train_status"],
        fallbacks=[FallbackModel(provider=fallback, model=backup)],
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert isinstance(result.output, str) and result.output.startswith("G1234 is ")
    sent = [(r["script"], r["protocol"], r["turn"]) for r in live.provider.requests]
    assert sent == [(down, first, 0)] + [(down, first, 1)] * ATTEMPTS + [(backup, fallback, 1)]
    assert {k: v for k, v in live.service.stats()["counts"].items() if v} == {"trains": 1}
    # The call made under the first protocol went back to the fallback under its own id,
    # with its result (the provider checked the pairing; `clean_fakes`: no violation).
    assert [c.call_id for c in result.calls] == ["call_t"]
    assert result.calls[0].status == "succeeded"

    [switch] = result.model_switches
    assert (switch.turn, switch.from_provider, switch.from_model) == (2, first, down)
    assert (switch.to_provider, switch.to_model) == (fallback, backup)
    assert (switch.error_class, switch.requests) == ("transient", ATTEMPTS)
    assert f"Fell back: {switch.said()}" in result.report
    status = await handle.query("status")
    assert [s["to_model"] for s in status["model_switches"]] == [backup]

    # Counted on the model that served each turn: two model calls; the fallback's tokens
    # at its price, the first model (unpriced) costing nothing.
    assert result.usage.model_calls == 2
    assert result.usage.model_requests == 1 + ATTEMPTS + 1
    served = FALLBACK_USAGE.prompt_tokens + FALLBACK_USAGE.completion_tokens
    assert result.usage.cost_usd == pytest.approx(served * PRICE_PER_TOKEN)

    events = await stream_of(live, run_id)
    [moved] = [e for e in events if e.kind == "fallback"]
    assert (moved.turn, moved.provider, moved.model) == (2, fallback, backup)
    assert moved.stop_reason == switch.said()
    assert events[-1].kind == "done" and events[-1].status == "completed"


@pytest.mark.parametrize(
    ("second_turn", "status", "stop"),
    [
        (ScriptTurn(refusal="I can't help with that."), "refused", "refus"),
        (
            ScriptTurn(text="never", errors=[ScriptedError(status=400, message="bad field")]),
            "failed",
            "Provider:bad_request",
        ),
    ],
    ids=["refusal", "bad-request"],
)
async def test_refusal_or_refused_request_does_not_fall_back(
    live: Live, run_id: str, second_turn: ScriptTurn, status: str, stop: str
) -> None:
    first, backup = f"first-{run_id}", f"backup-{run_id}"
    live.provider.register(scripted(first, second_turn))
    live.provider.register(scripted(backup, "should not be asked"))
    run_input = agent_input(
        first,
        "openai-chat",
        "Is G1234 on time?",
        [],
        fallbacks=[FallbackModel(provider="anthropic", model=backup)],
    )
    result: AgentRunResult = await result_of(
        await start_run(live.client, live.worker, run_id, run_input)
    )
    assert result.status == status
    assert stop in result.stop_reason
    assert result.model_switches == []
    assert [r["script"] for r in live.provider.requests] == [first]


@pytest.mark.parametrize("error_class", sorted(UNAVAILABLE))
def test_unavailable_moves_down_the_chain_until_it_ends(error_class: str) -> None:
    assert fallback_after(error_class, 0, 2) == 1
    assert fallback_after(error_class, 1, 2) == 2
    assert fallback_after(error_class, 2, 2) is None
    assert fallback_after(error_class, 0, 0) is None


@pytest.mark.parametrize(
    "error_class",
    [
        "bad_request",
        "context_length_exceeded",
        "authentication",
        "permission",
        "not_found",
        "unprocessable",
        "protocol",
        "internal",
        "OverBudget",
        "TranscriptMissing",
    ],
)
def test_other_failures_never_fall_back(error_class: str) -> None:
    assert fallback_after(error_class, 0, 3) is None


async def test_a_cost_cap_needs_a_price_for_every_fallback(live: Live, run_id: str) -> None:
    """Else the cap could never bind on the fallback: the run fails at its start, naming it."""
    priced, unpriced = f"priced-{run_id}", f"unpriced-{run_id}"
    run_input = agent_input(
        priced,
        "openai-chat",
        "Hello",
        [],
        limits=Limits(max_cost_usd=1.0),
        fallbacks=[FallbackModel(provider="anthropic", model=unpriced)],
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await result_of(await start_run(live.client, live.worker, run_id, run_input))
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert f"model {unpriced!r} has no price" in cause.message
    assert live.provider.requests == []


def test_model_settings_must_suit_every_fallback() -> None:
    run_input = AgentRunInput(
        task="Hello",
        provider="openai-chat",
        model="m",
        model_settings={"reasoning_effort": "low"},
        fallbacks=[FallbackModel(provider="anthropic", model="n")],
    )
    problem = input_problem(run_input) or ""
    assert problem.startswith("fallbacks.0 (anthropic): model_settings.reasoning_effort")
    assert input_problem(run_input.model_copy(update={"fallbacks": []})) is None


def test_agentloop_run_takes_fallbacks_in_order(worker_settings: Settings) -> None:
    def built(*flags: str) -> AgentRunInput:
        args = build_parser().parse_args(["run", "Hi", "--model", "travel", *flags])
        return build_run_input(args, worker_settings)

    given = built("--fallback", "anthropic:claude-x", "--fallback", "openai-responses:gpt:y")
    assert [(f.provider, f.model) for f in given.fallbacks] == [
        ("anthropic", "claude-x"),
        ("openai-responses", "gpt:y"),
    ]
    assert built().fallbacks == []
    with pytest.raises(CommandError, match="expected PROVIDER:MODEL"):
        built("--fallback", "anthropic")
    with pytest.raises(ValidationError, match=r"fallbacks\.0\.provider"):
        built("--fallback", "gemini:pro")
