"""Provider adapters, one module per wire protocol, behind `ProviderAdapter`."""

from __future__ import annotations

from agentloop.adapters.base import ProviderAdapter, ProviderError, ProviderName


class AdapterFactory:
    """Builds each provider's SDK client once per worker (connection pools are reused) with
    `max_retries=0`: Temporal owns retries, so every attempt is visible in history."""

    def __init__(self, *, openai_api_key: str | None = None, openai_base_url: str | None = None):
        self._openai_api_key = openai_api_key
        self._openai_base_url = openai_base_url
        self._adapters: dict[str, ProviderAdapter] = {}

    def get(self, provider: ProviderName) -> ProviderAdapter:
        if provider not in self._adapters:
            self._adapters[provider] = self._build(provider)
        return self._adapters[provider]

    def _build(self, provider: ProviderName) -> ProviderAdapter:
        if provider == "openai-chat":
            from openai import AsyncOpenAI

            from agentloop.adapters.openai_chat import OpenAIChatAdapter

            if not self._openai_api_key:
                raise ProviderError(
                    "OPENAI_API_KEY is not set on the worker",
                    error_class="authentication",
                    retryable=False,
                )
            client = AsyncOpenAI(
                api_key=self._openai_api_key, base_url=self._openai_base_url, max_retries=0
            )
            return OpenAIChatAdapter(client)
        raise ProviderError(
            f"provider {provider!r} is not available on this worker yet",
            error_class="provider_not_available",
            retryable=False,
        )
