"""Provider adapters, one module per wire protocol, behind `ProviderAdapter`; `PROVIDERS` is
the one table of them, by the provider's name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentloop.adapters.base import ProviderAdapter, ProviderError
from agentloop.contract import Provider
from agentloop.runtime.config import ProviderEndpoints

if TYPE_CHECKING:
    import anthropic
    import openai

    SdkClient = openai.AsyncOpenAI | anthropic.AsyncAnthropic


@dataclass(frozen=True)
class Registration:
    """How one provider's adapter is made. Two functions, so that making it imports that
    provider's SDK and adapter module alone, when a run first calls the provider: anthropic
    alone costs a worker 2 s at start, openai 1 s, and most workers need one."""

    client: Callable[[ProviderEndpoints], SdkClient]
    """Its SDK client, from the worker's keys and base URLs."""
    adapter: Callable[[SdkClient], ProviderAdapter]
    """Its adapter around a client of that SDK."""


class AdapterFactory:
    """Builds each provider's SDK client once per worker (connection pools are reused) with
    `max_retries=0`: Temporal owns retries, so every attempt is visible in history.

    The clients send over aiohttp, the transport both SDKs offer for async use
    (`DefaultAioHttpClient`) beside their default httpx one: a streamed call of a 20-turn
    conversation costs 20-30% less CPU that way, for each of the three protocols (`make
    bench`, section 7)."""

    def __init__(self, endpoints: ProviderEndpoints) -> None:
        self._endpoints = endpoints
        self._adapters: dict[str, ProviderAdapter] = {}
        self._clients: list[SdkClient] = []

    def get(self, provider: Provider) -> ProviderAdapter:
        if provider not in self._adapters:
            self._adapters[provider] = self._build(provider)
        return self._adapters[provider]

    async def close(self) -> None:
        """Close the clients built so far (their connection pools)."""
        clients, self._clients = self._clients, []
        self._adapters.clear()
        for client in clients:
            await client.close()

    def _build(self, provider: Provider) -> ProviderAdapter:
        registered = _registration(provider)
        client = registered.client(self._endpoints)
        self._clients.append(client)
        return registered.adapter(client)


def adapter_for(provider: Provider, client: SdkClient) -> ProviderAdapter:
    """The adapter of `provider`'s wire protocol around an SDK client of the matching kind.
    Only that protocol's SDK is imported."""
    return _registration(provider).adapter(client)


def _registration(provider: Provider) -> Registration:
    """`provider`'s row of `PROVIDERS`. A name not in it is refused, never taken for another
    provider: the contract admits none such, but a caller may pass any string."""
    found = PROVIDERS.get(provider)
    if found is None:
        raise ProviderError(
            f"no adapter for provider {provider!r}; known providers: {', '.join(PROVIDERS)}",
            error_class="bad_request",
            retryable=False,
        )
    return found


def _openai_client(endpoints: ProviderEndpoints) -> openai.AsyncOpenAI:
    import openai

    return openai.AsyncOpenAI(
        api_key=_required(endpoints.openai_api_key, "OPENAI_API_KEY"),
        base_url=endpoints.openai_base_url,
        max_retries=0,
        http_client=openai.DefaultAioHttpClient(),
    )


def _anthropic_client(endpoints: ProviderEndpoints) -> anthropic.AsyncAnthropic:
    import anthropic

    return anthropic.AsyncAnthropic(
        api_key=_required(endpoints.anthropic_api_key, "ANTHROPIC_API_KEY"),
        base_url=endpoints.anthropic_base_url,
        max_retries=0,
        http_client=anthropic.DefaultAioHttpClient(),
    )


def _openai_chat(client: SdkClient) -> ProviderAdapter:
    from agentloop.adapters.openai_chat import OpenAIChatAdapter

    return OpenAIChatAdapter(_as_openai(client))


def _openai_responses(client: SdkClient) -> ProviderAdapter:
    from agentloop.adapters.openai_responses import OpenAIResponsesAdapter

    return OpenAIResponsesAdapter(_as_openai(client))


def _anthropic_messages(client: SdkClient) -> ProviderAdapter:
    import anthropic

    from agentloop.adapters.anthropic_messages import AnthropicMessagesAdapter

    assert isinstance(client, anthropic.AsyncAnthropic)
    return AnthropicMessagesAdapter(client)


def _as_openai(client: SdkClient) -> openai.AsyncOpenAI:
    import openai

    assert isinstance(client, openai.AsyncOpenAI)
    return client


PROVIDERS: Mapping[Provider, Registration] = {
    "openai-chat": Registration(_openai_client, _openai_chat),
    "openai-responses": Registration(_openai_client, _openai_responses),
    "anthropic": Registration(_anthropic_client, _anthropic_messages),
}
"""Every provider a run may name (`contract.Provider`), and how its adapter is made."""


def _required(key: str | None, variable: str) -> str:
    if not key:
        raise ProviderError(
            f"{variable} is not set on the worker", error_class="authentication", retryable=False
        )
    return key


__all__ = [
    "PROVIDERS",
    "AdapterFactory",
    "ProviderAdapter",
    "ProviderEndpoints",
    "ProviderError",
    "Registration",
    "adapter_for",
]
