"""Behaviours added after runs already existed (`Feature`), switched on per run, and the
cumulative sets a run asks `workflow.patched` for (`FEATURE_SETS`): a run started before a
behaviour replays without it.

Adding one: a new member, read only through `LoopState.has`, and a new set in front of
`FEATURE_SETS` holding it and every behaviour before it (a stored history that recorded the
set, under `tests/histories/`).

Retiring one, once no history that lacks it can be replayed (Temporal's patch, then
`workflow.deprecate_patch`, then removal, applied to sets):

1. Wait until every run chain that started with a set older than the first one holding the
   behaviour (or before sets) is closed and past the namespace's retention: a query and
   `agentloop replay` replay closed runs too. A run continued as new asks for no set (its
   state carries its chain's behaviours), so a chain is as old as its first run.
2. Then, in one change: each `state.has(Feature.X)` keeps only its new path; the older sets
   leave `FEATURE_SETS` and their histories leave `tests/histories/` (none can be replayed
   any more, so their ids need no `deprecate_patch`); the member stays, its docstring saying
   since which set it always holds, because the state a running chain carries names it.
3. A patch id every run asks for on its own rather than through a set (the shell's
   `update-waits-for-state` and `local-activity-failures-handled`; the newest set, should
   sets ever end) takes Temporal's three steps: `if workflow.patched(ID)` with both paths;
   once no history without its marker can be replayed, `workflow.deprecate_patch(ID)` and
   the new path alone (histories with the marker still replay, new runs record it
   deprecated); once no history whose marker `patched` recorded can be replayed, no call at
   all (a deprecated marker nobody asks for is skipped; an undeprecated one fails the
   replay).
"""

from __future__ import annotations

from enum import StrEnum

from agentloop.tool_spec import ASK_USER, READ_ARTIFACT


