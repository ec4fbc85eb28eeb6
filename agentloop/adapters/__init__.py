"""Provider adapters, one module per wire protocol, behind `ProviderAdapter`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop.adapters.base import ProviderAdapter, ProviderError
from agentloop.contract import Provider
from agentloop.runtime.config import ProviderEndpoints

if TYPE_CHECKING:
    import anthropic
    import openai

    SdkClient = openai.AsyncOpenAI | anthropic.AsyncAnthropic


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
        client = self._client(provider)
        self._clients.append(client)
        return adapter_for(provider, client)

    def _client(self, provider: Provider) -> SdkClient:
        endpoints = self._endpoints
        if provider == "anthropic":
            import anthropic

            return anthropic.AsyncAnthropic(
                api_key=_required(endpoints.anthropic_api_key, "ANTHROPIC_API_KEY"),
                base_url=endpoints.anthropic_base_url,
                max_retries=0,
                http_client=anthropic.DefaultAioHttpClient(),
            )
        import openai

        return openai.AsyncOpenAI(
            api_key=_required(endpoints.openai_api_key, "OPENAI_API_KEY"),
            base_url=endpoints.openai_base_url,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(),
        )


def adapter_for(provider: Provider, client: SdkClient) -> ProviderAdapter:
    """The adapter of `provider`'s wire protocol around an SDK client of the matching kind.
    Only that protocol's SDK is imported."""
    if provider == "anthropic":
        import anthropic

        from agentloop.adapters.anthropic_messages import AnthropicMessagesAdapter

        assert isinstance(client, anthropic.AsyncAnthropic)
        return AnthropicMessagesAdapter(client)
    import openai

    assert isinstance(client, openai.AsyncOpenAI)
    if provider == "openai-responses":
        from agentloop.adapters.openai_responses import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter(client)
    from agentloop.adapters.openai_chat import OpenAIChatAdapter

    return OpenAIChatAdapter(client)


def _required(key: str | None, variable: str) -> str:
    if not key:
        raise ProviderError(
            f"{variable} is not set on the worker", error_class="authentication", retryable=False
        )
    return key


__all__ = [
    "AdapterFactory",
    "ProviderAdapter",
    "ProviderEndpoints",
    "ProviderError",
    "adapter_for",
]
