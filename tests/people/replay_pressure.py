"""Runs decided by people while others read them (issue 42): the pieces the replay-under-people
tests share. A run waits (for approvals, an answer, an operator's word); several readers query
its `status` every few milliseconds; two or three inputs of one kind arrive a set number of
milliseconds apart; then its history must replay against today's `AgentRun`, and each approved
write must have reached the example service exactly once.

Before issue 42's fix, sdk-core answered a query in a workflow task whose local activity was
still running by completing that task early; the activity's result then reached the workflow
in the next task, after an input that arrived meanwhile, while replay applies the result first
(TMPRL1100). A divergence here is that bug or one like it."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from agentloop.cli.replay import ReplayReport, replay_fetched
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    Principal,
    ResolveRequest,
    RunStatusView,
    UserMessage,
)
from agentloop.demo.services import ExampleService
from agentloop.policies.bounds import MAX_INLINE_TEXT_CHARS
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.testing.turns import call as scripted_call
from tests.live import agent_input, scripted
from tests.support import start_run, wait_for_status, write_key

TICKET = "T-1001"
RECIPIENT = "dana@example.com"
PRINCIPAL = Principal(subject="p-alice", scopes=["tickets:read", "tickets:write"])
LONG_ANSWER = "Yes, go ahead. " * (MAX_INLINE_TEXT_CHARS // 15 + 10)
WEATHER = {"city": "Shanghai", "date": "2026-12-01"}


@dataclass(frozen=True)
class Phase:
    """Where a run waits (or reads) when its inputs arrive, and which kinds of input it takes
    there."""

    name: str
    kinds: tuple[str, ...]
    writes: bool
    """Its inputs decide writes (one per input, the last a cancel for the `cancel` kind);
    otherwise the run asks a question the inputs answer."""


APPROVAL = Phase("approval", ("decide_approval", "approve", "cancel"), writes=True)
QUESTION = Phase("question", ("message",), writes=False)
LONG_TEXTS = Phase("long_texts", ("message",), writes=False)
READS = Phase("reads", ("message",), writes=False)
UNKNOWN_WRITE = Phase("unknown_write", ("resolve",), writes=True)
PHASES = (APPROVAL, QUESTION, LONG_TEXTS, READS, UNKNOWN_WRITE)


@dataclass(frozen=True)
class Case:
    phase: Phase
    kind: str
    inputs: int
    spacing_ms: int

    @property
    def label(self) -> str:
        return f"{self.phase.name}/{self.kind}x{self.inputs}@{self.spacing_ms}ms"

    @property
    def write_count(self) -> int:
        """The writes the run proposes: one per decision (the unknown write: one, resolved
        by every input)."""
        if self.phase is UNKNOWN_WRITE:
            return 1
        return self.inputs if self.phase.writes else 0


def write_call(n: int) -> ScriptedToolCall:
    body = f"Reply {n}: your refund is on its way."
    arguments = {"ticket_id": TICKET, "recipient": RECIPIENT, "body": body}
    return ScriptedToolCall(id=f"w{n}", name="send_reply", arguments=arguments)


def script(case: Case, name: str) -> Script:
    if case.phase.writes:
        calls = [write_call(n) for n in range(1, case.write_count + 1)]
        return scripted(name, ScriptTurn(tool_calls=calls), "Sent.")
    ask = scripted_call("ask_user", "q1", question="Send it?")
    turns = [ScriptTurn(tool_calls=[ask])]
    if case.phase is READS:
        reads = [scripted_call("get_weather", f"r{n}", **WEATHER) for n in (1, 2)]
        turns.append(ScriptTurn(tool_calls=reads))
    turns.append(ScriptTurn(text="Done."))
    return Script(name=name, turns=turns)


def run_input(case: Case, name: str) -> AgentRunInput:
    tools = ["send_reply"] if case.phase.writes else []
    if case.phase is READS:
        tools = ["get_weather"]
    return agent_input(name, "openai-chat", f"Answer ticket {TICKET}.", tools, principal=PRINCIPAL)


def waiting(case: Case) -> Callable[[RunStatusView], bool]:
    """When the run is ready for the case's inputs."""
    if case.phase is UNKNOWN_WRITE:
        return lambda view: bool(view.unresolved)
    if case.phase.writes:
        return lambda view: len(view.pending_approvals) == case.write_count
    return lambda view: view.phase == "awaiting_input"