class Feature(StrEnum):
    """A behaviour added after runs already existed. Its value is its `workflow.patched` id:
    a run started before it replays without it."""

    BUILTIN_TOOLS = "builtin-tools"
    """`read_artifact` may be called without being named in `tools`."""
    ASK_USER = "ask-user"
    """`ask_user` may be called without being named in `tools`."""
    STALL_DETECTION = "stall-detection"
    TOOL_ERROR_CLASSES = "tool-error-classes"
    LOCAL_READS = "local-reads"
    RUN_DEADLINE_TIMER = "run-deadline-timer"
    PHASE_WHEN_WAITING = "phase-when-waiting"
    LOCAL_DESCRIBE_TOOLS = "local-describe-tools"
    """The tool specs are read by a local activity, inside the run's first workflow task."""
    APPROVAL_RULES_IN_WORKER = "approval-rules-in-worker"
    """A tool's named approval rule is evaluated by the worker (with the precondition check)
    and its verdict recorded; the workflow never runs a rule. Before it, the built-in rules
    ran in the workflow."""
    BOUNDED_VALIDATION = "bounded-validation"
    """Arguments and answers over a size or depth bound are refused unchecked, patterns run
    on RE2, problems are told clipped (`policies.validation`)."""
    INPUT_CARRIED_ONCE = "input-carried-once"
    """`continue_as_new` passes the input only inside the run state it carries."""
    REFUSED_WRITES_LEAVE_BATCH = "refused-writes-leave-batch"
    """A call whose precondition fails leaves the batch at once: it is neither offered for
    approval nor run (before it, a refused write in a batch of writes was still run)."""
    TEMPORAL_CANCEL_AS_SIGNAL = "temporal-cancel-as-signal"
    """Temporal's own cancel request (the UI's Cancel, `temporal workflow cancel`) stops the
    run like the `cancel` signal: a write in flight finishes, the result and its stop report
    are written. Before it, the run ended `Canceled` with neither."""
    CONTINUE_FROM_CHECKED = "continue-from-checked"
    """`continue_from` only within the tenant (and subject), and what the earlier run
    refused or left unknown is carried (its rejected actions, its unresolved writes, its
    artifacts)."""
    APPROVALS_CHECKED_BY_WORKER = "approvals-checked-by-worker"
    """Every approval decision is checked by the worker before it counts (`check_approval`:
    its signature against the worker's approver keys, or nothing when it has none) and the
    verdict recorded; the workflow never checks a signature itself."""
    MESSAGES_DURING_MODEL_CALL_KEPT = "messages-during-model-call-kept"
    """A message (or any event) that arrived while a model call was in flight waits for the
    next call; before it, the call's end emptied the outbox and such a message was lost."""
    MODEL_OUTPUT_SLIM = "model-output-slim"
    """A model output reaches the workflow slim: without the provider's raw items, and a text
    over `MAX_INLINE_ANSWER_CHARS` by reference through the store (`ModelOutput.text_ref`;
    the run's result names it in `output_ref`); the transcript check covers the events sent.
    Before it, the whole output (raw items, any length of text) rode in history and state."""
    CHECKS_HEARTBEAT = "checks-heartbeat"
    """agentloop's precondition check and outcome lookup heartbeat like a tool, so a worker
    lost during one is noticed in seconds, not after the tool's whole timeout."""
    RUN_CHAIN_KEYS = "run-chain-keys"
    """A write's idempotency key names the run chain (`WORKFLOW_ID/FIRST_RUN_ID/CALL_ID`), so a
    later run reusing the workflow id never shares keys with an earlier one."""
    INDEXED_HOWEVER_STARTED = "indexed-however-started"
    """A run reads its tool specs with `describe_run`, which also says how the worker takes
    approvals (`status.approval_signing` from the start) and, for a run started without
    agentloop's search attributes (a plain `start_workflow`), whether the namespace has them
    registered; when it has, the run upserts them (phase, status, provider, tenant) as it
    starts, before its first model call, and keeps them current like a run started with
    them. Before it, such a run was never indexed."""
    ORDERED_BATCH = "ordered-batch"
    """A batch runs in the model's order around its writes: the reads before the first write
    run together, a read after a write runs once that write is done (`Batch.reads_ready`).
    Before it, every read of a batch ran before any write."""
    TASK_STATE = "task-state"
    """Tools update the run's task state with their results (`WithState`), merged by
    `policies.task_state`; `status`, the result, the stop report, verifiers and the facts
    restated after a context trim show it, and stall detection watches it: the same state
    for `STATE_STALL_TURNS` tool turns, or a plan flipping between two actions, is a stall."""
    CONTINUE_CHAIN_USAGE = "continue-chain-usage"
    """A run continuing another (`continue_from`) must be given its `limits` explicitly (a
    continuation never takes fresh defaults silently), and its `status`, result and stop
    report show the usage of the whole chain (`chain_usage`)."""
    STRICT_BUDGETS = "strict-budgets"
    """Each model call is reserved against `max_total_tokens` and `max_cost_usd` before it
    starts: the activity bounds its input, sends an output-token limit within what is left,
    or does not start it (`OverBudget`: the run stops `limit_reached`, naming the cap and by
    how much). Before it, a call was checked only against what was already spent, and the
    run could end past its caps."""
    TEXTS_BY_REFERENCE = "texts-by-reference"
    """A task, instructions or message over `MAX_INLINE_TEXT_CHARS` is stored (`store_texts`)
    before the model call that first sends it, and travels by reference from then on: in model
    call inputs, in the state continue-as-new carries (with the tool results stored already),
    and in a result's `unsent`. At most `MAX_WAITING_MESSAGES` messages wait for the model, and
    the ledger holds at most `MAX_LEDGER_ARGUMENT_BYTES` of arguments. Before it, such texts
    rode inline in every one of those."""
    BOUNDED_PRINCIPAL = "bounded-principal"
    """The run's principal is at most `checks.MAX_PRINCIPAL_BYTES` of JSON, checked at start:
    it rides in every tool call's input, and a batch's calls start in one workflow task
    completion, which Temporal caps at 4 MiB (past it, Temporal terminates the run). Before
    it, any principal the input's fields allowed (up to about 50 KB) was taken."""
    CONTINUE_WHILE_WAITING = "continue-while-waiting"
    """A run waiting for humans continues as new when it is time to (Temporal suggests it, or
    `continue_as_new_after_events`), and then waits on: signals that arrive while it waits
    (refused ones too) add to its history. Before it, only the end of the wait was such a
    point, and a flood of signals could take a waiting run to Temporal's history limit,
    where Temporal terminates it."""
    BOUNDED_RUN_CHAIN = "bounded-run-chain"
    """`run_chain` keeps the first run id and the latest ones, at most `MAX_RUN_CHAIN_IDS`,
    and counts the ones left out between (`run_chain_left_out`). Before it, the chain grew
    by one id per continue-as-new, in the state every continuation carries."""
    BOUNDED_SCHEMA_WORK = "bounded-schema-work"
    """What checking against a JSON Schema may cost is bounded: an `output_schema` the worker
    counts past `schema_cost.MAX_SCHEMA_WORK` (in `describe_run`) fails the run at start, and
    a model output's checks take at most `validation.MAX_CHECK_STEPS` keyword checks in all
    (split evenly among its calls; past its share a call is refused, not checked), every
    subschema on RE2 whatever `$schema` it names. Before it, a check ran however long it
    took, inside a workflow task."""
    DEADLINE_WATCH_RESUMES = "deadline-watch-resumes"
    """The deadline timer starts again when the deadline moves after it passed: a delegated
    run's wait for humans is added to this run's paused time only when the child comes back,
    so the timer may have fired meanwhile. Before it, the deadline counted as passed for the
    rest of the run, and every later call was cut the moment it started."""
    DELEGATE_SLICES_WHOLE_BATCH = "delegate-slices-whole-batch"
    """A child run's slice leaves room for every call of the batch not started yet (reads the
    model put after a write included) and is shared with the batch's delegates still to
    start. Before it, only this step's delegates shared it and only the batch's writes were
    set aside: a delegate after a write got no model call (failing the workflow task), and a
    child could spend calls the batch's later reads had been given."""
    CALLS_COUNTED_ONCE = "calls-counted-once"
    """A tool call counts once against `max_tool_calls`, however many times it runs: a write
    sent again under its key after the system of record said it is absent is the call
    already reserved. Before it, each sending counted."""
    TOOLS_ASK = "tools-ask"
    """A tool may ask a person before its call can happen (`InputNeeded`; an MCP server's
    `input_required`): the call waits `awaiting_input` with the batch's questions, and the
    person's `message` goes back to the tool when the call runs again (at most
    `MAX_INPUT_ROUNDS` times). Before it, what the tool asked went to the model as a refusal."""
    QUESTIONS_NOT_STALLS = "questions-not-stalls"
    """A turn that only asks the person (`ask_user`) does not count as a tool turn leaving the
    task state unchanged: the answers are new input. Before it, a model asking three questions
    in a row after a tool had set any state was nudged, then stopped `stalled`."""
    BOUND_COUNTS_UNSHORTENED = "bound-counts-unshortened"
    """A model call's input-token bound counts the older results the last call sent shortened
    and this one sends whole again (the last call's `elided_through`, kept in run state and
    handed back in the budget). Before it, the provider's count of the last request was taken
    as covering them, and a run could end past `max_total_tokens`."""
    ACTIVITY_TOOL_START_BOUNDED = "activity-tool-start-bounded"
    """An activity tool's call and lookup wait at most the tool's `start_timeout_seconds` for a
    worker on its task queue to take them; a call no worker took fails as never started, and a
    write that never started is not applied (`failed`, no lookup). Before it, a call on a queue
    no worker polls waited for ever: a write held the run in `executing_tools` for good."""
    ANSWERS_BOUNDED = "answers-bounded"
    """The answers to one batch's questions (`ask_user`, a tool asking) hold about
    `MAX_ANSWER_CHARS` of text, each an even share of what is left; a longer answer is refused
    and recorded, and its question still waits. Before it, many long answers made the next
    step's payload pass Temporal's limit: every workflow task failed, and the run could not
    even be cancelled."""
    CHILDREN_TOLD_OF_CANCEL = "children-told-of-cancel"
    """Temporal's cancel request reaches a run's delegated children as the `cancel` signal
    does: they are cancelled (a write of theirs finishing first) and what they did is
    recorded before the run stops. Before it, the run stopped at once and Temporal
    terminated its children, and a child's write in flight was left out of the result."""
    CHILD_START_REFUSED_TOLD = "child-start-refused-told"
    """A delegated child run that cannot start (a workflow already runs under its id) fails
    its `delegate` call, told to the model, charging nothing. Before it, the run itself
    failed without a result."""
    RULE_FAILURE_NAMED = "rule-failure-named"
    """A call whose approval rule (the team's code, run by the worker) raised is refused
    saying so, naming the rule and its error. Before it, the model and the ledger were told
    the call's precondition could not be checked, which blamed the tool."""
    PRICED_COST_CAPS = "priced-cost-caps"
    """A run with `max_cost_usd` whose model the worker has no price for (built in, or its
    pricing file) fails at start with `InvalidInput` naming the model and how to price it
    (the worker says so in `describe_run`). Before it, such a run cost 0 at every call: its
    cap never bound, and nothing said so."""
    WAIT_SUMMARIES = "wait-summaries"
    """A wait for people starts its timer with a summary naming what it waits for (each
    call and tool, who may decide, until when) and the command and signal that answer it,
    which the Temporal UI shows on the timer. Before it, the timer had no summary."""
    TEAM_ANSWERS_READ_BY_WORKER = "team-answers-read-by-worker"
    """What a team's activity (an activity tool, its lookup) answers reaches the workflow as
    an undecoded payload, read by agentloop's worker in a local activity: bytes that are not
    UTF-8, a protobuf message, an encoding no one here knows, or an answer the team's worker
    put in the store (`agentloop.ActivityToolResults`) end the call with a clear outcome.
    Before it, the workflow decoded the answer itself: such bytes or a protobuf message
    failed every workflow task, and a write stayed executing for good."""
    TEAM_ANSWERS_WITHIN_HISTORY = "team-answers-within-history"
    """The team's activity-tool calls of a batch start in waves, each as large as the run's
    history has room for with every answer in flight counted at Temporal's 2 MiB; a call
    left when there is none is not started, told to the model as not run (the next turn
    continues the run in a fresh history). Before it, 40 parallel answers of 1.5 MB took the
    history past 50 MB, and Temporal terminated the run with no result."""
    NOTIFY_WAITING = "notify-waiting"
    """When the run starts waiting for a person (an approval, an answer, an unknown write's
    outcome) on a worker with notice webhooks, it starts the `notify_waiting` activity for the
    calls not told of yet, without waiting on it; a notice that could not be delivered after
    its retries is recorded in `status.notice_failures`. Before it, nobody was told."""
    RUN_STREAM = "run-stream"
    """The run publishes what it does on its Workflow Stream (`loop.watching`; the model
    activity its text), unless its input turns `publish_events` off. Before it, watchers
    could only poll `status`, and saw the model's text once its call had ended."""
    OVER_BUDGET_CALLS_LEDGERED = "over-budget-calls-ledgered"
    """The calls of an output that does not fit what is left of the budget go into the ledger
    (decision `over_budget`, status `proposed`), so the result's `calls` and `pending` show
    what the run was asked to do and did not. Before it, the stop reason alone named them."""
    BLOCKED_NOT_COMPLETED = "blocked-not-completed"
    """A run that gives up does not end `completed`: the model is offered `give_up` (unless
    `offer_give_up` is false), and calling it stops the run `blocked` with the model's reason
    (the other calls of its output do not run); an empty final answer is sent back once with
    a runner note, and a second one stops the run `blocked`. Before it, there was no `give_up`
    (a team's tool of that name ran like any other) and an empty answer ended `completed`."""
    SIGNED_PRINCIPAL = "signed-principal"
    """A fresh run asks the worker (in `describe_run`) whether its principal may be taken: by
    the worker's starter keys, its `principal_signature` must be a starter's signature of it
    for this run (a delegated child: for its root run); a run refused fails at start
    (`InvalidInput`) naming the principal. Before it, the principal was taken as given, a
    signature unread."""
    SEARCHABLE_NAMES = "searchable-names"
    """A run whose `principal.tenant` or `task_family` holds a character a visibility query
    cannot search for as written (outside `search.SEARCHABLE`: a '\\', a quote, a control
    character) fails at start (InvalidInput, naming the field). Before it, such a run ran,
    and `agentloop list` and `stats` could never find it by that value."""
    RESOLUTIONS_CHECKED_BY_WORKER = "resolutions-checked-by-worker"
    """An operator's `resolve` is checked by the worker before it counts (`check_resolution`:
    with approver keys, signed by the operator's key, who must be one of the tool's approvers
    when it names some) and the verdict recorded; a refused one is recorded with
    `signal: "resolve"`. Before it, any `resolve` naming any operator settled the write, even
    on a worker that takes only signed approvals."""
    EXACT_COUNT_WHEN_BOUND_BINDS = "exact-count-when-bound-binds"
    """A model call whose input bound (a token a byte, 3-4 times the real count for English)
    does not fit what is left of `max_total_tokens` or `max_cost_usd` is not refused on it:
    the provider's own counter is asked (`count_model_input`), and the call is made again
    reserving that count, refused only if even it does not fit. Before it, a small cap could
    refuse a run's first call although the provider would have counted a third of the bound."""
    RECHECK_AFTER_WAIT = "recheck-after-wait"
    """A call that waited for people (an approval, an answer, an operator's word) has its
    precondition, with the object-level checks in it, checked again just before it runs,
    against the world as it is then (`Batch.recheck`); a call that no longer passes is refused
    under its call id, approved or not, and never runs. Before it, the check made before the
    wait let the call through however long the wait."""
    INBOX_MEMO = "inbox-memo"
    """An indexed run waiting for a person keeps what it waits for in its memo
    (`waiting.WAITING_MEMO`: each call's kind, tool, id, who may decide and since when, the
    wait's deadline, the tenant and a clipped task; bounded, see `loop.waiting_memo`),
    current while it waits, and removes it when the wait is over: the inbox lists waiting
    runs from one visibility list. Before it, the inbox asked each waiting run's `status`."""


