"""Client-side: how a run looks to a person, for `agentloop status` and `run --follow`.

Everything here renders a `RunStatusView`, an `AgentRunResult` or the model's text as the run's
stream brings it (`StreamedText`); nothing talks to Temporal.
On a terminal, following redraws one live panel (rich). Anywhere else (a pipe, a CI log, a
test) it prints a line whenever something changed, so the output reads as a log.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from agentloop.cli.output import PAUSED_PHASES, RunSnapshot
from agentloop.contract import (
    AgentRunResult,
    CallRecord,
    LimitsLeft,
    PendingApproval,
    RunStatusView,
    Usage,
    WriteAwaitingOperator,
)
from agentloop.moments import clock_of
from agentloop.operations.failing_tasks import FailingTask
from agentloop.reporting import counted
from agentloop.run_events import RunEvent

LIVE_RECENT_CALLS = 10
"""Calls the live panel shows (the most recent ones); a long run would not fit otherwise."""
LIVE_TEXT_LINES = 3
LIVE_TEXT_CHARS = 300
"""How much of the model's text being written the live panel shows (its end)."""

_CALL_STYLES = {
    "succeeded": "green",
    "confirmed_after_query": "green",
    "failed": "red",
    "rejected": "red",
    "denied": "red",
    "unknown": "yellow",
}


@dataclass(frozen=True)
class Line:
    """One line of a run's progress."""

    key: str
    """What the line is about (`phase`, `call:ID`, ...): a log prints it again only when the
    text for its key changes."""
    text: str
    style: str = ""
    ticking: bool = False
    """Changes by itself as time passes (seconds left): shown in a snapshot or the live panel,
    never logged, or the log would grow a line per poll."""
    actionable: bool = False
    """Asks a human to act, with the command to do it: on a terminal also printed once above
    the live panel, unwrapped, so the command can be copied whole."""


class StreamedText:
    """The model's text as the run's stream brings it (`agentloop.watch`): the turn being
    written, and what came since it was last shown. A retried model call's text so far is
    dropped, as the stream says."""

    def __init__(self) -> None:
        self.turn = 0
        self.current = ""
        self._fresh: list[str] = []

    def take(self, event: RunEvent) -> None:
        if event.kind == "text":
            if event.turn != self.turn:
                self.turn, self.current = event.turn, ""
            self.current += event.delta or ""
            self._fresh.append(f"model: {event.delta or ''}")
        elif event.kind == "retry" and event.turn == self.turn:
            self.current = ""
            self._fresh.append("model: (the call is retried: its text so far is replaced)")

    def fresh(self) -> list[str]:
        """What came since the last call, a line each (a log prints them as they come)."""
        fresh, self._fresh = self._fresh, []
        return fresh


def status_lines(
    run_id: str,
    view: RunStatusView,
    *,
    recent_calls: int | None = None,
    now: datetime | None = None,
    text: str = "",
) -> list[Line]:
    """Turn and phase, usage against limits, the calls (the last `recent_calls` of them if
    given), and what waits on a human with the command that answers it; given `now`, how
    long it has waited and how long the wait has left. Each section is its own list, so a
    section goes in by adding one. `text`: the end of the model's text being written."""
    sections = [
        [_phase_line(view)],
        _text_lines(text),
        _usage_lines(view.usage, view.limits_left, paused=view.phase in PAUSED_PHASES),
        [
            Line(f"fallback:{n}", f"fell back: {s.said()}")
            for n, s in enumerate(view.model_switches)
        ],
        _call_lines(view.calls, recent_calls),
        _wait_lines(view, now),
        _reminder_lines(view),
        [_approval_line(run_id, pending) for pending in view.pending_approvals],
        _question_lines(run_id, view.question),
        [_unresolved_line(run_id, write) for write in view.unresolved],
    ]
    return [line for section in sections for line in section]


def format_snapshot(found: RunSnapshot) -> str:
    """`RUN: EXECUTION (outcome, exit N)`, then the result, where the run is, or why it
    failed."""
    lines = [f"{found.workflow_id}: {found.execution} ({found.outcome}, exit {found.exit_code})"]
    if found.result is not None:
        lines.append(format_result(found.result))
    elif found.status is not None:
        shown = status_lines(found.workflow_id, found.status, now=datetime.now(UTC))
        lines += [line.text for line in shown]
    if found.failure is not None:
        lines.append(f"failed: {found.failure}")
    if found.task_failure is not None:
        lines += wedged_lines(found.workflow_id, found.task_failure)
    return "\n".join(lines)


