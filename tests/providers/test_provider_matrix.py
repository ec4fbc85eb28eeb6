"""The seeds' regression matrix (seed 000, "把协议往返变成回归用例"), for each of the three
provider protocols, streamed and not: real dev server, the official `openai` / `anthropic`
clients over HTTP to the scripted provider, which checks pairing, adjacency and echo rules on
every request. Each case asserts the run's status, the model requests the provider received,
and the tool executions the example service counted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from agentloop.contract import AgentRunInput, AgentRunResult
from agentloop.demo.services import ExampleService
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptedError
from agentloop.workflows.steps import MODEL_RETRY
from tests.live import Live, scripted
from tests.support import result_of, start_run

pytestmark = pytest.mark.integration

PROVIDERS = ["openai-chat", "openai-responses", "anthropic"]
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER = {"city": "Shanghai", "date": "2026-12-01"}


def call(call_id: str, name: str, arguments: dict[str, Any] | str) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


@dataclass
class Case:
    turns: list[ScriptTurn]
    status: str
    model_requests: int
    """Requests the provider received; -1: the case's own `check` counts them."""
    executions: dict[str, int] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    """call id -> status in the result's ledger."""
    streamed_only: bool = False
    check: Callable[[AgentRunResult, ScriptedProvider, str], None] | None = None


def final_answer() -> Case:
    return Case([ScriptTurn(text="Nothing to look up.")], "completed", 1)


def single_call() -> Case:
    return Case(
        [
            ScriptTurn(
                tool_calls=[call("call_t", "get_train_status", TRAIN)],
                expect_tool_results={"call_t": "G1234"},
            ),
            ScriptTurn(text="G1234 is {{call_t.status}}"),
        ],
        "completed",
        2,
        {"trains": 1},
        {"call_t": "succeeded"},
    )


def out_of_order() -> Case:
    # The train read is slowed down (see `delays`), so the first-requested call ends last.
    return Case(
        [
            ScriptTurn(
                tool_calls=[
                    call("call_t", "get_train_status", TRAIN),
                    call("call_w", "get_weather", WEATHER),
                ],
                expect_tool_results={
                    "call_t": '"train_number": "G1234"',
                    "call_w": '"city": "Shanghai"',
                },
                fragment_chars=1,
            ),
            ScriptTurn(text="{{call_t.train_number}} {{call_w.city}}"),
        ],
        "completed",
        2,
        {"trains": 1, "weather": 1},
        {"call_t": "succeeded", "call_w": "succeeded"},
        check=lambda result, *_: _expect_output(result, "G1234 Shanghai"),
    )


def unknown_tool() -> Case:
    return Case(
        [
            ScriptTurn(
                tool_calls=[call("call_x", "book_flight", {"to": "Shanghai"})],
                expect_tool_results={"call_x": "unknown_tool"},
                undeclared_tools=["book_flight"],
            ),
            ScriptTurn(text="I cannot book flights."),
        ],
        "completed",
        2,
        {},
        {"call_x": "rejected"},
    )


def invalid_parameters() -> Case:
    return Case(
        [
            ScriptTurn(
                tool_calls=[call("call_bad", "get_weather", {"city": "Shanghai"})],
                expect_tool_results={"call_bad": "invalid_arguments"},
            ),
            ScriptTurn(
                tool_calls=[call("call_good", "get_weather", WEATHER)],
                expect_tool_results={"call_good": "Shanghai"},
            ),
            ScriptTurn(text="{{call_good.condition}}"),
        ],
        "completed",
        3,
        {"weather": 1},
        {"call_bad": "rejected", "call_good": "succeeded"},
    )


def stream_truncated() -> Case:
    return Case(
        [
            ScriptTurn(
                tool_calls=[call("call_cut", "get_train_status", TRAIN)],
                cut_stream_after_events=6,
                fragment_chars=2,
            )
        ],
        "incomplete",
        1,
        {},
        {},
        streamed_only=True,
    )


