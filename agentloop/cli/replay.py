"""Replay recorded histories against today's `AgentRun` code, and say in plain words what
diverged when one does not replay.

A history is the JSON `agentloop history RUN_ID` writes (`WorkflowHistory.to_json()`), the JSON
`temporal workflow show --output json` writes, or one of `tests/histories/*.json`. Replay needs
no server and no worker: the SDK's `Replayer` runs the workflow code against the events and
fails where the code now issues other commands than the history recorded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from agentloop.contract import WORKFLOW_NAME
from agentloop.workflows.agent_run import AgentRun

if TYPE_CHECKING:
    from agentloop.runtime.config_checks import SandboxMode

__all__ = [
    "Divergence",
    "HistoryFileError",
    "ReplayReport",
    "explain",
    "history_files",
    "load_history",
    "parse_history",
    "replay_each",
    "replay_fetched",
    "replay_histories",
]


class HistoryFileError(Exception):
    """A file that cannot be replayed because it is not a readable history; the message is
    one line and names the problem."""


@dataclass(frozen=True)
class Divergence:
    """Where and how today's code stops matching a history (a nondeterminism failure)."""

    sdk_message: str
    """The SDK's own sentence, e.g. "[TMPRL1100] Nondeterminism error: Activity type of
    scheduled event 'a' does not match activity type of activity command 'b'"."""
    event_id: int | None = None
    """The history event where replay diverged (from the SDK's text, or found by replaying
    ever longer prefixes of the history when the text names none)."""
    event_type: str | None = None
    """That event's type, e.g. "ActivityTaskScheduled"."""
    recorded: str | None = None
    """What the history recorded there, in words."""
    issued: str | None = None
    """What today's code does there instead, in words."""

    def describe(self) -> str:
        where = f"at event {self.event_id}" if self.event_id is not None else "at an unknown event"
        if self.event_type:
            where += f" ({self.event_type})"
        if self.recorded and self.issued:
            what = f"the history recorded {self.recorded}, today's code {self.issued}"
        else:
            what = _strip_sdk_prefix(self.sdk_message)
        return f"diverged {where}: {what}"


@dataclass(frozen=True)
class ReplayReport:
    """The outcome for one history file: it replayed, it diverged, or it could not be read."""

    path: Path
    workflow_id: str | None = None
    events: int = 0
    problem: str | None = None
    """None when the history replayed; otherwise one line saying what went wrong."""
    divergence: Divergence | None = None
    """Set for a nondeterminism failure."""
    readable: bool = True
    """False when the file could not be loaded as a history (nothing was replayed)."""
    note: str | None = None
    """Something worth knowing about a history that replayed."""

    @property
    def ok(self) -> bool:
        return self.problem is None

    def line(self) -> str:
        """One line for a person: `ok  travel.json  (41 events, workflow replay-travel)`."""
        if not self.readable:
            return f"ERROR  {self.path}: {self.problem}"
        counted = f"{self.events} event{'' if self.events == 1 else 's'}"
        about = f"{counted}, workflow {self.workflow_id}"
        if self.ok:
            note = f"; {self.note}" if self.note else ""
            return f"ok  {self.path}  ({about}{note})"
        sdk = f' [SDK: "{self.divergence.sdk_message}"]' if self.divergence else ""
        return f"FAIL  {self.path}: {self.problem}  ({about}){sdk}"


# --- loading ---------------------------------------------------------------------------