FEATURES = (
    Feature.STALL_DETECTION,
    Feature.TOOL_ERROR_CLASSES,
    Feature.LOCAL_READS,
    Feature.RUN_DEADLINE_TIMER,
    Feature.PHASE_WHEN_WAITING,
)
"""Behaviours a run started before `FEATURE_SET` asked `workflow.patched` for, one by one."""

BUILTIN_TOOL_PATCHES = ((READ_ARTIFACT, Feature.BUILTIN_TOOLS), (ASK_USER, Feature.ASK_USER))
"""Each built-in tool and the feature that introduced it: older runs replay without it."""

FEATURES_2026_11 = (
    *(feature for _, feature in BUILTIN_TOOL_PATCHES),
    *FEATURES,
    Feature.LOCAL_DESCRIBE_TOOLS,
)

FEATURES_2026_12 = (*FEATURES_2026_11, Feature.APPROVAL_RULES_IN_WORKER)

FEATURES_2026_12B = (
    *FEATURES_2026_12,
    Feature.BOUNDED_VALIDATION,
    Feature.INPUT_CARRIED_ONCE,
    Feature.REFUSED_WRITES_LEAVE_BATCH,
    Feature.RUN_CHAIN_KEYS,
    Feature.TEMPORAL_CANCEL_AS_SIGNAL,
    Feature.CONTINUE_FROM_CHECKED,
    Feature.APPROVALS_CHECKED_BY_WORKER,
    Feature.MESSAGES_DURING_MODEL_CALL_KEPT,
    Feature.MODEL_OUTPUT_SLIM,
    Feature.CHECKS_HEARTBEAT,
    Feature.INDEXED_HOWEVER_STARTED,
)

