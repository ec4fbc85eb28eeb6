"""The run's lifecycle folded into its state: a run started (or continued as new) in a
Temporal run, a step carried out, a run going on from an earlier one's transcript, a failure
that ends it, and the result it stops with.
"""

from __future__ import annotations

from agentloop.contract import AgentRunResult, PreviousRun, StopCause
from agentloop.events import CONTINUED, Event, StateUpdate
from agentloop.reporting import stop_report
from agentloop.transcript import by_reference
from agentloop.workflows.loop.next_step import Finish
from agentloop.workflows.loop.settle import end_compensation
from agentloop.workflows.loop.state import MAX_RUN_CHAIN_IDS, LoopState
from agentloop.workflows.loop.views import (
    compensation_lines,
    pending_at_stop,
    side_effects,
    unresolved_writes,
    unsent_events,
)


def record_failure(state: LoopState, reason: str, cause: StopCause) -> None:
    state.failure = reason
    state.failure_cause = cause


def record_run_started(state: LoopState, run_id: str) -> None:
    """The run goes on in Temporal run `run_id` (started, or continued as new): the first id
    and the latest stay in `run_chain`, and what is left out between is counted."""
    state.run_chain.append(run_id)
    over = len(state.run_chain) - MAX_RUN_CHAIN_IDS
    if over > 0:
        del state.run_chain[1 : 1 + over]
        state.run_chain_left_out += over


def record_step(state: LoopState) -> None:
    """One more step of the loop carried out (`Usage.steps`)."""
    state.usage.steps += 1


def continue_transcript(state: LoopState, previous: PreviousRun) -> None:
    """This run goes on from `previous`'s transcript: its unsent results first, then a note
    saying where it stopped, then this run's task. What `previous` refused and left unknown
    stays so here, and the artifacts its transcript refers to may be read."""
    state.head = previous.head
    state.rejected_actions = list(
        dict.fromkeys([*previous.rejected_actions, *state.rejected_actions])
    )
    state.inherited_unresolved = {w.action_digest: w for w in previous.unresolved_writes}
    state.artifacts = list(dict.fromkeys([*previous.artifacts, *state.artifacts]))
    state.inherited_usage = previous.usage
    note = StateUpdate(
        kind=CONTINUED,
        text=f"This run continues run {previous.workflow_id}, which stopped: "
        f"{previous.status} ({previous.stop_reason}).",
    )
    state.outbox = [*previous.unsent, note, *state.outbox]


def record_finish(state: LoopState, step: Finish) -> AgentRunResult:
    """The run stops: its result, with the stop report."""
    end_compensation(state)  # undos not run yet stay so: the run stops as it was going to
    state.phase = "finished"
    state.stop_reason = step.stop_reason
    state.stop_cause = step.cause
    check = state.run_input.completion_check
    verified = (
        step.status == "completed" and check is not None and state.verified_turn == state.turn
    )
    result = AgentRunResult(
        status=step.status,
        stop_reason=step.stop_reason,
        stop_cause=step.cause,
        verified=verified,
        verified_by=check if verified else None,
        verification=state.verification if verified else "",
        output=step.output,
        output_ref=step.output_ref or None,
        usage=state.usage,
        calls=list(state.calls.values()),
        side_effects=side_effects(state),
        pending=pending_at_stop(state),
        transcript_head=state.head,
        unsent=_unsent(state, step.stop_reason),
        paused_seconds=state.paused_seconds,
        rejected_actions=state.rejected_actions,
        unresolved_writes=unresolved_writes(state),
        artifacts=state.artifacts,
        chain_usage=state.chain_usage(),
        task_state=state.task_state,
        compensation=compensation_lines(state, step.status),
        model_switches=state.model_switches,
    )
    state.compensation_at_stop = result.compensation
    result.report = stop_report(result, state.workflow_id)
    return result


def _unsent(state: LoopState, stop_reason: str) -> list[Event]:
    """`unsent_events`, the stored texts and contents by reference: a run continuing this one
    sends them from the store."""
    return [by_reference(event) for event in unsent_events(state, stop_reason)]