def load_history(path: Path | str) -> WorkflowHistory:
    """The history in `path`; raises HistoryFileError with a one-line reason otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HistoryFileError("not JSON (the file is not UTF-8 text)") from None
    except OSError as exc:
        raise HistoryFileError(f"cannot read it: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HistoryFileError(
            f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    return parse_history(raw, default_workflow_id=path.stem)


def parse_history(raw: Any, *, default_workflow_id: str) -> WorkflowHistory:
    """A history from parsed JSON; raises HistoryFileError when it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("events"), list):
        raise HistoryFileError('not a Temporal history (no "events" list at the top level)')
    if not raw["events"]:
        raise HistoryFileError("the history has no events")
    if not all(isinstance(event, dict) for event in raw["events"]):
        raise HistoryFileError("not a Temporal history (an event is not a JSON object)")
    try:
        history = WorkflowHistory.from_json(default_workflow_id, raw)
    except Exception as exc:  # protobuf's ParseError, or the SDK's ValueError
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise HistoryFileError(f"not a Temporal history ({reason})") from None
    _check_events(history.events)
    first = history.events[0]
    workflow_id = first.workflow_execution_started_event_attributes.workflow_id
    if workflow_id and workflow_id != history.workflow_id:
        history = WorkflowHistory(workflow_id, history.events)
    return history


def _check_events(events: Sequence[HistoryEvent]) -> None:
    """What the SDK's replayer assumes, and may crash or hang on otherwise: a known type on
    every event, ids 1, 2, 3, ..., and WorkflowExecutionStarted first."""
    for position, event in enumerate(events, start=1):
        if event.event_type == EventType.EVENT_TYPE_UNSPECIFIED:
            raise HistoryFileError(
                f"not a Temporal history (event {event.event_id or position} has no known type)"
            )
        if event.event_id != position:
            raise HistoryFileError(
                f"not a complete history (expected event {position}, found event {event.event_id})"
            )
    if events[0].event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise HistoryFileError(
            "not a complete history (the first event is "
            f"{event_type_name(events[0])}, not WorkflowExecutionStarted)"
        )


def history_files(paths: Iterable[Path | str]) -> list[Path]:
    """Each path as given, a folder replaced by the `*.json` files in it (sorted). A folder
    without any stays in the list, and its report says so."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        inside = sorted(p for p in path.glob("*.json") if p.is_file()) if path.is_dir() else []
        for file in inside or [path]:
            if file not in found:
                found.append(file)
    return found


# --- replaying -------------------------------------------------------------------------


async def replay_histories(
    paths: Iterable[Path | str], sandbox: SandboxMode | None = None
) -> list[ReplayReport]:
    """Replay each history (a folder stands for the `*.json` files in it) against today's
    `AgentRun`; one report per file, in order. `sandbox`: in Temporal's sandbox or not
    (default: as workers run it, `AGENTLOOP_WORKFLOW_SANDBOX`)."""
    return [report async for report in replay_each(paths, sandbox)]


async def replay_each(
    paths: Iterable[Path | str], sandbox: SandboxMode | None = None
) -> AsyncIterator[ReplayReport]:
    """`replay_histories`, one report at a time as each file is done."""
    replayer = _replayer(sandbox)
    for path in history_files(paths):
        yield await _replay_file(replayer, path)


async def _replay_file(replayer: Replayer, path: Path) -> ReplayReport:
    if path.is_dir():
        return ReplayReport(path, problem="a folder without *.json files", readable=False)
    try:
        history = load_history(path)
    except HistoryFileError as exc:
        return ReplayReport(path, problem=str(exc), readable=False)
    return await _replay_history(replayer, path, history)


async def replay_fetched(
    histories: Iterable[WorkflowHistory],
    sandbox: SandboxMode | None = None,
    data_converter: DataConverter | None = None,
) -> list[ReplayReport]:
    """Replay histories fetched from a server (`WorkflowHandle.fetch_history`), each reported
    under its workflow id as its `path`. A run still running replays as far as it went.
    `data_converter`: the one the server's client reads payloads with (default: the workers')."""
    replayer = _replayer(sandbox, data_converter)
    return [
        await _replay_history(replayer, Path(history.workflow_id), history) for history in histories
    ]


async def _replay_history(replayer: Replayer, path: Path, history: WorkflowHistory) -> ReplayReport:
    report = ReplayReport(path, workflow_id=history.workflow_id, events=len(history.events))
    started = history.events[0].workflow_execution_started_event_attributes
    if started.workflow_type.name != WORKFLOW_NAME:
        problem = f"a history of workflow type {started.workflow_type.name!r}, not {WORKFLOW_NAME}"
        return dataclasses.replace(report, problem=problem)
    if _first_task_index(history.events) is None:
        return dataclasses.replace(report, note="no workflow task yet, nothing to replay")
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    failure = result.replay_failure
    if failure is None:
        return report
    sdk_message = _sdk_message(failure)
    if not isinstance(failure, NondeterminismError):
        return dataclasses.replace(report, problem=f"replay failed: {_first_line(sdk_message)}")
    divergence = await _divergence(replayer, history, sdk_message)
    return dataclasses.replace(report, problem=divergence.describe(), divergence=divergence)


def _replayer(sandbox: SandboxMode | None, converter: DataConverter | None = None) -> Replayer:
    """Today's AgentRun, run as workers run it and decoding payloads as they do (encrypted
    ones too, when the environment holds the codec keys)."""
    from agentloop.client import data_converter
    from agentloop.runtime.config import Settings
    from agentloop.worker import workflow_runner

    settings = Settings.from_env()
    return Replayer(
        workflows=[AgentRun],
        data_converter=converter or data_converter(settings),
        workflow_runner=workflow_runner(sandbox or settings.workflow_sandbox),
        runtime=_quiet_runtime(),
    )


@functools.cache
def _quiet_runtime() -> Runtime:
    """A runtime whose core does not log each failed workflow task to stdout: the report says
    what failed, once."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR")),
            metrics=None,
        )
    )