def length_stop_in_arguments() -> Case:
    return Case(
        [
            ScriptTurn(
                tool_calls=[call("call_len", "get_train_status", '{"train_number": "G1')],
                finish_reason="length",
            )
        ],
        "incomplete",
        1,
        {},
        {},
    )


def tool_error() -> Case:
    # The service refuses an impossible date: a business error the model sees under its id.
    return Case(
        [
            ScriptTurn(
                tool_calls=[
                    call("call_feb", "get_weather", {"city": "Oslo", "date": "2026-02-30"})
                ],
                expect_tool_results={"call_feb": "invalid_arguments"},
            ),
            ScriptTurn(text="That date does not exist."),
        ],
        "completed",
        2,
        {"weather": 1},
        {"call_feb": "failed"},
    )


def refusal() -> Case:
    return Case([ScriptTurn(refusal="I can't help with that.")], "refused", 1)


def rate_limited_then_ok() -> Case:
    def waited(result: AgentRunResult, provider: ScriptedProvider, script: str) -> None:
        times = [r["received_at"] for r in provider.requests if r["script"] == script]
        assert times[1] - times[0] >= 0.5, "the retry did not wait for retry-after-ms"

    return Case(
        [ScriptTurn(text="fine", errors=[ScriptedError(status=429, retry_after_ms="500")])],
        "completed",
        2,
        check=waited,
    )


def server_errors_until_attempts_run_out() -> Case:
    attempts = MODEL_RETRY.maximum_attempts

    def named(result: AgentRunResult, *_: Any) -> None:
        assert "transient" in result.stop_reason

    return Case(
        [
            ScriptTurn(
                text="never",
                errors=[ScriptedError(status=500, retry_after_ms="10")] * (attempts + 1),
            )
        ],
        "failed",
        attempts,
        check=named,
    )


def reasoning_echoed() -> Case:
    # Responses: a reasoning item; Anthropic: a thinking block with its signature; both must
    # come back verbatim with the calls they preceded (the provider checks). Chat: no-op.
    return Case(
        [
            ScriptTurn(
                reasoning="The user wants the train first.",
                tool_calls=[call("call_t", "get_train_status", TRAIN)],
                expect_tool_results={"call_t": "G1234"},
            ),
            ScriptTurn(text="{{call_t.train_number}} checked"),
        ],
        "completed",
        2,
        {"trains": 1},
        {"call_t": "succeeded"},
        check=lambda result, *_: _expect_output(result, "G1234 checked"),
    )


def paused_turn_continues() -> Case:
    # Anthropic pauses the turn once; the adapter continues it inside the same model call
    # (one more request), and the calls of the continued turn run once. Others ignore it.
    def requests(result: AgentRunResult, provider: ScriptedProvider, script: str) -> None:
        sent = [r for r in provider.requests if r["script"] == script]
        expected = 3 if sent[0]["protocol"] == "anthropic" else 2
        assert len(sent) == expected
        assert result.usage.model_calls == 2

    return Case(
        [
            ScriptTurn(
                text="Looking it up.",
                pause_turn=True,
                tool_calls=[call("call_w", "get_weather", WEATHER)],
                expect_tool_results={"call_w": "Shanghai"},
            ),
            ScriptTurn(text="{{call_w.condition}}"),
        ],
        "completed",
        -1,
        {"weather": 1},
        {"call_w": "succeeded"},
        check=requests,
    )


def _expect_output(result: AgentRunResult, output: str) -> None:
    assert result.output == output


CASES = {
    fn.__name__: fn
    for fn in (
        final_answer,
        single_call,
        out_of_order,
        unknown_tool,
        invalid_parameters,
        stream_truncated,
        length_stop_in_arguments,
        tool_error,
        refusal,
        rate_limited_then_ok,
        server_errors_until_attempts_run_out,
        reasoning_echoed,
        paused_turn_continues,
    )
}