def wedged_lines(workflow_id: str, failing: FailingTask) -> list[str]:
    """A wedged run for a person: the error its worker reports, and what to do."""
    lines = [failing.describe()]
    lines += [f"  {line}" for line in failing.error.splitlines()[1:12]]
    if failing.cause == "NON_DETERMINISTIC_ERROR":
        where = f" at event {failing.diverged_event_id}" if failing.diverged_event_id else ""
        lines.append(
            f"today's workers cannot replay this run's history (it diverges{where}): roll them "
            "back, or reset the run to a task before the divergence (--to EVENT_ID)"
        )
    if failing.reset_event_id is not None:
        lines.append(
            f"fix the workers, or reset the run to its last good task (event "
            f"{failing.reset_event_id}): agentloop reset {workflow_id}"
        )
    else:
        lines.append("fix the workers: no task of this run completed, there is nothing to reset to")
    return lines


def format_result(result: AgentRunResult) -> str:
    """The result for a person: status, each call, usage, the answer, and the stop report
    when the run did not complete."""
    lines = [f"status: {result.status} ({result.stop_reason})"]
    for call in result.calls:
        lines.append(
            f"  call {call.call_id}: {call.tool} {json.dumps(call.arguments)} "
            f"-> {call.status} {call.result_summary[:120]}"
        )
        lines += [f"    {r.described()}" for r in (call.approval, call.resolution) if r is not None]
    if result.status == "completed":
        lines.append(
            f"verified: by {result.verified_by}"
            if result.verified
            else "verified: no (no completion_check)"
        )
    usage = result.usage
    lines.append(
        f"usage: {usage.model_calls} model calls, {usage.tool_calls} tool calls, "
        f"{usage.input_tokens + usage.output_tokens} tokens; counted: {counted(usage)}"
    )
    if result.output is not None:
        output = result.output if isinstance(result.output, str) else json.dumps(result.output)
        lines.append(f"answer: {output}")
        if result.output_ref:
            lines.append(
                f"(the answer's start: the whole is {result.output_ref} in the store; "
                "`agentloop transcript` shows it)"
            )
    if result.status != "completed" and result.report:
        lines.append(result.report)
    return "\n".join(lines)


Show = Callable[[RunStatusView, StreamedText], None]


@contextmanager
def progress_display(run_id: str, stream: TextIO) -> Iterator[Show]:
    """A function showing each new status view of `run_id` on `stream`: a live panel on a
    terminal, changed lines otherwise."""
    console = Console(file=stream)
    if not console.is_terminal:
        yield ProgressLog(run_id, stream).show
        return
    # Transient: the panel goes when following ends, and the run's final view takes its place.
    with Live(console=console, auto_refresh=False, transient=True) as live:
        yield LivePanel(run_id, live).show


class LivePanel:
    """Progress on a terminal: one panel redrawn in place; what asks a human to act is also
    printed once above it."""

    def __init__(self, run_id: str, live: Live) -> None:
        self._run_id = run_id
        self._live = live
        self._printed: set[str] = set()

    def show(self, view: RunStatusView, streamed: StreamedText | None = None) -> None:
        streamed = streamed or StreamedText()
        lines = status_lines(
            self._run_id,
            view,
            recent_calls=LIVE_RECENT_CALLS,
            now=datetime.now(UTC),
            text=streamed.current if view.turn == streamed.turn else "",
        )
        for line in lines:
            if line.actionable and line.text not in self._printed:
                self._printed.add(line.text)
                # soft_wrap: the terminal wraps it, so a copied command stays one line.
                self._live.console.print(line.text, soft_wrap=True, markup=False, highlight=False)
        # The commands are above, once and whole; the panel names what waits only.
        body = Group(
            *(
                Text(_in_panel(line), style=line.style, no_wrap=True, overflow="ellipsis")
                for line in lines
            )
        )
        panel = Panel(body, title=self._run_id, title_align="left")
        self._live.update(panel, refresh=True)


def _in_panel(line: Line) -> str:
    if not line.actionable:
        return line.text
    return "(commands above) " + line.text.split("\n", 1)[0]


class ProgressLog:
    """Progress as a log: a line whenever the text for its key changed since last printed."""

    def __init__(self, run_id: str, stream: TextIO) -> None:
        self._run_id = run_id
        self._stream = stream
        self._printed: dict[str, str] = {}

    def show(self, view: RunStatusView, streamed: StreamedText | None = None) -> None:
        for text in streamed.fresh() if streamed else []:
            print(text, file=self._stream, flush=True)
        for line in status_lines(self._run_id, view):
            if line.ticking or self._printed.get(line.key) == line.text:
                continue
            self._printed[line.key] = line.text
            print(line.text, file=self._stream, flush=True)


def _text_lines(text: str) -> list[Line]:
    """The end of the model's text being written, its last few lines (shown live only)."""
    if not text.strip():
        return []
    tail = text[-LIVE_TEXT_CHARS:].splitlines()[-LIVE_TEXT_LINES:]
    return [Line(f"text:{n}", f"  > {line}", "cyan", ticking=True) for n, line in enumerate(tail)]


