"""Per-run model settings (issue #19 item 7): each reaches the wire under the provider's own
name, through the official clients to the scripted provider; one the provider does not take
fails the run at start, naming it."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentloop.contract import AgentRunInput
from tests.live import Live, scripted
from tests.support import result_of, start_run

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

COMMON = {"max_output_tokens": 500, "temperature": 0.3, "top_p": 0.9}
SENT: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # provider: (model_settings, what the request body must hold)
    "openai-chat": (
        {**COMMON, "stop": ["END"], "reasoning_effort": "low", "extra": {"user": "qa-7"}},
        {
            "max_completion_tokens": 500,
            "temperature": 0.3,
            "top_p": 0.9,
            "stop": ["END"],
            "reasoning_effort": "low",
            "user": "qa-7",
        },
    ),
    "openai-responses": (
        {**COMMON, "reasoning_effort": "high", "extra": {"user": "qa-7"}},
        {
            "max_output_tokens": 500,
            "temperature": 0.3,
            "top_p": 0.9,
            "reasoning": {"effort": "high"},
            "user": "qa-7",
        },
    ),
    "anthropic": (
        {"max_output_tokens": 500, "stop": ["END"], "extra": {"metadata": {"user_id": "qa-7"}}},
        {
            "max_tokens": 500,
            "stop_sequences": ["END"],
            "metadata": {"user_id": "qa-7"},
        },
    ),
}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "unstreamed"])
@pytest.mark.parametrize("provider", sorted(SENT))
async def test_each_model_setting_reaches_the_wire_under_the_providers_name(
    live: Live, run_id: str, provider: str, stream: bool
) -> None:
    settings, expected = SENT[provider]
    live.provider.register(scripted(run_id, "Set."))
    run_input = AgentRunInput.model_validate(
        {
            "task": "Say it.",
            "provider": provider,
            "model": run_id,
            "model_settings": settings,
            "stream": stream,
        }
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "completed", result.stop_reason
    [request] = live.provider.requests
    body = request["body"]
    assert {key: body.get(key) for key in expected} == expected


@pytest.mark.parametrize(
    ("provider", "settings", "named"),
    [
        ("openai-responses", {"stop": ["END"]}, "model_settings.stop: openai-responses takes no"),
        ("openai-chat", {"stop": ["a", "b", "c", "d", "e"]}, "model_settings.stop: openai-chat"),
        ("anthropic", {"reasoning_effort": "low"}, "model_settings.reasoning_effort: anthropic"),
        ("anthropic", {"temperature": 0.5}, "model_settings.temperature: anthropic takes no"),
        ("anthropic", {"top_p": 0.5}, "model_settings.top_p: anthropic takes no sampling"),
        ("openai-chat", {"temperature": 2.5}, "model_settings.temperature: 2.5 is over the 2.0"),
        ("openai-chat", {"extra": {"model": "other", "tools": []}}, "model, tools set by"),
        ("openai-chat", {"extra": {"blob": "x" * 5_000}}, "over the 4000 limit"),
        ("openai-chat", {"top_p": 0}, "model_settings.top_p"),
        ("openai-chat", {"reasoning_effort": "extreme"}, "model_settings.reasoning_effort"),
        ("openai-chat", {"seed": 7}, "model_settings.seed: Extra inputs are not permitted"),
    ],
)
async def test_a_setting_the_provider_does_not_take_fails_the_run_at_start_naming_it(
    live: Live, run_id: str, provider: str, settings: dict[str, Any], named: str
) -> None:
    raw = {"task": "Say it.", "provider": provider, "model": run_id, "model_settings": settings}
    handle = await start_run(live.client, live.worker, run_id, raw)
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert named in cause.message, cause.message
    assert live.provider.requests == []  # no model call was made