FEATURES_2026_12C = (
    *FEATURES_2026_12B,
    Feature.TEXTS_BY_REFERENCE,
    Feature.ORDERED_BATCH,
    Feature.STRICT_BUDGETS,
    Feature.CONTINUE_CHAIN_USAGE,
    Feature.TASK_STATE,
)

FEATURES_2026_12D = (*FEATURES_2026_12C, Feature.TOOLS_ASK)

FEATURES_2026_12E = (*FEATURES_2026_12D, Feature.BOUNDED_PRINCIPAL)

FEATURES_2026_12F = (
    *FEATURES_2026_12E,
    Feature.CONTINUE_WHILE_WAITING,
    Feature.BOUNDED_RUN_CHAIN,
)

FEATURES_2026_12G = (*FEATURES_2026_12F, Feature.BOUNDED_SCHEMA_WORK)

FEATURES_2026_12H = (
    *FEATURES_2026_12G,
    Feature.DEADLINE_WATCH_RESUMES,
    Feature.DELEGATE_SLICES_WHOLE_BATCH,
    Feature.CALLS_COUNTED_ONCE,
)

FEATURES_2026_12I = (
    *FEATURES_2026_12H,
    Feature.QUESTIONS_NOT_STALLS,
    Feature.OVER_BUDGET_CALLS_LEDGERED,
    Feature.BOUND_COUNTS_UNSHORTENED,
    Feature.ACTIVITY_TOOL_START_BOUNDED,
    Feature.ANSWERS_BOUNDED,
    Feature.CHILDREN_TOLD_OF_CANCEL,
    Feature.CHILD_START_REFUSED_TOLD,
    Feature.RULE_FAILURE_NAMED,
)