def _phase_line(view: RunStatusView) -> Line:
    stop = f" ({view.stop_reason})" if view.stop_reason else ""
    style = "bold yellow" if view.phase in PAUSED_PHASES else "bold"
    return Line("phase", f"turn {view.turn}: {view.phase}{stop}", style)


def _usage_lines(usage: Usage, left: LimitsLeft | None, *, paused: bool = False) -> list[Line]:
    """Each budget as `used, left`; limits the run does not have show use only."""
    tokens = usage.input_tokens + usage.output_tokens
    parts = [
        f"model calls {usage.model_calls} used" + _left(left.model_calls if left else None),
        f"tool calls {usage.tool_calls} used" + _left(left.tool_calls if left else None),
        f"tokens {tokens}" + _left(left.total_tokens if left else None),
        f"cost ${usage.cost_usd:.4f}" + _left(left.cost_usd if left else None, "${:.4f}"),
    ]
    lines = [
        Line("usage", "usage: " + " · ".join(parts), "dim"),
        Line("counts", "counted: " + counted(usage), "dim"),
    ]
    if left is not None and left.seconds is not None:
        # A wait for people does not count against the deadline: it stands still meanwhile.
        deadline = f"deadline: {left.seconds:.0f} s left"
        if paused:
            deadline = f"deadline paused: {left.seconds:.0f} s left while it waits"
        lines.append(Line("deadline", deadline, "dim", ticking=not paused))
    return lines


_TIMEOUTS = {
    "awaiting_approval": "approval",
    "awaiting_input": "input",
    "awaiting_reconciliation": "reconciliation",
}


def _wait_lines(view: RunStatusView, now: datetime | None) -> list[Line]:
    """How long the run has waited for people, and how long its wait has left."""
    if now is None or view.waiting_since is None or view.phase not in PAUSED_PHASES:
        return []
    text = f"waiting {_duration((now - view.waiting_since).total_seconds())}"
    if view.wait_until is not None:
        left = max((view.wait_until - now).total_seconds(), 0)
        until = clock_of(view.wait_until, now)
        text += f"; {_TIMEOUTS[view.phase]} timeout in {_duration(left)} ({until})"
    return [Line("wait", text, "yellow", ticking=True)]


def _reminder_lines(view: RunStatusView) -> list[Line]:
    """The reminders and escalations the run sent (`reminded desk of c_1 at 18:40:44`)."""
    said = [
        (f"reminded {sent.to}" if sent.stage == "reminder" else f"escalated to {sent.to}")
        + f" of {', '.join(sent.call_ids)} at {sent.at.astimezone().strftime('%H:%M:%S')}"
        for sent in view.notices_sent
    ]
    return [Line("reminders", "; ".join(said), "yellow")] if said else []


def _duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `2 h 03 min`."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _left(amount: float | None, shape: str = "{}") -> str:
    return "" if amount is None else ", " + shape.format(amount) + " left"


def _call_lines(calls: Sequence[CallRecord], recent: int | None) -> list[Line]:
    shown = calls if recent is None else calls[-recent:]
    lines = []
    if len(shown) < len(calls):
        lines.append(Line("calls:earlier", f"  ... {len(calls) - len(shown)} earlier calls"))
    for call in shown:
        text = f"  call {call.call_id} {call.tool}: {call.status}"
        lines.append(Line(f"call:{call.call_id}", text, _CALL_STYLES.get(call.status, "")))
    return lines


def _approval_line(run_id: str, pending: PendingApproval) -> Line:
    """The call exactly as the approver decides it, and the commands that decide it bound to
    the digest shown (a decision for other arguments would be refused)."""
    call_id, digest, approvers = pending.call_id, pending.args_digest, pending.approvers
    who = f" (approvers: {', '.join(approvers)})" if approvers else ""
    approver = approvers[0] if len(approvers) == 1 else "NAME"
    decide = f"{run_id} {call_id} --approver {approver} --digest {digest}"
    text = (
        f"waiting for approval: {call_id} {pending.tool} "
        f"{json.dumps(pending.arguments)} [{digest}]{who}\n"
        f"  approve: agentloop approve {decide}\n"
        f"  reject:  agentloop reject {decide} --reason WHY"
    )
    return Line(f"approval:{call_id}", text, "yellow", actionable=True)


def _question_lines(run_id: str, question: str | None) -> list[Line]:
    if question is None:
        return []
    text = (
        f"waiting for an answer: {question}\n"
        f"  answer: agentloop message {run_id} --sender NAME --text ANSWER"
    )
    return [Line("question", text, "yellow", actionable=True)]


def _unresolved_line(run_id: str, write: WriteAwaitingOperator) -> Line:
    call_id = write.call_id
    text = (
        f"outcome unknown: {call_id} {write.tool} (key {write.idempotency_key}): "
        f"{write.known}\n"
        f"  settle: agentloop resolve {run_id} {call_id} --outcome applied|not_applied "
        "--operator NAME"
    )
    return Line(f"unresolved:{call_id}", text, "yellow", actionable=True)
