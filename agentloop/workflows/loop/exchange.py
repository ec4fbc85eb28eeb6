"""What a step hands the Temporal side (`workflows/`), and what comes back to be recorded.

Each step's data goes down once (a fold's `start_*`, in `model_step.py` or `tool_step.py`,
answers with one of these) and comes back once (`record_*` takes what the activities answered).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentloop.activity_io import CallModelInput, CallModelResult, InputReply
from agentloop.contract import AgentRunInput, AgentRunResult
from agentloop.events import ErrorClass, Event, ToolResult
from agentloop.transcript import append, is_hollow


@dataclass(frozen=True)
class ModelTurn:
    """A model call about to be made."""

    request: CallModelInput
    sent: list[Event]
    """The events the request carries, whole (the request names stored contents by
    reference): the transcript head the call must come back with follows from them."""

    def transcript_problem(self, result: CallModelResult) -> str | None:
        """Why the store's transcript is not the one this call extended, if it is not: the
        head after the sent events must be the one the workflow computes. The output comes
        slim, lacking what its node hashes, so its node is the store's word; so are the sent
        events after a continue-as-new carried one without its
        stored text (`is_hollow`), each read back from the store by its content key."""
        if any(is_hollow(event) for event in self.sent):
            return None
        expected, _ = append(self.request.head, self.sent)
        if expected != result.sent_head:
            return f"the store's head before the output {result.sent_head} is not {expected}"
        return None


@dataclass(frozen=True)
class ModelFailure:
    """A model call that failed for good (its retries used up, or not retryable)."""

    error_class: str
    """`policies.errors`' class of the provider's failure, `timeout`, or the failure's type."""
    reason: str
    requests: int
    """Requests it sent the provider, Temporal's retries included."""


@dataclass(frozen=True)
class ToolsToRun:
    """A tool step about to start: its calls are reserved in the budget."""

    idempotency_keys: dict[str, str]
    """Call id -> the key a write carries ("" for a read)."""
    children: dict[str, AgentRunInput]
    """`delegate` calls -> the input of the child run each starts."""
    replies: dict[str, InputReply] = field(default_factory=dict)
    """Calls going on with a person's reply to what their tool asked -> the reply."""


@dataclass(frozen=True)
class ToolFailure:
    """A tool activity that failed for good (retries used up, timed out, worker lost)."""

    call_id: str
    message: str
    error_class: ErrorClass
    attempts: int = 1
    """The activity attempts it made, Temporal's retries included."""
    started: bool = True
    """False when no worker ever took the activity (it timed out waiting to start): nothing
    of it ran, so even a write is known not to have happened."""


@dataclass(frozen=True)
class ChildOutcome:
    """A child run (a `delegate` call) ended: its result, or None when it ended without one
    (terminated, failed)."""

    call_id: str
    result: AgentRunResult | None
    not_started: str = ""
    """Why the child run could not start (its workflow id taken): nothing of it ran."""


ToolOutcome = ToolResult | ToolFailure | ChildOutcome
"""What a tool step's call came back with."""
