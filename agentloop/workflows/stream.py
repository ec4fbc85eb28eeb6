"""The run's Workflow Stream (`temporalio.contrib.workflow_streams`): what watchers read.

The workflow publishes what only it knows (`loop.watching`); the model activity publishes the
model's text through the stream's publish signal. Publishing here issues no command, so it
changes nothing a replay compares; what a run keeps of its stream is bounded
(`MAX_RETAINED_ITEMS`, `MAX_RETAINED_BYTES`) whoever publishes, and a publish the stream cannot
read is dropped, never a failed workflow task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import PublishInput, WorkflowStream, WorkflowStreamState

from agentloop.run_events import MAX_RETAINED_BYTES, MAX_RETAINED_ITEMS, TOPIC, RunEvent

PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
"""The stream's publish signal (its name in `temporalio.contrib.workflow_streams`)."""
MAX_PUBLISHERS = 64
"""Publishers whose sequence numbers a run keeps for deduplication (the model calls of the last
turns); the oldest go first, so no stream of made-up publisher ids can grow the run."""

_STATE = TypeAdapter(WorkflowStreamState)


class RunStream(WorkflowStream):
    """`WorkflowStream` with its retention bounded and its publish signal made safe."""

    def __init__(self, carried: Any = None) -> None:
        # Built from `AgentRun.__init__` (the stream checks its caller is an `__init__`). The
        # carried stream is workflow input: items that do not decode start it empty (the
        # stream decodes them before it registers anything, so it can be built again).
        try:
            super().__init__(prior_state=carried_state(carried))
        except Exception as exc:
            workflow.logger.warning("carried stream dropped: %s", type(exc).__name__)
            super().__init__(prior_state=None)
        # The publish signal goes through the run's dynamic signal handler (`receive`), never
        # a handler of its own: one that came with the start (signal-with-start, or sent
        # before the first task) was taken by the SDK as a dynamic signal, (name, args), and
        # then handed to the named handler registered meanwhile, which failed every workflow
        # task of the run (TypeError) for ever.
        workflow.set_signal_handler(PUBLISH_SIGNAL, None)
        self._bound()

    def publish(self, event: RunEvent) -> None:
        self.topic(TOPIC).publish(event.published())
        self._bound()

    def receive(self, args: Sequence[RawValue]) -> None:
        """The publish signal, from an activity or anyone who may signal the run, as the
        run's dynamic handler took it: anything but one `PublishInput` is dropped, and an item
        that is not a payload ends the batch (display only, so nothing else is lost)."""
        try:
            [raw] = args
            publish = workflow.payload_converter().from_payload(raw.payload, PublishInput)
            self._on_publish(publish)
        except Exception as exc:  # a hostile publish must not fail the workflow task
            workflow.logger.warning("stream publish dropped: %s", type(exc).__name__)
        self._bound()

    def _bound(self) -> None:
        """Drop the oldest items past the retention bounds, and the oldest publishers."""
        sizes = [item.data.ByteSize() + len(item.topic) for item in self._log]
        total, keep_from = sum(sizes), 0
        while keep_from < len(sizes) and (
            len(sizes) - keep_from > MAX_RETAINED_ITEMS or total > MAX_RETAINED_BYTES
        ):
            total -= sizes[keep_from]
            keep_from += 1
        if keep_from:
            self.truncate(self._base_offset + keep_from)
        if len(self._publishers) > MAX_PUBLISHERS:
            newest = sorted(self._publishers.items(), key=lambda kv: kv[1].last_seen)
            self._publishers = dict(newest[-MAX_PUBLISHERS:])

    def carried(self) -> dict[str, Any]:
        """What the next run starts its stream from (pollers detached first)."""
        state: dict[str, Any] = _STATE.dump_python(self.get_state(), mode="json")
        return state


def carried_state(raw: Any) -> WorkflowStreamState | None:
    """The stream a run continued as new carried, or None (a fresh start, or anything not
    shaped like one: the stream then starts empty rather than failing the run)."""
    if raw is None:
        return None
    try:
        return _STATE.validate_python(raw)
    except (ValidationError, TypeError, ValueError):
        return None