def _first_task_index(events: Sequence[HistoryEvent]) -> int | None:
    return next(
        (
            i
            for i, event in enumerate(events)
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
        ),
        None,
    )


# --- what diverged ---------------------------------------------------------------------

_ENVELOPE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
_SDK_PREFIX = re.compile(r"^\[TMPRL\d+\]\s*Nondeterminism error:\s*")
_EVENT_REF = re.compile(r"HistoryEvent\(id: (\d+)")
_FIELD_MISMATCH = re.compile(
    r"^(?P<field>.+?) of (?:.+?) '(?P<recorded>.*)' does not match "
    r"(?P<field2>.+?) of (?:.+?) '(?P<issued>.*)'$"
)
_NO_COMMAND = re.compile(r"^No command scheduled for event ")
_WRONG_MACHINE = re.compile(r"^(?P<machine>.+?) machine does not handle this event")


def _sdk_message(failure: BaseException) -> str:
    """The SDK's sentence, unwrapped from the workflow-task failure envelope it travels in."""
    text = str(failure)
    found = _ENVELOPE.search(text)
    if found is None:
        return text
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), found[1])


def _strip_sdk_prefix(message: str) -> str:
    return _SDK_PREFIX.sub("", message)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


async def _divergence(replayer: Replayer, history: WorkflowHistory, sdk_message: str) -> Divergence:
    sentence = _strip_sdk_prefix(sdk_message)
    named = _EVENT_REF.search(sentence)
    event_id = int(named[1]) if named else await _locate(replayer, history, sdk_message)
    event = next((e for e in history.events if e.event_id == event_id), None)
    return explain(sdk_message, event)


def explain(sdk_message: str, event: HistoryEvent | None) -> Divergence:
    """The divergence the SDK's sentence describes, at `event` (the history event where it
    happened, when known)."""
    sentence = _strip_sdk_prefix(sdk_message)
    if event is None:
        named = _EVENT_REF.search(sentence)
        divergence = Divergence(sdk_message, event_id=int(named[1]) if named else None)
    else:
        divergence = Divergence(
            sdk_message, event_id=event.event_id, event_type=event_type_name(event)
        )
    recorded = describe_event(event) if event is not None else None
    if found := _FIELD_MISMATCH.match(sentence):
        field = found["field"].lower()
        return _with_words(
            divergence,
            recorded=f"{field} {found['recorded']!r}",
            issued=f"issues {found['field2'].lower()} {found['issued']!r}",
        )
    if _NO_COMMAND.match(sentence):
        return _with_words(
            divergence,
            recorded=recorded or "a command",
            issued="issues no command at that point",
        )
    if found := _WRONG_MACHINE.match(sentence):
        return _with_words(
            divergence,
            recorded=recorded or "another command",
            issued=f"issues {_a(found['machine'].lower())} command there instead",
        )
    return divergence


