"""What every provider adapter is, and the errors it may raise.

Contract (every adapter, tested both ways):
- `build_request` turns the canonical transcript into the provider's own request, honouring its
  ordering rules; every `ToolResult` is sent under the `call_id` of its `ToolCall`.
- `complete` returns one *complete* `ModelOutput`. A response that is not complete (a stream
  that ended before the provider's completion event, a length stop while emitting tool
  arguments, arguments that do not parse) comes back with `stop="truncated"` and its calls are
  never offered for execution. Every returned tool call has a non-empty `call_id`.
- SDK exceptions leave an adapter only as `ProviderError`.
- A streamed response's visible text goes to `on_text` piece by piece as it arrives (display
  only: the returned output is the truth).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from agentloop.contract import ModelSettings, Provider
from agentloop.events import Event, ModelOutput
from agentloop.tool_spec import ToolSpec

DEFAULT_MAX_TOKENS = 4096
"""The output-token limit an Anthropic request carries when the run set none: that API requires
one. Here rather than in its adapter, so the model activity can name it without the SDK."""


class ModelRequest(BaseModel):
    """One model call: the whole transcript so far, the tools allowed, the settings."""

    model_config = ConfigDict(frozen=True)

    provider: Provider
    model: str
    events: list[Event] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    settings: ModelSettings = Field(default_factory=ModelSettings)


class ProviderError(Exception):
    """A failed model call, already classified (see `policies.errors`)."""

    def __init__(
        self,
        message: str,
        *,
        error_class: str,
        retryable: bool,
        status_code: int | None = None,
        retry_after_seconds: float | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.request_id = request_id
        """The provider's id of the failed request, when it answered: what its support asks."""
        self.error_class = error_class
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after_seconds = retry_after_seconds


class UnsupportedEventError(Exception):
    """An event the provider's protocol cannot express: never silently dropped."""


TextSink = Callable[[str], None]
"""Takes each piece of the model's visible text as a streamed response brings it (never
reasoning, refusals or tool arguments): what a run publishes for its watchers."""


class ProviderAdapter(Protocol):
    async def complete(
        self, request: ModelRequest, on_text: TextSink | None = None
    ) -> ModelOutput: ...

    async def count_input_tokens(self, request: ModelRequest) -> int:
        """The input tokens `request` would take, as the provider's own counter says."""
        ...