class Reads:
    """What the readers of one run saw go wrong: a query its worker could not answer because
    the run's history no longer replays there (the run is wedged until the code changes)."""

    def __init__(self) -> None:
        self.failure: str | None = None
        self.failed = asyncio.Event()

    def saw(self, exc: WorkflowQueryFailedError) -> None:
        self.failure = self.failure or str(exc)
        self.failed.set()


@contextlib.asynccontextmanager
async def reading(handle: WorkflowHandle[Any, Any], count: int = 4) -> AsyncIterator[Reads]:
    """`count` readers querying the run's `status` every 5-20 ms until the block ends. A
    reader goes on quietly when the run is out of the worker's reach (it completed)."""
    stop = asyncio.Event()
    reads = Reads()

    async def reader(seed: int) -> None:
        pace = random.Random(seed)
        while not stop.is_set():
            try:
                await handle.query("status", result_type=RunStatusView)
            except WorkflowQueryFailedError as exc:
                reads.saw(exc)
            except RPCError:
                pass
            await asyncio.sleep(pace.uniform(0.005, 0.020))  # the readers' pace, not a wait

    tasks = [asyncio.create_task(reader(n)) for n in range(count)]
    try:
        yield reads
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def send_inputs(
    handle: WorkflowHandle[Any, AgentRunResult], case: Case, view: RunStatusView
) -> None:
    """The case's inputs to the run waiting as `view` shows, `spacing_ms` apart (0: all at
    once). An input that finds the run closed (it finished on an earlier one) is not an
    error."""
    sends = [one_input(handle, case, view, n) for n in range(case.inputs)]
    if case.spacing_ms == 0:
        await asyncio.gather(*(quietly(send()) for send in sends))
        return
    pending = []
    for n, send in enumerate(sends):
        if n:
            await asyncio.sleep(case.spacing_ms / 1000)  # the inputs' spacing is the stimulus
        pending.append(asyncio.create_task(quietly(send())))
    await asyncio.gather(*pending)


async def quietly(sent: Any) -> None:
    with contextlib.suppress(RPCError, WorkflowUpdateFailedError):
        await sent


def one_input(
    handle: WorkflowHandle[Any, AgentRunResult], case: Case, view: RunStatusView, n: int
) -> Callable[[], Any]:
    if case.kind == "message":
        text = LONG_ANSWER if case.phase is LONG_TEXTS else f"Answer {n + 1}: yes."
        return lambda: handle.signal("message", UserMessage(text=text, sender="dana"))
    if case.kind == "resolve":
        [unknown] = view.unresolved
        word = ResolveRequest(call_id=unknown.call_id, outcome="applied", operator="ops")
        return lambda: handle.signal("resolve", word)
    if case.kind == "cancel" and n == case.inputs - 1:
        return lambda: handle.signal("cancel", CancelRequest(reason="not needed after all"))
    pending = sorted(view.pending_approvals, key=lambda p: p.call_id)[n]
    decision = ApprovalDecision(
        call_id=pending.call_id, args_digest=pending.args_digest, approved=True, approver="lead"
    )
    if case.kind == "decide_approval":
        return lambda: handle.execute_update(
            "decide_approval", decision, result_type=ApprovalVerdict
        )
    return lambda: handle.signal("approve", decision)


async def approve_all(handle: WorkflowHandle[Any, AgentRunResult]) -> None:
    """The unknown-write phase: its write is approved first, as any write."""
    view = await wait_for_status(handle, lambda v: bool(v.pending_approvals), "the approval wait")
    for pending in view.pending_approvals:
        decision = ApprovalDecision(
            call_id=pending.call_id, args_digest=pending.args_digest, approved=True, approver="lead"
        )
        await handle.signal("approve", decision)


