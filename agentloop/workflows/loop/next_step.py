"""What `decide` answers: the next step of a run, as data only.

Each step names exactly what the workflow shell must do with Temporal (`workflows/steps.py`
and its neighbours); the shell never decides anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from agentloop.contract import RunStatus, StopCause
from agentloop.events import ToolCall
from agentloop.policies.compensation import Decided
from agentloop.tool_spec import ToolSpec
from agentloop.workflows.loop.state import DecisionToCheck


@dataclass(frozen=True)
class CallModel:
    turn: int


@dataclass(frozen=True)
class CheckPreconditions:
    """Ask the systems of record whether these calls may go ahead (in parallel), and the
    worker for the verdict of each approval rule in `rules` (call id -> rule)."""

    calls: list[tuple[ToolCall, ToolSpec]]
    rules: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckApprovals:
    """Ask the worker whether each of these approval decisions counts (its signature, when
    the worker has approver keys); in parallel."""

    decisions: list[DecisionToCheck]


@dataclass(frozen=True)
class RunTools:
    """Reads run in parallel; a write is always alone in its step."""

    calls: list[tuple[ToolCall, ToolSpec]]


@dataclass(frozen=True)
class AwaitApproval:
    call_ids: list[str]
    deadline: datetime


@dataclass(frozen=True)
class TimeOutApprovals:
    """The approval timeout of `call_ids` fell due, and the run's `on_approval_timeout` goes
    on: reject them, or escalate them and wait once more."""

    call_ids: list[str]
    action: Literal["reject", "escalate"]


@dataclass(frozen=True)
class Verify:
    """Ask the run's completion check whether the world agrees with the final answer."""

    check: str
    answer: str
    answer_ref: str = ""
    """The store key of the whole answer when `answer` is only its start."""


@dataclass(frozen=True)
class AwaitInput:
    call_ids: list[str]
    deadline: datetime


@dataclass(frozen=True)
class LookupOutcome:
    """Ask the system of record, by idempotency key, whether an unknown write happened."""

    call: ToolCall
    spec: ToolSpec
    idempotency_key: str


@dataclass(frozen=True)
class AwaitReconciliation:
    call_ids: list[str]
    deadline: datetime


@dataclass(frozen=True)
class Finish:
    status: RunStatus
    stop_reason: str
    output: str | dict[str, Any] | list[Any] | None = None
    output_ref: str = ""
    """The store key of the whole answer when `output` is only its start."""
    cause: StopCause | None = None
    """`stop_reason` as a code (None: a failure recorded before codes were)."""


@dataclass(frozen=True)
class Compensate:
    """The run ends without delivering (`finish`), or the model asked to roll back: first the
    undos of its writes are offered
    (`decided`, newest first; docs/concepts/compensation.md). No Temporal call: the undos
    then go through the batch pipeline like any write."""

    finish: Finish | None
    """None: the model asked to roll back (`roll_back`), and the run goes on after."""
    decided: list[Decided]


AwaitHumans = AwaitApproval | AwaitInput | AwaitReconciliation
"""The steps that wait for a person (their time does not count against the deadline)."""

Work = (
    CallModel
    | CheckPreconditions
    | CheckApprovals
    | RunTools
    | AwaitApproval
    | TimeOutApprovals
    | AwaitInput
    | Verify
    | LookupOutcome
    | AwaitReconciliation
    | Compensate
)
"""Every step but the last: what the shell carries out before it asks `decide` again."""

NextStep = Work | Finish
