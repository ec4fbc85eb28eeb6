"""`call_model`: load the transcript, append what is new, ask the provider, persist the answer."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentloop.activities.heartbeat import keep_heartbeating
from agentloop.activities.messages import CallModelInput, CallModelResult
from agentloop.adapters import AdapterFactory
from agentloop.adapters.base import ModelRequest, ProviderError
from agentloop.pricing import PriceTable
from agentloop.store import Store, StoreError, load_transcript
from agentloop.store.transcript import append


class ModelActivities:
    def __init__(
        self, store: Store, adapters: AdapterFactory, prices: PriceTable | None = None
    ) -> None:
        self._store = store
        self._adapters = adapters
        self._prices = prices or PriceTable()

    @activity.defn(name="call_model")
    async def call_model(self, request: CallModelInput) -> CallModelResult:
        try:
            history = await load_transcript(self._store, request.head)
        except StoreError as exc:
            raise ApplicationError(str(exc), type="TranscriptMissing", non_retryable=True) from exc
        head, nodes = append(request.head, request.new_events)
        await self._store.put_nodes(nodes)
        model_request = ModelRequest(
            provider=request.provider,
            model=request.model,
            events=[*history, *request.new_events],
            tools=request.tools,
            settings=request.settings,
        )
        try:
            adapter = self._adapters.get(request.provider)
            async with keep_heartbeating():
                output = await adapter.complete(model_request)
        except ProviderError as exc:
            raise _as_application_error(exc) from exc
        head, nodes = append(head, [output])
        await self._store.put_nodes(nodes)
        activity.logger.info(
            "model answered: stop=%s calls=%d response=%s",
            output.stop,
            len(output.tool_calls),
            output.provider_ref.response_id,
        )
        cost = self._prices.cost(output.provider_ref.model or request.model, output.usage)
        return CallModelResult(head=head, output=output, cost_usd=cost)


def _as_application_error(exc: ProviderError) -> ApplicationError:
    delay = exc.retry_after_seconds
    return ApplicationError(
        f"{exc.error_class}: {exc}",
        type=f"Provider:{exc.error_class}",
        non_retryable=not exc.retryable,
        next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
    )