@pytest.fixture(autouse=True)
async def clean_fakes(
    scripted_provider: ScriptedProvider, example_service: ExampleService
) -> AsyncIterator[None]:
    scripted_provider.reset()
    example_service.reset()
    example_service.set_delay("trains", 200)
    yield
    example_service.set_delay(None, 0)  # every delay a case set: later tests start clean
    assert scripted_provider.violations == []


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "unstreamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case_name", list(CASES))
async def test_regression_matrix(
    live: Live, run_id: str, provider: str, stream: bool, case_name: str
) -> None:
    case = CASES[case_name]()
    if case.streamed_only and not stream:
        pytest.skip("a stream cut applies to streamed responses only")
    live.provider.register(Script(name=run_id, turns=case.turns))
    run_input = AgentRunInput(
        task="Is train G1234 late on 2026-12-01, and what is the weather in Shanghai?",
        instructions="You are a travel assistant.",
        provider=provider,  # type: ignore[arg-type]
        model=run_id,
        tools=["get_train_status", "get_weather"],
        stream=stream,
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))

    assert result.status == case.status, result.stop_reason
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    assert case.model_requests == -1 or len(requests) == case.model_requests
    assert {r["protocol"] for r in requests} == {provider}
    assert all(bool(r["body"].get("stream")) is stream for r in requests)
    counts = {k: v for k, v in live.service.stats()["counts"].items() if v}
    assert counts == case.executions
    assert {c.call_id: c.status for c in result.calls} == case.calls
    if case.check is not None:
        case.check(result, live.provider, run_id)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_articles_first_case_the_weather_times_out_and_the_train_answers(
    live: Live, run_id: str, provider: str
) -> None:
    """Seed 000, case one: of two parallel reads the weather times out on every attempt
    while the train answers; a malformed train number is refused. Each result goes back
    under its own call id, and the answer quotes only the train."""
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[
                    call("call_train", "get_train_status", TRAIN),
                    call("call_weather", "get_weather", WEATHER),
                    call("call_bad", "get_train_status", {**TRAIN, "train_number": "12-AB"}),
                ],
                expect_tool_results={
                    "call_train": '"train_number": "G1234"',
                    "call_weather": "service unreachable: TimeoutError",
                    "call_bad": "train_number",
                },
            ),
            "G1234: {{call_train.status}}. The weather is unavailable.",
        )
    )
    live.service.set_delay("weather", 3_000)  # past the tools' 2 s HTTP timeout
    run_input = AgentRunInput(
        task="Is train G1234 late on 2026-12-01, and what is the weather in Shanghai?",
        provider=provider,  # type: ignore[arg-type]
        model=run_id,
        tools=["get_train_status", "get_weather"],
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "completed", result.stop_reason
    calls = {c.call_id: c for c in result.calls}
    assert {k: c.status for k, c in calls.items()} == {
        "call_train": "succeeded",
        "call_weather": "failed",
        "call_bad": "rejected",
    }
    status = live.service.stats()["requests"]
    trains = [r for r in status if r["endpoint"] == "trains"]
    weather = [r for r in status if r["endpoint"] == "weather"]
    # The malformed number never reached the service; the weather was tried on every attempt.
    assert len(trains) == 1 and "G1234" in trains[0]["path"]
    assert len(weather) == 3
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    assert len(requests) == 2 and {r["protocol"] for r in requests} == {provider}
    # The answer quotes the train's status as the service gave it under the train's id.
    async with aiohttp.ClientSession() as http:
        url = f"{live.service.base_url}/travel/trains/G1234"
        async with http.get(url, params={"date": TRAIN["date"]}) as response:
            train = await response.json()
    assert result.output == f"G1234: {train['status']}. The weather is unavailable."
    weather_record = calls["call_weather"]
    assert "transient" in weather_record.result_summary
