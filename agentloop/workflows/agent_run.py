"""`AgentRun`: the Temporal shell around the pure loop in `loop/`.

Each pass asks `decide` for the next step and makes the Temporal calls it names (`steps.py`,
`tool_calls.py`). Everything here is deterministic: no I/O, no clock but `workflow.now()`,
activities referred to by name (`tests/test_workflow_determinism.py` checks it). This module
holds only the class: in Temporal's sandbox (`AGENTLOOP_WORKFLOW_SANDBOX=on`) it is imported
afresh for every run.
"""

from __future__ import annotations

from typing import Any, assert_never

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import jsonschema  # noqa: F401  (validation runs in the sandbox; import it once, outside)

    # By their full names: `from agentloop.workflows import loop` would load a fresh copy per
    # run (the sandbox re-imports this module's own package), ~0.5 MiB each in the cache.
    import agentloop.workflows.loop as loop
    import agentloop.workflows.startup as startup
    import agentloop.workflows.steps as steps
    import agentloop.workflows.tool_calls as tool_calls
    import agentloop.workflows.visibility as visibility
    from agentloop.contract import (
        WORKFLOW_NAME,
        AgentRunResult,
        ApprovalDecision,
        ApprovalVerdict,
        CancelRequest,
        ResolveRequest,
        RunStatusView,
        UserMessage,
    )
    from agentloop.workflows.deadline import RunDeadline
    from agentloop.workflows.loop import (
        AwaitApproval,
        AwaitInput,
        AwaitReconciliation,
        CallModel,
        CheckPreconditions,
        Finish,
        LookupOutcome,
        LoopState,
        RunTools,
        Verify,
    )


@workflow.defn(name=WORKFLOW_NAME)
class AgentRun:
    def __init__(self) -> None:
        self._state: LoopState | None = None
        self._cancel_reason: str | None = None
        self._early_decisions: list[ApprovalDecision] = []
        self._early_messages: list[UserMessage] = []

    @workflow.run
    async def run(self, raw_input: Any, carried: LoopState | None = None) -> AgentRunResult:
        """`carried` is the run state handed over by `continue_as_new` (None on a fresh start)."""
        run_input = startup.parse_input(raw_input)
        state = carried if carried is not None else await startup.start(run_input)
        state.run_chain.append(workflow.info().run_id)
        self._state = state
        deadline = RunDeadline(state)
        state.cancel_reason = state.cancel_reason or self._cancel_reason
        for decision in self._early_decisions:
            loop.record_decision(state, decision, workflow.now())
        for message in self._early_messages:
            loop.record_message(state, message)
        while True:
            if startup.time_to_continue_as_new(state):
                # A safe point: nothing is in flight, and everything is in `state`.
                workflow.continue_as_new(args=[raw_input, state])
            step = loop.decide(state, workflow.now())
            visibility.show(state)
            match step:
                case CallModel():
                    await steps.call_model(state, step, deadline)
                case CheckPreconditions():
                    await tool_calls.check_preconditions(state, step, deadline)
                case RunTools():
                    await tool_calls.run_tools(state, step, deadline)
                case AwaitApproval():
                    await steps.await_humans(state, step, "awaiting_approval")
                case Verify():
                    await steps.verify(state, step)
                case AwaitInput():
                    await steps.await_humans(state, step, "awaiting_input")
                case LookupOutcome():
                    await steps.lookup_outcome(state, step)
                case AwaitReconciliation():
                    await steps.await_humans(state, step, "awaiting_reconciliation")
                case Finish():
                    return steps.finish(state, step)
                case _:
                    assert_never(step)

    @workflow.signal
    def cancel(self, request: CancelRequest) -> None:
        self._cancel_reason = request.reason
        if self._state is not None and self._state.cancel_reason is None:
            self._state.cancel_reason = request.reason

    @workflow.signal
    def approve(self, decision: ApprovalDecision) -> None:
        """A human's decision on one pending call, bound to the args digest they were shown."""
        self._decide(decision)

    @workflow.update
    def decide_approval(self, decision: ApprovalDecision) -> ApprovalVerdict:
        """The `approve` signal's twin for callers that want to know at once if it counted."""
        return self._decide(decision)

    def _decide(self, decision: ApprovalDecision) -> ApprovalVerdict:
        if self._state is None:
            self._early_decisions.append(decision)
            return ApprovalVerdict(accepted=False, reason="the run has not started yet")
        verdict = loop.record_decision(self._state, decision, workflow.now())
        visibility.audit(
            "approval.decided",
            call_id=decision.call_id,
            args_digest=decision.args_digest,
            approved=decision.approved,
            approver=decision.approver,
            accepted=verdict.accepted,
            refused_because=verdict.reason,
        )
        return verdict

    @workflow.signal
    def message(self, message: UserMessage) -> None:
        """The user's answer to the run's question, or a later message from them."""
        if self._state is None:
            self._early_messages.append(message)
        else:
            loop.record_message(self._state, message)

    @workflow.signal
    def resolve(self, request: ResolveRequest) -> None:
        """An operator's word on a write whose outcome stayed unknown."""
        if self._state is not None:
            loop.record_resolution(self._state, request, workflow.now())

    @workflow.query
    def status(self) -> RunStatusView:
        return loop.status_view(self._state, workflow.now())