@dataclass(frozen=True)
class Outcome:
    case: Case
    workflow_id: str
    result: AgentRunResult | None
    """None: the run wedged (`wedged` says how) before it finished."""
    writes: dict[str, int]
    """How many replies the example service holds under each of the run's write keys."""
    wedged: str | None = None

    def write_problems(self) -> list[str]:
        """Each write key whose count at the service is not what the run's result says: once
        for a write it reports done, never for one it does not report, at most once for one
        whose outcome it reports unknown. An approval case not cancelled completes with every
        write done."""
        if self.result is None:
            return []  # a wedged run's writes are not all done: its replay says why
        told = {effect.idempotency_key: effect.status for effect in self.result.side_effects}
        problems = []
        for key, count in self.writes.items():
            status = told.get(key)
            allowed = {0} if status is None else {0, 1} if status == "unknown" else {1}
            if self.case.kind in ("approve", "decide_approval", "resolve"):
                allowed = {1}
            if count not in allowed:
                problems.append(f"{key}: {count} at the service, the run says {status}")
        return problems


def replies_by_key(service: ExampleService, keys: list[str]) -> dict[str, int]:
    """Replies the example service sent under each idempotency key (its system of record)."""
    with contextlib.closing(sqlite3.connect(f"file:{service.db_path}?mode=ro", uri=True)) as db:
        rows = db.execute(
            f"SELECT operation_id, COUNT(*) FROM replies WHERE operation_id IN "
            f"({', '.join('?' for _ in keys)}) GROUP BY operation_id",
            keys,
        ).fetchall()
    found = dict.fromkeys(keys, 0)
    found.update({key: int(n) for key, n in rows})
    return found


async def start_case(
    client: Client, settings: Settings, provider: ScriptedProvider, case: Case, workflow_id: str
) -> WorkflowHandle[Any, AgentRunResult]:
    provider.register(script(case, workflow_id))
    handle = await start_run(client, settings, workflow_id, run_input(case, workflow_id))
    if case.phase is UNKNOWN_WRITE:
        await approve_all(handle)
    return handle


async def decide(handle: WorkflowHandle[Any, AgentRunResult], case: Case, reads: Reads) -> None:
    """Once the run waits for them, the case's inputs (none when its worker cannot answer
    queries any more: `reads` says why)."""
    try:
        view = await wait_for_status(handle, waiting(case), f"{case.label} to wait")
        await send_inputs(handle, case, view)
    except WorkflowQueryFailedError as exc:
        reads.saw(exc)


async def finished(
    handle: WorkflowHandle[Any, AgentRunResult], reads: Reads, seconds: float = CEILING_SECONDS
) -> AgentRunResult | None:
    """The run's result; None as soon as its readers see it wedged (bounded either way)."""
    result = asyncio.ensure_future(handle.result())
    wedged = asyncio.ensure_future(reads.failed.wait())
    done, _ = await asyncio.wait({result, wedged}, timeout=seconds, return_when="FIRST_COMPLETED")
    for waiter in (result, wedged):
        waiter.cancel()
    if result in done:
        return result.result()
    if wedged in done:
        return None
    raise AssertionError(f"timed out waiting for {handle.id} to finish")


def outcome(
    service: ExampleService,
    case: Case,
    handle: WorkflowHandle[Any, AgentRunResult],
    result: AgentRunResult | None,
    wedged: str | None = None,
) -> Outcome:
    keys = [write_key(handle, f"w{n}") for n in range(1, case.write_count + 1)]
    return Outcome(case, handle.id, result, replies_by_key(service, keys), wedged)


async def play(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    service: ExampleService,
    case: Case,
    workflow_id: str,
) -> Outcome:
    """One run of `case`, start to end, read all along once it waits."""
    handle = await start_case(client, settings, provider, case, workflow_id)
    async with reading(handle) as reads:
        await decide(handle, case, reads)
        result = await finished(handle, reads)
    return outcome(service, case, handle, result, reads.failure)


async def replay_runs(client: Client, workflow_ids: list[str]) -> list[ReplayReport]:
    """Each run's history, fetched (a few at a time) and replayed against today's code."""
    gate = asyncio.Semaphore(8)

    async def fetch(workflow_id: str) -> Any:
        async with gate:
            return await client.get_workflow_handle(workflow_id).fetch_history()

    histories = await asyncio.gather(*(fetch(w) for w in workflow_ids))
    return await replay_fetched(histories)
