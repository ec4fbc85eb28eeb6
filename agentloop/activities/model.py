"""`call_model`: load the transcript, append what is new, ask the provider, persist the answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentloop.activities.heartbeat import keep_heartbeating
from agentloop.activities.publishing import TextPublisher
from agentloop.activity_io import (
    COUNT_MODEL_INPUT,
    MODEL_CALL,
    MODEL_CALL_BY_REF,
    OVER_BUDGET,
    STORE_TEXTS,
    CallModelInput,
    CallModelResult,
    StoreTextsInput,
)
from agentloop.adapters import AdapterFactory
from agentloop.adapters._shared import text_safe
from agentloop.adapters.base import (
    DEFAULT_MAX_TOKENS,
    ModelRequest,
    ProviderAdapter,
    ProviderError,
)
from agentloop.context import Fitted, Measured, budget_chars, fit, input_token_bound
from agentloop.contract import ModelSettings
from agentloop.events import Event, ModelOutput
from agentloop.policies import budgets
from agentloop.policies.bounds import MAX_INLINE_ANSWER_CHARS
from agentloop.pricing import PriceTable
from agentloop.runtime.audit import Redactor, audit
from agentloop.store import Store, StoreError, with_contents
from agentloop.store.chains import TranscriptCache
from agentloop.store.specs import ToolSpecCache
from agentloop.tool_spec import ToolSpec
from agentloop.transcript import append

DEFAULT_OUTPUT_TOKENS: dict[str, int] = {
    "openai-chat": 16_384,
    "openai-responses": 16_384,
    "anthropic": DEFAULT_MAX_TOKENS,
}
"""The output-token limit a call reserved against a cap is sent when the run asked for none:
one the provider's models accept (the budget then lowers it as it is spent)."""


_Answer = TypeVar("_Answer")


@dataclass(frozen=True)
class _Prepared:
    transcript: Measured
    """The whole transcript, what is new included."""
    new_events: list[Event]
    sent: Fitted
    """What of it goes to the provider."""
    model_request: ModelRequest


