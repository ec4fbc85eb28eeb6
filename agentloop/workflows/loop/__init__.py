"""The loop as pure modules, with no Temporal in them: the state (`state`), the steps `decide`
can answer (`next_step`), the state table (`decide`), what stops a run (`stops`), a model output
made a batch (`plan`), the folds that record what each step brought back, named by the step
they serve (`model_step`, `tool_step`, `lifecycle`, with `settle`, `humans` and `delegation`),
the results the runner writes itself (`results`), long texts by reference (`texts`), what a
step exchanges with Temporal (`exchange`) and the read-only views (`views`). `decide` reads the
state and imports no fold. This face hands on the names the workflow shell uses."""

from agentloop.workflows.loop.decide import decide
from agentloop.workflows.loop.exchange import (
    ChildOutcome,
    ModelTurn,
    ToolFailure,
    ToolOutcome,
    ToolsToRun,
)
from agentloop.workflows.loop.humans import (
    awaiting_humans,
    decisions_to_check,
    receive_decision,
    record_cancel_request,
    record_checked_decision,
    record_checked_resolution,
    record_message,
    record_pause,
    record_pause_started,
    record_refused_input,
    record_resolution,
)
from agentloop.workflows.loop.lifecycle import (
    continue_transcript,
    record_failure,
    record_finish,
    record_run_started,
    record_step,
)
from agentloop.workflows.loop.model_step import (
    record_model_failure,
    record_model_output,
    record_over_budget,
    record_verdict,
    start_model_call,
)
from agentloop.workflows.loop.next_step import (
    AwaitApproval,
    AwaitHumans,
    AwaitInput,
    AwaitReconciliation,
    CallModel,
    CheckApprovals,
    CheckPreconditions,
    Finish,
    LookupOutcome,
    NextStep,
    RunTools,
    Verify,
    Work,
)
from agentloop.workflows.loop.plan import action_digest
from agentloop.workflows.loop.state import (
    MAX_OUTPUT_CORRECTIONS,
    MAX_REFUSED_CALLS,
    MAX_RUN_CHAIN_IDS,
    DecisionToCheck,
    LoopState,
)
from agentloop.workflows.loop.texts import record_texts_stored, state_to_carry, texts_to_store
from agentloop.workflows.loop.tool_step import (
    record_outcome,
    record_preconditions,
    record_tool_results,
    start_tools,
)
from agentloop.workflows.loop.views import (
    details,
    pending_approvals,
    pending_at_stop,
    question,
    side_effects,
    status_view,
    unresolved,
    wait_summary,
    waiting_memo,
)

__all__ = [
    "MAX_OUTPUT_CORRECTIONS",
    "MAX_REFUSED_CALLS",
    "MAX_RUN_CHAIN_IDS",
    "AwaitApproval",
    "AwaitHumans",
    "AwaitInput",
    "AwaitReconciliation",
    "CallModel",
    "CheckApprovals",
    "CheckPreconditions",
    "ChildOutcome",
    "DecisionToCheck",
    "Finish",
    "LookupOutcome",
    "LoopState",
    "ModelTurn",
    "NextStep",
    "RunTools",
    "ToolFailure",
    "ToolOutcome",
    "ToolsToRun",
    "Verify",
    "Work",
    "action_digest",
    "awaiting_humans",
    "continue_transcript",
    "decide",
    "decisions_to_check",
    "details",
    "pending_approvals",
    "pending_at_stop",
    "question",
    "receive_decision",
    "record_cancel_request",
    "record_checked_decision",
    "record_checked_resolution",
    "record_failure",
    "record_finish",
    "record_message",
    "record_model_failure",
    "record_model_output",
    "record_outcome",
    "record_over_budget",
    "record_pause",
    "record_pause_started",
    "record_preconditions",
    "record_refused_input",
    "record_resolution",
    "record_run_started",
    "record_step",
    "record_texts_stored",
    "record_tool_results",
    "record_verdict",
    "side_effects",
    "start_model_call",
    "start_tools",
    "state_to_carry",
    "status_view",
    "texts_to_store",
    "unresolved",
    "wait_summary",
    "waiting_memo",
]
