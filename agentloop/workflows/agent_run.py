"""`AgentRun`: the Temporal shell around the pure loop in `loop/`.

Each pass asks `decide` for the next step and makes the Temporal calls it names (`steps.py`,
`tool_calls.py`). Everything here is deterministic: no I/O, no clock but `workflow.now()`,
activities referred to by name (`tests/loop/test_workflow_determinism.py` checks it). This module
holds only the class: in Temporal's sandbox (`AGENTLOOP_WORKFLOW_SANDBOX=on`) it is imported
afresh for every run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, assert_never

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import jsonschema  # noqa: F401  (validation runs in the sandbox; import it once, outside)

    # By their full names: `from agentloop.workflows import loop` would load a fresh copy per
    # run (the sandbox re-imports this module's own package), ~0.5 MiB each in the cache.
    import agentloop.workflows.approvals as approvals
    import agentloop.workflows.inbound as inbound
    import agentloop.workflows.loop as loop
    import agentloop.workflows.loop.watching as watching
    import agentloop.workflows.notices as notices
    import agentloop.workflows.startup as startup
    import agentloop.workflows.steps as steps
    import agentloop.workflows.tool_calls as tool_calls
    import agentloop.workflows.visibility as visibility
    from agentloop.contract import (
        APPROVE_SIGNAL,
        DECIDE_UPDATE,
        DELIVER_UPDATE,
        STATUS_QUERY,
        WORKFLOW_NAME,
        AgentRunResult,
        ApprovalDecision,
        ApprovalVerdict,
        CancelRequest,
        Delivery,
        ResolveRequest,
        RunStatusView,
        UserMessage,
    )
    from agentloop.run_events import RunEvent
    from agentloop.tool_spec import shared_specs
    from agentloop.workflows.deadline import RunDeadline
    from agentloop.workflows.inbound import Inbound, InboundRefused
    from agentloop.workflows.loop import (
        AwaitApproval,
        AwaitInput,
        AwaitReconciliation,
        CallModel,
        CheckApprovals,
        CheckPreconditions,
        Compensate,
        DecisionToCheck,
        Finish,
        LookupOutcome,
        LoopState,
        RunTools,
        TimeOutApprovals,
        Verify,
        Work,
    )
    from agentloop.workflows.stream import PUBLISH_SIGNAL, RunStream


@workflow.defn(name=WORKFLOW_NAME)
class AgentRun:
    @workflow.init
    def __init__(
        self, raw_input: Any = None, raw_carried: Any = None, raw_stream: Any = None
    ) -> None:
        self._stream = RunStream(raw_stream)
        """What watchers read (`agentloop.watch`); a run continued as new goes on with the
        stream its predecessor carried, offsets contiguous."""
        self._told = watching.Told()
        self._state: LoopState | None = None
        self._early: list[tuple[str, Inbound | InboundRefused]] = []
        """What arrived before the run state existed, in order (applied once it does)."""
        self._checked: dict[int, ApprovalVerdict] = {}
        """The worker's verdicts on held decisions, by ticket, for the updates waiting on them."""
        self._awaited: set[int] = set()
        """Tickets an update waits on: only their verdicts are kept (a signal's decision has
        nobody to answer, so keeping its verdict would only grow the run's memory)."""
        self._inflow = inbound.Inflow()
        """What this run's signals brought into its history (a flood has it continue as new)."""
        self._closing = False
        """Set when the run is about to end or continue as new: no held decision will be
        checked in this run any more."""

    @workflow.run
    async def run(
        self, raw_input: Any = None, raw_carried: Any = None, raw_stream: Any = None
    ) -> AgentRunResult:
        """`raw_carried` is the run state handed over by `continue_as_new` (None on a fresh
        start), `raw_stream` its stream (`__init__` took it). Both are untyped here, checked
        by `startup.parse_carried` and `parse_input`; the input may be missing."""
        try:
            carried = startup.parse_carried(raw_carried)
            run_input = startup.parse_input(raw_input, carried)
            state = carried if carried is not None else await startup.start(run_input)
        except ApplicationError as refused:
            visibility.show_failed_start(refused.message, startup.task_of(raw_input))
            raise
        state.tools = shared_specs(state.tools.values())
        state.undo_tools = shared_specs(state.undo_tools.values())
        loop.record_run_started(state, workflow.info().run_id)
        self._state = state
        self._told = watching.Told.of(state)
        deadline = RunDeadline(state)
        for name, early in self._early:
            self._apply(name, early)
        self._early = []
        while True:
            due = startup.time_to_continue_as_new(state, self._inflow)
            if due and await self._inflow.defer():
                continue  # looked at again from a light workflow task
            if due and await steps.store_long_texts(state):
                # A safe point: nothing is in flight, and everything is in `state` (its long
                # texts in the store, carried by reference).
                if watching.streaming(state):
                    self._publish(*watching.continued(state, self._told, workflow.now()))
                await self._close()
                carried = loop.state_to_carry(state)
                stream = self._stream.carried()
                # The input rides once, inside the state (a large one twice would make the
                # next run's start payload too large).
                workflow.continue_as_new(args=[None, carried, stream])
            step = loop.decide(state, workflow.now())
            if watching.streaming(state):
                self._publish(*watching.changes(state, step, self._told, workflow.now()))
            visibility.show(state)
            if isinstance(step, Finish):
                await self._close()
                return steps.finish(state, step)
            try:
                await self._carry_out(state, step, deadline)
            except asyncio.CancelledError:
                # Temporal's cancel request: the run stops like after the `cancel` signal
                # (the step it interrupted is told by the state; a write was shielded).
                loop.record_cancel_request(state)

    async def _carry_out(self, state: LoopState, step: Work, deadline: RunDeadline) -> None:
        loop.record_step(state)
        match step:
            case CallModel():
                await steps.call_model(state, step, deadline)
            case CheckPreconditions():
                await tool_calls.check_preconditions(state, step, deadline)
            case CheckApprovals():
                verdicts = await approvals.check_approvals(state, step)
                self._checked.update(
                    (ticket, verdict)
                    for ticket, verdict in verdicts.items()
                    if ticket in self._awaited
                )
            case RunTools():
                await tool_calls.run_tools(state, step, deadline)
            case AwaitApproval():
                await steps.await_humans(state, step, "awaiting_approval", self._inflow)
            case TimeOutApprovals():
                notices.time_out_approvals(state, step)
            case Verify():
                await steps.verify(state, step)
            case AwaitInput():
                await steps.await_humans(state, step, "awaiting_input", self._inflow)
            case LookupOutcome():
                await steps.lookup_outcome(state, step)
            case AwaitReconciliation():
                await steps.await_humans(state, step, "awaiting_reconciliation", self._inflow)
            case Compensate():
                loop.start_compensation(state, step, workflow.now())
            case _:
                assert_never(step)

    @workflow.signal(dynamic=True)
    def signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal (`approve`, `resolve`, `message`, `cancel`), taken raw: a payload
        that is missing, malformed or unknown is refused and recorded with its reason
        (`inbound`), never dropped and never a failed workflow task. The stream's publish
        signal goes to the stream (`RunStream.receive`). Each is counted first, by its size
        (`Inflow`): its payload is in the run's history whatever becomes of it."""
        self._inflow.take(args)
        if name == PUBLISH_SIGNAL:
            self._stream.receive(args)
            return
        try:
            request: Inbound | InboundRefused = inbound.parse(name, args)
        except InboundRefused as refused:
            request = refused
        if self._state is None:
            self._early.append((name, request))
            return
        self._apply(name, request)

    def _apply(self, name: str, request: Inbound | InboundRefused) -> None:
        state = self._state
        assert state is not None
        match request:
            case InboundRefused():
                loop.record_refused_input(
                    state, name, request.shown, request.reason, workflow.now()
                )
            case ApprovalDecision():
                self._decide(request)
            case CancelRequest() | UserMessage() | ResolveRequest():
                self._take(request)
            case Delivery():  # an update's shape, never a signal's (`SIGNAL_SHAPES`)
                raise AssertionError("a delivery comes by the deliver update")
            case _:
                assert_never(request)

    def _take(
        self, word: CancelRequest | UserMessage | ResolveRequest
    ) -> ApprovalVerdict | DecisionToCheck:
        """An answer, a cancel or an operator's word: its verdict, or the word held for the
        worker's check."""
        state = self._state
        assert state is not None
        if isinstance(word, ResolveRequest):
            return loop.receive_resolution(state, word, workflow.now())
        return loop.receive_word(state, word, workflow.now())

    @workflow.update(name=DECIDE_UPDATE)
    async def decide_approval(self, raw: RawValue = inbound.NOTHING) -> ApprovalVerdict:
        """The `approve` signal's twin for callers that want to know if it counted: answers
        once the decision is applied or refused (after the worker's check, when it has one).
        One that came before the run had its state (with the start, or into a run continued
        as new) waits for it: it was answered "not started yet" and then applied all the
        same."""
        decision = self._decision(raw)
        if self._state is None:
            await workflow.wait_condition(lambda: self._state is not None)
        return await self._verdict(self._decide(decision))

    @workflow.update(name=DELIVER_UPDATE)
    async def deliver(self, raw: RawValue = inbound.NOTHING) -> ApprovalVerdict:
        """The `message`, `resolve` and `cancel` signals' twin for callers that want to know
        if what they sent counted (the inbox): answers once it is applied or refused (after
        the worker's check, when it has one). One that came before the run had its state
        waits for it."""
        word = self._delivery(raw).word
        if self._state is None:
            await workflow.wait_condition(lambda: self._state is not None)
        return await self._verdict(self._take(word))

    @deliver.validator
    def _check_delivery(self, raw: RawValue = inbound.NOTHING) -> None:
        """A delivery that is not one is rejected here, naming the field (nothing recorded)."""
        self._delivery(raw)

    def _delivery(self, raw: RawValue) -> Delivery:
        parsed = self._parsed(DELIVER_UPDATE, raw)
        assert isinstance(parsed, Delivery)
        return parsed

    async def _verdict(self, held: ApprovalVerdict | DecisionToCheck) -> ApprovalVerdict:
        """`held`'s verdict, once the worker checked it (or the run stopped before)."""
        if isinstance(held, ApprovalVerdict):
            return held
        self._awaited.add(held.ticket)
        try:
            await workflow.wait_condition(lambda: held.ticket in self._checked or self._closing)
        finally:
            self._awaited.discard(held.ticket)
        return self._checked.pop(held.ticket, None) or ApprovalVerdict(
            accepted=False, reason="the run stopped before the worker checked it"
        )

    @decide_approval.validator
    def _check_decision(self, raw: RawValue = inbound.NOTHING) -> None:
        """A decision that is not one is rejected here, naming the field (nothing recorded)."""
        self._decision(raw)

    def _decision(self, raw: RawValue) -> ApprovalDecision:
        parsed = self._parsed(DECIDE_UPDATE, raw)
        assert isinstance(parsed, ApprovalDecision)
        return parsed

    @staticmethod
    def _parsed(name: str, raw: RawValue) -> inbound.Inbound:
        try:
            return inbound.parse(name, [raw], inbound.UPDATE_SHAPES)
        except InboundRefused as refused:
            raise ValueError(refused.reason) from None

    def _decide(self, decision: ApprovalDecision) -> ApprovalVerdict | DecisionToCheck:
        """A human's decision on one pending call, bound to the args digest they were shown:
        its verdict, or the decision held for the worker's check."""
        if self._state is None:
            self._early.append((APPROVE_SIGNAL, decision))
            return ApprovalVerdict(accepted=False, reason="the run has not started yet")
        outcome = loop.receive_decision(self._state, decision, workflow.now())
        if isinstance(outcome, ApprovalVerdict):
            approvals.audit_decision(decision, outcome)
        return outcome

    def _publish(self, *events: RunEvent) -> None:
        for event in events:
            self._stream.publish(event)

    async def _close(self) -> None:
        """Before the run ends or continues as new: updates still waiting on a check are
        answered (and finish) first, so none is left unanswered; the stream's subscribers
        are let go with what it holds (the last item, `done` or `continued`, included)."""
        self._closing = True
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RunStatusView:
        return loop.status_view(self._state, workflow.now())
