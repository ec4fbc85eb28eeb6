"""The loop as pure modules, with no Temporal in them: the state (`state`), the steps
`decide` can answer (`next_step`), the state table (`decide`), a model output made a batch
(`plan`), folding results back (`record`, `settle`, `humans`, `delegation`), the results the
runner writes itself (`results`), what a step exchanges with Temporal (`exchange`) and the
read-only views (`views`). This face hands on the names the workflow shell uses."""

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
    record_decision,
    record_message,
    record_pause,
    record_pause_started,
    record_resolution,
)
from agentloop.workflows.loop.next_step import (
    AwaitApproval,
    AwaitHumans,
    AwaitInput,
    AwaitReconciliation,
    CallModel,
    CheckPreconditions,
    Finish,
    LookupOutcome,
    NextStep,
    RunTools,
    Verify,
)
from agentloop.workflows.loop.plan import action_digest
from agentloop.workflows.loop.record import (
    continue_transcript,
    record_failure,
    record_finish,
    record_model_output,
    record_outcome,
    record_preconditions,
    record_tool_results,
    record_verdict,
    runs_locally,
    start_model_call,
    start_tools,
)
from agentloop.workflows.loop.state import (
    BUILTIN_TOOL_PATCHES,
    FEATURE_SET,
    FEATURES,
    FEATURES_OF_SET,
    MAX_OUTPUT_CORRECTIONS,
    MAX_REFUSED_CALLS,
    Feature,
    LoopState,
)
from agentloop.workflows.loop.views import (
    details,
    pending_approvals,
    pending_at_stop,
    side_effects,
    status_view,
    unresolved,
)

__all__ = [
    "BUILTIN_TOOL_PATCHES",
    "FEATURES",
    "FEATURES_OF_SET",
    "FEATURE_SET",
    "MAX_OUTPUT_CORRECTIONS",
    "MAX_REFUSED_CALLS",
    "AwaitApproval",
    "AwaitHumans",
    "AwaitInput",
    "AwaitReconciliation",
    "CallModel",
    "CheckPreconditions",
    "ChildOutcome",
    "Feature",
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
    "action_digest",
    "awaiting_humans",
    "continue_transcript",
    "decide",
    "details",
    "pending_approvals",
    "pending_at_stop",
    "record_decision",
    "record_failure",
    "record_finish",
    "record_message",
    "record_model_output",
    "record_outcome",
    "record_pause",
    "record_pause_started",
    "record_preconditions",
    "record_resolution",
    "record_tool_results",
    "record_verdict",
    "runs_locally",
    "side_effects",
    "start_model_call",
    "start_tools",
    "status_view",
    "unresolved",
]
