"""What a run shows while it runs: the Temporal UI's current details, the `AgentPhase` and
`AgentStatus` search attributes, what it waits for in its memo (`WAITING_MEMO`), and the
audit records of the workflow's decisions.

Workflow code (deterministic). Details are metadata, not commands; a search attribute or memo
upsert is a command, so when one is issued is part of what replays.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow

import agentloop.workflows.loop as loop
from agentloop import stream_seals
from agentloop.contract import RunStatus
from agentloop.search import AGENT_PHASE, AGENT_STATUS, AGENT_TASK_FAMILY, initial
from agentloop.waiting import WAITING_MEMO, WAITING_PHASES, memo_key, sealed_memo
from agentloop.workflows.loop import LoopState


def show(state: LoopState) -> None:
    """At the top of each step: the UI's current details (the phase attribute changes only
    when the run waits on Temporal, `waiting`)."""
    workflow.set_current_details(loop.details(state, workflow.now()))


def waiting(state: LoopState) -> None:
    """The run is about to wait on Temporal in `state.phase`: that is the phase a list query
    finds it in meanwhile."""
    show_phase(state)


def show_phase(state: LoopState, until: datetime | None = None) -> None:
    """The phase, in the details and the attribute; `until`: the deadline of a wait for
    people, whom the details then name with how to answer them."""
    workflow.set_current_details(loop.details(state, workflow.now(), until))
    _index_phase(state)


def indexed() -> bool:
    """The run carries agentloop's search attributes: it was started with them (the
    namespace has them then), or it upserted them (`index`)."""
    return workflow.info().typed_search_attributes.get(AGENT_PHASE) is not None


def index(state: LoopState, *, family: bool) -> None:
    """Index a run started without the attributes, once, as it starts (before its first
    model call); only when the worker found them registered on the namespace (an upsert of
    an unregistered attribute fails the workflow task). Any it was started with stay as they
    are; from here on the run keeps its phase and status current like any indexed run.
    `family`: the namespace has `AgentTaskFamily` too (else a run's family is not indexed)."""
    carried = workflow.info().typed_search_attributes
    updates = [
        pair.key.value_set(state.phase if pair.key == AGENT_PHASE else pair.value)
        for pair in initial(state.run_input)
        if carried.get(pair.key) is None and (family or pair.key != AGENT_TASK_FAMILY)
    ]
    if updates:
        workflow.upsert_search_attributes(updates)


def _index_phase(state: LoopState) -> None:
    indexed = workflow.info().typed_search_attributes.get(AGENT_PHASE)
    # Only indexed runs upsert: the namespace has the attributes then.
    if indexed is not None and indexed != state.phase:
        workflow.upsert_search_attributes([AGENT_PHASE.value_set(state.phase)])
        if state.phase not in WAITING_PHASES:
            _forget_waiting()


def show_waiting(state: LoopState, until: datetime) -> None:
    """What the run waits for people for now, in its memo, for the inbox to list it from without
    asking it: written only when it changed, and only by an indexed run (the inbox finds waiting
    runs by their phase attribute, in the same visibility record). Sealed with this worker's
    key (`waiting.vouched`): a run a starter made up lists nothing; a process without the key
    (a replay) writes it unsealed, a difference in a command's content, which no replay checks."""
    if not indexed():
        return
    info = workflow.info()
    memo = sealed_memo(
        memo_key(stream_seals.worker_key()),
        info.workflow_id,
        loop.waiting_memo(state, info.run_id, until).model_dump(mode="json"),
    )
    # Compared as payloads: a memo under this key that a starter set need not even decode.
    if workflow.info().raw_memo.get(WAITING_MEMO) != workflow.payload_converter().to_payload(memo):
        workflow.upsert_memo({WAITING_MEMO: memo})


def _forget_waiting() -> None:
    """The wait is over: the memo no longer says it waits (for the Temporal UI's reader; the
    inbox already goes by the phase attribute)."""
    if WAITING_MEMO in workflow.info().raw_memo:
        workflow.upsert_memo({WAITING_MEMO: None})


def show_finished(state: LoopState, status: RunStatus) -> None:
    """The run has ended: its details say how, with its task (no longer where it was), and
    an indexed run's phase and status attributes say so too."""
    _show_end(status, state.stop_reason or "", state.run_input.task)
    _forget_waiting()


def show_failed_start(reason: str, task: str = "") -> None:
    """A run that fails before its loop starts (bad input, a tool or check the worker lacks):
    it was started `running`, and must not stay so in a list."""
    _show_end("failed", reason, task)


def _show_end(status: RunStatus, reason: str, task: str) -> None:
    shown = task if len(task) <= 200 else task[:197] + "..."
    workflow.set_current_details(f"**{status}** · {reason}" + (f"\ntask: {shown}" if shown else ""))
    if workflow.info().typed_search_attributes.get(AGENT_STATUS) is not None:
        workflow.upsert_search_attributes(
            [AGENT_PHASE.value_set("finished"), AGENT_STATUS.value_set(status)]
        )


def audit(event: str, **fields: Any) -> None:
    """One audit record through `workflow.logger` (silent during replay; ids, digests and
    statuses only, never model text or tool output)."""
    workflow.logger.info(event, extra={"audit": {"event": event, **fields}})
