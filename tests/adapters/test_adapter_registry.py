"""The adapter table: one row per provider the contract admits, each making its own protocol's
adapter, and a name not in it refused, never taken for another provider."""

from __future__ import annotations

from typing import get_args

import anthropic
import openai
import pytest

from agentloop.adapters import PROVIDERS, AdapterFactory, ProviderError, adapter_for
from agentloop.adapters.anthropic_messages import AnthropicMessagesAdapter
from agentloop.adapters.openai_chat import OpenAIChatAdapter
from agentloop.adapters.openai_responses import OpenAIResponsesAdapter
from agentloop.contract import Provider
from agentloop.runtime.config import ProviderEndpoints

ENDPOINTS = ProviderEndpoints("key", "http://127.0.0.1:9/v1", "key", "http://127.0.0.1:9")
"""Keys and URLs nothing is sent to: building a client opens no connection."""


def test_every_provider_the_contract_admits_has_a_row() -> None:
    assert sorted(PROVIDERS) == sorted(get_args(Provider))


@pytest.mark.parametrize(
    ("provider", "adapter"),
    [
        ("openai-chat", OpenAIChatAdapter),
        ("openai-responses", OpenAIResponsesAdapter),
        ("anthropic", AnthropicMessagesAdapter),
    ],
)
async def test_each_provider_gets_its_own_protocol(provider: Provider, adapter: type) -> None:
    factory = AdapterFactory(ENDPOINTS)
    try:
        assert isinstance(factory.get(provider), adapter)
    finally:
        await factory.close()


@pytest.mark.parametrize("client_kind", [openai.AsyncOpenAI, anthropic.AsyncAnthropic])
async def test_an_unknown_provider_is_refused_naming_the_known_ones(client_kind: type) -> None:
    client = client_kind(api_key="key", base_url="http://127.0.0.1:9", max_retries=0)
    try:
        with pytest.raises(ProviderError) as refused:
            adapter_for("gemini", client)  # type: ignore[arg-type]  # what a caller may pass
    finally:
        await client.close()
    message = str(refused.value)
    assert "'gemini'" in message
    assert all(name in message for name in get_args(Provider))
    assert (refused.value.error_class, refused.value.retryable) == ("bad_request", False)


async def test_the_factory_refuses_an_unknown_provider_before_building_a_client() -> None:
    factory = AdapterFactory(ProviderEndpoints())  # no keys: building any client would fail
    with pytest.raises(ProviderError, match="no adapter for provider 'openai'"):
        factory.get("openai")  # type: ignore[arg-type]
    await factory.close()
