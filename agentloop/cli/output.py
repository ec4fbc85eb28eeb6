"""Client-side: what scripts may rely on from `agentloop`: its exit codes, and the JSON
document each command prints with `--json`.

Like the workflow's contract (`contract.py`), this only ever grows: a code keeps its meaning,
a document keeps its fields. Under `--json` a command prints exactly one document on stdout
and nothing else there; messages for people go to stderr.
"""

from __future__ import annotations

import dataclasses
import textwrap
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel
from pydantic_core import to_json

from agentloop.contract import (
    AgentRunResult,
    CancelRequest,
    Phase,
    ResolveRequest,
    RunStatus,
    RunStatusView,
    UserMessage,
)
from agentloop.operations.failing_tasks import FailingTask
from agentloop.waiting import WAITING_PHASES

if TYPE_CHECKING:  # replay pulls in the workflow code: only `agentloop replay` needs it
    from agentloop.cli.replay import ReplayReport


# --- exit codes: one table ------------------------------------------------------------------------


class ExitCode(IntEnum):
    """What `agentloop` exits with. `status` and `run`/`continue --follow` exit with the
    run's code; any other command exits 0 when it did what it was asked."""

    COMPLETED = 0
    OK = 0  # an alias: a command that is not about a run's end did what it was asked
    FAILED = 1
    USAGE = 2
    STOPPED = 3
    PAUSED = 4
    RUNNING = 5
    WEDGED = 6
    """The run's workflow task keeps failing: it makes no progress until its workers are
    fixed or it is reset (`agentloop reset`)."""
    UNVERIFIED = 7
    """The run required verification and no completion check accepted its final answer."""
    INTERRUPTED = 130
    BROKEN_PIPE = 141
    """The reader of stdout went away (128 + SIGPIPE, as a shell reports it)."""


class CommandError(Exception):
    """What stops a command, said in one message for stderr, and the code it exits with
    (`agentloop.cli.commands.explain_error` prints it: no traceback)."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


RESULT_EXIT_CODES: dict[RunStatus, ExitCode] = {
    "completed": ExitCode.COMPLETED,
    "failed": ExitCode.FAILED,
    "unresolved": ExitCode.FAILED,
    "blocked": ExitCode.STOPPED,
    "limit_reached": ExitCode.STOPPED,
    "stalled": ExitCode.STOPPED,
    "denied": ExitCode.STOPPED,
    "refused": ExitCode.STOPPED,
    "incomplete": ExitCode.STOPPED,
    "rejected": ExitCode.STOPPED,
    "approval_timeout": ExitCode.STOPPED,
    "input_timeout": ExitCode.STOPPED,
    "cancelled": ExitCode.STOPPED,
    "unverified": ExitCode.UNVERIFIED,
}
PAUSED_PHASES: frozenset[Phase] = frozenset(WAITING_PHASES)
"""A running run in one of these phases waits for a human; in any other it is working."""


def _statuses(code: ExitCode) -> str:
    return ", ".join(status for status, mapped in RESULT_EXIT_CODES.items() if mapped is code)


EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.COMPLETED: "the run completed; any other command did what it was asked",
    ExitCode.FAILED: f"the run ended {_statuses(ExitCode.FAILED)}, or its workflow failed; "
    "or the command failed (run not found or ended, decision refused, a history diverged)",
    ExitCode.USAGE: "bad arguments, run input or configuration; Temporal unreachable",
    ExitCode.STOPPED: f"the run stopped on a limit or policy: {_statuses(ExitCode.STOPPED)}",
    ExitCode.PAUSED: f"the run waits for a human: {', '.join(sorted(PAUSED_PHASES))}",
    ExitCode.RUNNING: "the run is still working",
    ExitCode.WEDGED: "the run is wedged: its workflow task keeps failing (status shows the "
    "error); fix the workers or `agentloop reset` it",
    ExitCode.UNVERIFIED: "the run ended unverified: it required verification"
    " (require_verification) and no completion check accepted its final answer",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); Ctrl-C while following a run stops "
    "following and exits with the run's code (4 or 5): the run goes on",
}


def exit_codes_help() -> str:
    """The `--help` epilog: every exit code and what it means."""
    rows = []
    for code, meaning in EXIT_CODE_MEANINGS.items():
        label = f"  {int(code):<4} {code.name.lower():<12} "
        rows.append(textwrap.fill(meaning, 96, initial_indent=label, subsequent_indent=" " * 20))
    return "exit codes (`status` and `--follow` exit with the run's):\n" + "\n".join(rows)


# --- JSON documents -------------------------------------------------------------------------------


def print_json(document: Any) -> None:
    """One JSON document on stdout (a model, a list of models, or plain JSON values)."""
    print(to_json(document, indent=2).decode(), flush=True)


class StartedRun(BaseModel):
    """`run` / `continue` without `--follow`."""

    workflow_id: str
    url: str
    """The run in the Temporal UI."""


class RunSnapshot(BaseModel):
    """`status`, and `run` / `continue --follow` once the run ends (or following stops)."""

    workflow_id: str
    execution: str
    """Temporal's execution status: RUNNING, COMPLETED, FAILED, TERMINATED, TIMED_OUT, ..."""
    outcome: str
    """`completed`, `failed`, `stopped`, `paused` or `running`: the exit code's name."""
    exit_code: int
    """What the command exits with (`agentloop --help` lists the codes)."""
    status: RunStatusView | None = None
    """The `status` query, while the run runs."""
    result: AgentRunResult | None = None
    """The run's result, once it finished with one."""
    failure: str | None = None
    """Why the run ended without a result (its workflow failed, was terminated or timed out)."""
    task_failure: FailingTask | None = None
    """A running run's workflow task that keeps failing, with the worker's error (then there
    is no `status`: the run answers no query)."""


