"""What comes into a running run from outside: its signals and the `decide_approval` update,
taken as raw payloads and checked here, by agentloop's code, before anything acts on them.

A payload that is missing, null, not JSON, too large, too deep, or not the shape the signal
takes is refused with the field and the reason (recorded in `status.refused_decisions`; an
update is rejected with that reason): it never reaches a handler that would fail the workflow
task, and it is never dropped without a trace. Workflow code (deterministic).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

from agentloop.contract import (
    APPROVE_SIGNAL,
    CANCEL_SIGNAL,
    DECIDE_UPDATE,
    DELIVER_UPDATE,
    MESSAGE_SIGNAL,
    RESOLVE_SIGNAL,
    ApprovalDecision,
    CancelRequest,
    Delivery,
    ResolveRequest,
    UserMessage,
    describe_validation_error,
)
from agentloop.policies.bounds import (
    MAX_SIGNAL_BYTES,
    NOT_TEXT,
    OutOfBounds,
    clipped,
    is_text_value,
    loads_bounded,
)

NOTHING = RawValue(Payload(metadata={"encoding": b"binary/null"}))
"""What a handler gets when the signal or update was sent without an argument."""

SIGNAL_SHAPES: dict[str, type[BaseModel]] = {
    APPROVE_SIGNAL: ApprovalDecision,
    RESOLVE_SIGNAL: ResolveRequest,
    MESSAGE_SIGNAL: UserMessage,
    CANCEL_SIGNAL: CancelRequest,
}
"""The run's signals and what each takes."""
UPDATE_SHAPES: dict[str, type[BaseModel]] = {
    DECIDE_UPDATE: ApprovalDecision,
    DELIVER_UPDATE: Delivery,
}

Inbound = ApprovalDecision | ResolveRequest | UserMessage | CancelRequest | Delivery

SIGNALLED_BYTES_TO_CONTINUE = 1_000_000
"""Signal payload bytes one run takes in before it continues as new (`Inflow`), far below
Temporal's suggestion: Temporal records every signal before the run sees it, fails the
workflow task in flight once 2 MiB of them wait behind it, and a failed task sends the next one
through a replay of the whole history, slower the larger it is. A flood must find the run's
history small, its worker cache warm: half of Temporal's payload limit, so one signal near
that limit is enough (docs/concepts/limits.md, "A flood of signals")."""


HEAVY_TASK_BYTES = 2 * 2**20
"""Signal bytes one workflow task brought that make it a heavy one: as much as Temporal lets
wait behind a task in flight before it fails that task (`history.maximumBufferedEventsSizeInBytes`),
after which the next task (on any worker: it lost its sticky queue) replays the whole history."""
DEFER_UNDER_HISTORY_BYTES = 25_000_000
"""Past this history size a run continues as new from whatever task it is in (`Inflow.defer`):
half of the 50 MB at which Temporal terminates it."""
NEXT_TASK = timedelta(milliseconds=1)


class Inflow:
    """What this run's signals brought into its history, counted from their payload sizes
    (nothing decoded): every signal, used or refused, is in the history for good."""

    def __init__(self) -> None:
        self.signals = 0
        self.bytes = 0
        self._task = -1
        """The history length of the workflow task that brought the last signal."""
        self._task_bytes = 0
        """Signal bytes that task brought."""
        self._deferred = False
        """The last `defer` handed the run to the next task (it is never deferred twice)."""

    def take(self, args: Sequence[RawValue]) -> None:
        size = sum(len(raw.payload.data) for raw in args)
        self.signals += 1
        self.bytes += size
        task = workflow.info().get_current_history_length()
        self._task_bytes = self._task_bytes + size if task == self._task else size
        self._task = task

    def flooded(self) -> bool:
        """Time to continue as new (`startup.time_to_continue_as_new`)."""
        return self.bytes > SIGNALLED_BYTES_TO_CONTINUE

    async def defer(self) -> bool:
        """Before continuing as new: True when this workflow task is a heavy one
        (`HEAVY_TASK_BYTES`), after handing the run to a light one (a timer of 1 ms: the task
        continuing as new then carries only what arrived in between); never twice in a row.

        Temporal refuses a task that continues as new if a single signal arrived while it was
        in flight, and a heavy task takes long (it replayed the whole history: measured 0.2 to
        3.8 s for 6 to 46 MB on a loaded machine, against 30 to 700 ms for a task bringing one
        signal); a task that does not continue as new is refused only once 2 MiB wait behind
        it. Decided from history alone (the signals of one task share its history length), so
        replay takes the same path."""
        info = workflow.info()
        heavy = (
            not self._deferred
            and self._task == info.get_current_history_length()
            and self._task_bytes > HEAVY_TASK_BYTES
            and info.get_current_history_size() < DEFER_UNDER_HISTORY_BYTES
        )
        self._deferred = heavy
        if heavy:
            await workflow.sleep(NEXT_TASK)
        return heavy


class InboundRefused(Exception):
    """A signal or update payload refused; `reason` names the field, `shown` is a short
    rendering of what was sent (for the record)."""

    def __init__(self, reason: str, shown: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.shown = shown


def decode(raw: RawValue, max_bytes: int = MAX_SIGNAL_BYTES) -> Any:
    """The JSON value of a raw payload, within bounds (None for no value)."""
    payload = raw.payload
    encoding = payload.metadata.get("encoding", b"").decode("utf-8", "replace")
    if encoding == "binary/null":
        return None
    if encoding != "json/plain":
        raise InboundRefused(f"the payload is {encoding or 'not encoded'}, not JSON", "")
    if len(payload.data) > max_bytes:
        raise InboundRefused(
            f"the payload is {len(payload.data)} bytes, over the limit of {max_bytes}",
            clipped(payload.data[:200].decode("utf-8", "replace"), 200),
        )
    text = payload.data.decode("utf-8", "replace")
    try:
        value = loads_bounded(text, max_chars=max_bytes)
    except (OutOfBounds, ValueError) as exc:
        raise InboundRefused(f"the payload is not usable JSON: {exc}", clipped(text, 200)) from None
    if "\\u" in text and not is_text_value(value):
        # The run could not record or send it (no payload can encode a lone surrogate).
        raise InboundRefused(f"the payload {NOT_TEXT}", clipped(text, 200))
    return value


def parse(
    name: str, args: Sequence[RawValue], shapes: dict[str, type[BaseModel]] = SIGNAL_SHAPES
) -> Inbound:
    """Signal (or update) `name` with its raw arguments as the shape it takes, or
    `InboundRefused` saying why not."""
    shape = shapes.get(name)
    if shape is None:
        known = ", ".join(shapes)
        raise InboundRefused(f"no signal {name!r}: this run takes {known}", "")
    if len(args) > 1:
        raise InboundRefused(f"{name} takes one argument, not {len(args)}", "")
    value = decode(args[0]) if args else None
    shown = clipped(repr(value), 200)
    if value is None and shape is CancelRequest:
        value = {}  # `temporal workflow signal --name cancel` with no input: cancel, no reason
    if isinstance(value, str) and shape is CancelRequest:
        value = {"reason": value}
    if value is None:
        fields = ", ".join(n for n, f in shape.model_fields.items() if f.is_required())
        raise InboundRefused(f"{name}: a payload is required: {{{fields}, ...}}", shown)
    try:
        parsed: Inbound = shape.model_validate(value)  # type: ignore[assignment]
    except ValidationError as exc:
        raise InboundRefused(f"{name}: {describe_validation_error(exc)}", shown) from None
    return parsed
