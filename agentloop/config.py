"""Worker and client configuration, read from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel

from agentloop.adapters import ProviderEndpoints
from agentloop.contract import DEFAULT_TASK_QUEUE

DEFAULT_STORE_URL = "sqlite:///.agentloop/store.db"
DEFAULT_EXAMPLE_SERVICE_URL = "http://127.0.0.1:8787"


class Settings(BaseModel):
    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    task_queue: str = DEFAULT_TASK_QUEUE
    store_url: str = DEFAULT_STORE_URL
    example_service_url: str = DEFAULT_EXAMPLE_SERVICE_URL
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    ui_url: str = "http://localhost:8233"
    pricing_file: str | None = None
    """JSON `{"model-prefix": [input, output]}` in USD per million tokens, over the defaults."""
    tool_http_timeout_seconds: float = 30.0
    """How long an example tool waits for its system of record; a write that gets no answer
    in time has an unknown outcome and is looked up, never resent blindly."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        names = {
            "temporal_address": "TEMPORAL_ADDRESS",
            "temporal_namespace": "TEMPORAL_NAMESPACE",
            "task_queue": "AGENT_LOOP_TASK_QUEUE",
            "store_url": "AGENTLOOP_STORE_URL",
            "example_service_url": "AGENTLOOP_EXAMPLE_SERVICE_URL",
            "openai_api_key": "OPENAI_API_KEY",
            "openai_base_url": "OPENAI_BASE_URL",
            "anthropic_api_key": "ANTHROPIC_API_KEY",
            "anthropic_base_url": "ANTHROPIC_BASE_URL",
            "ui_url": "AGENTLOOP_UI_URL",
            "tool_http_timeout_seconds": "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS",
            "pricing_file": "AGENTLOOP_PRICING_FILE",
        }
        return cls(**{field: env[var] for field, var in names.items() if env.get(var)})

    def provider_endpoints(self) -> ProviderEndpoints:
        return ProviderEndpoints(
            openai_api_key=self.openai_api_key,
            openai_base_url=self.openai_base_url,
            anthropic_api_key=self.anthropic_api_key,
            anthropic_base_url=self.anthropic_base_url,
        )

    def run_url(self, workflow_id: str) -> str:
        return f"{self.ui_url}/namespaces/{self.temporal_namespace}/workflows/{workflow_id}"