def _with_words(divergence: Divergence, *, recorded: str, issued: str) -> Divergence:
    return dataclasses.replace(divergence, recorded=recorded, issued=issued)


async def _locate(replayer: Replayer, history: WorkflowHistory, sdk_message: str) -> int | None:
    """The event whose arrival makes replay fail with `sdk_message`: the shortest prefix of
    the history that fails that way ends there (found by bisection; the whole history fails).

    Prefixes shorter than the first WorkflowTaskScheduled are never replayed: a history
    without a workflow task makes the SDK wait for one forever."""
    events = list(history.events)
    first_task = _first_task_index(events)
    if first_task is None:
        return None

    async def diverges(count: int) -> bool:
        prefix = WorkflowHistory(history.workflow_id, events[:count])
        result = await replayer.replay_workflow(prefix, raise_on_replay_failure=False)
        failure = result.replay_failure
        return isinstance(failure, NondeterminismError) and _sdk_message(failure) == sdk_message

    passes, fails = first_task + 1, len(events)  # no command events yet / the whole history
    while fails - passes > 1:
        middle = (passes + fails) // 2
        if await diverges(middle):
            fails = middle
        else:
            passes = middle
    return events[fails - 1].event_id


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def event_type_name(event: HistoryEvent) -> str:
    """`EVENT_TYPE_ACTIVITY_TASK_SCHEDULED` -> `ActivityTaskScheduled`."""
    try:
        name = EventType.Name(event.event_type)
    except ValueError:
        return f"event type {event.event_type}"
    return "".join(part.capitalize() for part in name.removeprefix("EVENT_TYPE_").split("_"))


def describe_event(event: HistoryEvent) -> str:
    """What a command event records, in words."""
    kind = event.WhichOneof("attributes")
    if kind == "activity_task_scheduled_event_attributes":
        activity = event.activity_task_scheduled_event_attributes
        return f"activity {activity.activity_type.name!r} (activity id {activity.activity_id})"
    if kind == "timer_started_event_attributes":
        timer = event.timer_started_event_attributes
        seconds = timer.start_to_fire_timeout.ToTimedelta().total_seconds()
        return f"timer {timer.timer_id} ({seconds:g} s)"
    if kind == "timer_canceled_event_attributes":
        return f"cancelling timer {event.timer_canceled_event_attributes.timer_id}"
    if kind == "activity_task_cancel_requested_event_attributes":
        scheduled = event.activity_task_cancel_requested_event_attributes.scheduled_event_id
        return f"cancelling the activity scheduled at event {scheduled}"
    if kind == "marker_recorded_event_attributes":
        return f"marker {event.marker_recorded_event_attributes.marker_name!r}"
    if kind == "start_child_workflow_execution_initiated_event_attributes":
        child = event.start_child_workflow_execution_initiated_event_attributes
        return f"child workflow {child.workflow_type.name!r}"
    if kind == "signal_external_workflow_execution_initiated_event_attributes":
        signal = event.signal_external_workflow_execution_initiated_event_attributes
        return f"signal {signal.signal_name!r} to another workflow"
    if kind == "workflow_execution_completed_event_attributes":
        return "the workflow completing"
    if kind == "workflow_execution_failed_event_attributes":
        return "the workflow failing"
    if kind == "workflow_execution_canceled_event_attributes":
        return "the workflow ending cancelled"
    if kind == "workflow_execution_continued_as_new_event_attributes":
        return "the workflow continuing as new"
    return f"a {event_type_name(event)} event"