class Decision(BaseModel):
    """`approve` / `reject`: the decision sent and whether it counted."""

    workflow_id: str
    call_id: str
    approved: bool
    accepted: bool
    """False when the run refused the decision (stale digest, already decided, not an
    approver, no such call waiting): `reason` says why, and the command exits 1."""
    reason: str = ""
    args_digest: str = ""
    """The digest the decision is bound to."""
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    """The call as the run showed it (only when no `--digest` was given: the command read
    it from `status` before deciding)."""
    edited_arguments: dict[str, Any] | None = None
    """The arguments the call was approved with (`--set`, `--patch`); None: as proposed."""


class SignalSent(BaseModel):
    """`resolve` / `cancel` / `message`: the signal was delivered (the run acts on it in its
    own time)."""

    workflow_id: str
    signal: Literal["resolve", "cancel", "message"]
    request: ResolveRequest | CancelRequest | UserMessage


class HistoryWritten(BaseModel):
    """`history -o FILE` (without `-o` the history itself is the document)."""

    workflow_id: str
    path: Path
    events: int


class ListedRun(BaseModel):
    """One row of `list`."""

    workflow_id: str
    run_id: str
    phase: str | None
    status: str | None
    """`running`, or the result status once finished."""
    provider: str | None
    tenant: str | None
    started: str | None
    """ISO 8601."""
    task_failure: FailingTask | None = None
    """A running run whose workflow task keeps failing: the worker's error."""
    task_checked: bool = True
    """False for a running run whose workflow task could not be checked in time (then
    `task_failure` says nothing)."""


class InboxKey(BaseModel):
    """`keys inbox`: the inbox's key, as `AGENTLOOP_INBOX_KEY` takes it."""

    inbox_key: str
    """64 hex digits."""


class ApproverKey(BaseModel):
    """`keys new` / `keys public`: an approver's public key, as the workers take it."""

    approver: str
    public_key: str
    """`ed25519:BASE64`."""
    line: str
    """`NAME=ed25519:BASE64`: the approver's entry in AGENTLOOP_APPROVER_KEYS."""
    key_file: Path
    """The private key file: written by `new`, read by `public`."""


class ReplayedHistory(BaseModel):
    """One entry of `replay`: a history file and whether today's code replays it."""

    path: Path
    workflow_id: str | None
    events: int
    ok: bool
    readable: bool
    """False when the file is not a history at all (nothing was replayed)."""
    problem: str | None
    """One line: what diverged, or why the file could not be read."""
    divergence: dict[str, Any] | None
    """For a nondeterminism failure: `event_id`, `event_type`, `recorded`, `issued`, and the
    SDK's own `sdk_message`."""
    note: str | None

    @classmethod
    def of(cls, report: ReplayReport) -> ReplayedHistory:
        divergence = report.divergence
        return cls(
            path=report.path,
            workflow_id=report.workflow_id,
            events=report.events,
            ok=report.ok,
            readable=report.readable,
            problem=report.problem,
            divergence=dataclasses.asdict(divergence) if divergence else None,
            note=report.note,
        )