FEATURES_2026_12J = (
    *FEATURES_2026_12I,
    Feature.PRICED_COST_CAPS,
    Feature.BLOCKED_NOT_COMPLETED,
    Feature.SIGNED_PRINCIPAL,
    Feature.SEARCHABLE_NAMES,
    Feature.RESOLUTIONS_CHECKED_BY_WORKER,
    Feature.WAIT_SUMMARIES,
    Feature.RECHECK_AFTER_WAIT,
    Feature.EXACT_COUNT_WHEN_BOUND_BINDS,
    Feature.TEAM_ANSWERS_READ_BY_WORKER,
    Feature.TEAM_ANSWERS_WITHIN_HISTORY,
    Feature.NOTIFY_WAITING,
    Feature.RUN_STREAM,
)

FEATURES_2026_12K = (*FEATURES_2026_12J, Feature.INBOX_MEMO)

FEATURE_SETS: tuple[tuple[str, tuple[Feature, ...]], ...] = (
    ("features-2026-12k", FEATURES_2026_12K),
    ("features-2026-12j", FEATURES_2026_12J),
    ("features-2026-12i", FEATURES_2026_12I),
    ("features-2026-12h", FEATURES_2026_12H),
    ("features-2026-12g", FEATURES_2026_12G),
    ("features-2026-12f", FEATURES_2026_12F),
    ("features-2026-12e", FEATURES_2026_12E),
    ("features-2026-12d", FEATURES_2026_12D),
    ("features-2026-12c", FEATURES_2026_12C),
    ("features-2026-12b", FEATURES_2026_12B),
    ("features-2026-12", FEATURES_2026_12),
    ("features-2026-11", FEATURES_2026_11),
)
"""Patch ids that each stand for a set of behaviours, newest first. A new run asks for the
first and records one patch marker (and one `TemporalChangeVersion` upsert) instead of one of
each per behaviour (14 of a 2-turn run's 39 events before sets); a run replays with the set it
recorded. A behaviour added later gets a new set in front, holding every behaviour before it."""

FEATURE_SET, FEATURES_OF_SET = FEATURE_SETS[0]
"""The set a new run starts with."""