class ModelActivities:
    def __init__(
        self,
        store: Store,
        adapters: AdapterFactory,
        prices: PriceTable | None = None,
        redactor: Redactor | None = None,
        *,
        publish: bool = True,
    ) -> None:
        self._redactor = redactor or Redactor()
        """Masks credentials in what a failure says: a provider's error may echo the key,
        and the message reaches the run's stop reason, its report and history."""
        self._publish = publish
        """Whether this worker's model calls publish their text (`AGENTLOOP_PUBLISH_EVENTS`)."""
        self._store = store
        self._transcripts = TranscriptCache()
        self._specs = ToolSpecCache()
        self._adapters = adapters
        self._prices = prices or PriceTable()

    def activities(self) -> list[Callable[..., Awaitable[object]]]:
        """What a worker registers: the model call with specs inline and by reference, the
        provider's count of a call's input, and the store for the long texts a model call is
        sent by reference."""
        return [self.call_model, self.call_model_by_ref, self.count_model_input, self.store_texts]

    @activity.defn(name=STORE_TEXTS)
    async def store_texts(self, request: StoreTextsInput) -> list[str]:
        return [
            await self._store.put_artifact(t.encode("utf-8"), "text/plain") for t in request.texts
        ]

    @activity.defn(name=MODEL_CALL)
    async def call_model(self, request: CallModelInput) -> CallModelResult:
        return await self._call(request)

    @activity.defn(name=MODEL_CALL_BY_REF)
    async def call_model_by_ref(self, request: CallModelInput) -> CallModelResult:
        return await self._call(request)

    @activity.defn(name=COUNT_MODEL_INPUT)
    async def count_model_input(self, request: CallModelInput) -> int:
        """The input tokens of the model call `request` describes, as the provider's own
        counter says (the call is not made): the request is built as `call_model` builds it."""
        prepared = await self._prepared(request)
        count = await self._asked(
            request, lambda adapter: adapter.count_input_tokens(prepared.model_request)
        )
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            # The provider's answer, reserved as the call's input: a count below zero would
            # hand the output more than the caps leave.
            _audit_failure(request, "bad_count", retryable=False)
            raise ApplicationError(
                f"the provider counted {count!r} input tokens", type="BadCount", non_retryable=True
            )
        audit(
            "model_call.counted",
            provider=request.provider,
            model=request.model,
            turn=request.turn,
            input_tokens=count,
        )
        return count

    async def _prepared(self, request: CallModelInput) -> _Prepared:
        """The transcript from the store with what is new, fitted to the context budget: the
        request the provider is sent (or asked to count)."""
        try:
            history = await self._transcripts.load(self._store, request.head)
            new_events = await with_contents(self._store, request.new_events)
            tools = await self._tools(request)
        except StoreError as exc:
            _audit_failure(request, "transcript_missing", retryable=False)
            raise ApplicationError(str(exc), type="TranscriptMissing", non_retryable=True) from exc
        transcript = history.plus(new_events)
        sent = fit(
            transcript,
            budget_chars(
                request.model,
                request.context_budget_chars,
                request.context_budget_tokens,
                request.chars_per_token,
            ),
            request.facts,
        )
        model_request = ModelRequest(
            provider=request.provider,
            model=request.model,
            events=sent.events,
            tools=tools,
            settings=request.settings,
        )
        return _Prepared(transcript, new_events, sent, model_request)

    async def _asked(
        self, request: CallModelInput, ask: Callable[[ProviderAdapter], Awaitable[_Answer]]
    ) -> _Answer:
        """One request to the provider, its failure classified for Temporal's retries."""
        try:
            adapter = self._adapters.get(request.provider)
            async with keep_heartbeating():
                return await ask(adapter)
        except ProviderError as exc:
            _audit_failure(request, exc.error_class, exc.retryable, exc.status_code, exc.request_id)
            # `from None`: the cause's own message would reach history unmasked.
            raise _as_application_error(exc, self._redactor.scrub) from None
        except Exception as exc:
            # Not classified by the adapter: Temporal retries it like any activity failure.
            _audit_failure(request, type(exc).__name__, retryable=True)
            message = self._redactor.scrub(f"{type(exc).__name__}: {exc}")
            raise ApplicationError(message, type=type(exc).__name__) from None

    async def _call(self, request: CallModelInput) -> CallModelResult:
        prepared = await self._prepared(request)
        transcript, new_events, sent = prepared.transcript, prepared.new_events, prepared.sent
        model_request = prepared.model_request
        tools = model_request.tools
        budget = request.budget
        bound = budget.input_tokens
        if bound is None:
            bound = input_token_bound(
                sent, new_events, tools, budget.context_tokens, budget.elided_before
            )
        settings = self._reserved(request, bound)
        model_request = model_request.model_copy(update={"settings": settings})
        async with TextPublisher(
            request.turn, enabled=request.publish_text and self._publish
        ) as publisher:
            asked = await self._asked(
                request, lambda adapter: adapter.complete(model_request, publisher.on_text)
            )
            output = text_safe(asked)
            publisher.whole(output.text)
        # One write for the turn, once the answer is in: the workflow moves its head only on
        # this activity's result, so a failed or retried call leaves nothing it needs unwritten.
        head, nodes = append(request.head, [*new_events, output])
        await self._store.put_nodes(nodes)
        self._transcripts.keep(head, transcript.plus([output]))
        cost = self._prices.cost(output.provider_ref.model or request.model, output.usage)
        ref = output.provider_ref
        # Ids, counts and classes only: never the model's text, reasoning or raw items.
        audit(
            "model_call.completed",
            provider=request.provider,
            api=ref.api,
            model=ref.model or request.model,
            response_id=ref.response_id,
            request_id=ref.request_id,
            turn=request.turn,
            stop=output.stop,
            stop_detail=output.stop_detail,
            tool_call_ids=[call.call_id for call in output.tool_calls],
            input_tokens=output.usage.input_tokens,
            output_tokens=output.usage.output_tokens,
            cost_usd=cost,
        )
        sent_head, _ = append(request.head, new_events)
        return CallModelResult(
            head=head,
            sent_head=sent_head,
            attempt=activity.info().attempt,
            output=await self._slim(output),
            cost_usd=cost,
            request_chars=sent.chars,
            elided_through=sent.elided_through,
            tools_ref=request.tools_ref or await self._stored_tools(tools),
        )

    def _reserved(self, request: CallModelInput, input_bound: int) -> ModelSettings:
        """The call's settings with the output-token limit that keeps it within the run's token
        and cost caps; `OverBudget` (the call is not started) when even its input may not fit."""
        budget, settings = request.budget, request.settings
        price = self._prices.price(request.model)
        if budget.tokens_left is None and (budget.cost_left is None or price is None):
            return settings
        requested = settings.max_output_tokens or DEFAULT_OUTPUT_TOKENS[request.provider]
        cap = budgets.output_token_cap(
            input_bound, budget.tokens_left, budget.cost_left, price, requested
        )
        if isinstance(cap, budgets.OverCap):
            _audit_failure(request, "over_budget", retryable=False)
            counted = (
                " (its input as the provider counted it)" if budget.input_tokens is not None else ""
            )
            raise ApplicationError(cap.sentence + counted, type=OVER_BUDGET, non_retryable=True)
        return settings.model_copy(update={"max_output_tokens": cap})

    async def _slim(self, output: ModelOutput) -> ModelOutput:
        """`output` as the workflow needs it, bounded whatever the model said: without the
        provider's raw items (the transcript keeps them to echo back) or the raw text of
        arguments that parsed, and a text over `MAX_INLINE_ANSWER_CHARS` cut, the whole stored
        by reference."""
        update: dict[str, object] = {
            "provider_ref": output.provider_ref.model_copy(update={"raw_items": []}),
            # Parsed arguments are what the workflow acts on; the raw text, kept only to show
            # what the model sent when it did not parse, is in the transcript.
            "tool_calls": [
                call.model_copy(update={"raw_arguments": ""}) if call.arguments else call
                for call in output.tool_calls
            ],
        }
        if len(output.text) > MAX_INLINE_ANSWER_CHARS:
            ref = await self._store.put_artifact(output.text.encode("utf-8"), "text/plain")
            update |= {
                "text": output.text[:MAX_INLINE_ANSWER_CHARS],
                "text_ref": ref,
                "text_chars": len(output.text),
            }
        return output.model_copy(update=update)

    async def _tools(self, request: CallModelInput) -> list[ToolSpec]:
        if request.tools_ref is None:
            return request.tools
        return await self._specs.get(self._store, request.tools_ref)

    async def _stored_tools(self, tools: list[ToolSpec]) -> str | None:
        """Where `tools` now are in the store, for the run's next calls (None: no tools)."""
        return await self._specs.put(self._store, tools) if tools else None


def _audit_failure(
    request: CallModelInput,
    error_class: str,
    retryable: bool,
    status_code: int | None = None,
    request_id: str | None = None,
) -> None:
    audit(
        "model_call.failed",
        provider=request.provider,
        model=request.model,
        turn=request.turn,
        error_class=error_class,
        retryable=retryable,
        status_code=status_code,
        request_id=request_id,
    )


def _as_application_error(exc: ProviderError, scrub: Callable[[str], str]) -> ApplicationError:
    delay = exc.retry_after_seconds
    return ApplicationError(
        scrub(f"{exc.error_class}: {exc}"),
        type=f"Provider:{exc.error_class}",
        non_retryable=not exc.retryable,
        next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
    )
