"""What stops a run, read in one place for the state table (`decide`) and the folds: whether
a final answer is empty, what is wrong with it against `output_schema` (checked once, by the
fold that records the answer; `decide` reads the verdict it kept), which provider response a
stop names, and the one rule of what a rejection does (a rejected call of a tool that says
`stop` stops the run, and nothing more of its batch goes to the model). Pure reads: nothing
here changes the run state.
"""

from __future__ import annotations

from typing import Any

from agentloop.contract import ApprovalDecision
from agentloop.events import ModelOutput
from agentloop.policies.bounds import MAX_INLINE_ANSWER_CHARS
from agentloop.policies.completion import check_output
from agentloop.policies.validation import MAX_CHECK_STEPS
from agentloop.workflows.loop.state import Batch, CheckedAnswer, LoopState


def response_named(output: ModelOutput) -> str:
    """Names the provider's response a protocol stop is about (its raw items are in the
    transcript store under that output)."""
    ref = output.provider_ref
    return f" (response {ref.response_id})" if ref.response_id else ""


def checked_answer(state: LoopState, output: ModelOutput, schema: dict[str, Any]) -> CheckedAnswer:
    """A final answer checked against `output_schema`. An answer too long to travel inline is
    not checked here (the workflow holds only its start)."""
    if output.text_ref:
        limit = MAX_INLINE_ANSWER_CHARS
        return CheckedAnswer(
            problems=[
                f"the answer is {output.text_chars} characters, over the {limit} that can be"
                " checked against output_schema"
            ]
        )
    value, problems = check_output(schema, output.text, steps=MAX_CHECK_STEPS)
    return CheckedAnswer(value=value, problems=problems)


def empty_answer(output: ModelOutput) -> bool:
    """A final answer with nothing in it: no text (whitespace aside), nothing by reference."""
    return not output.text.strip() and not output.text_ref


def stopping_rejection(state: LoopState, batch: Batch) -> tuple[str, ApprovalDecision] | None:
    """The first rejection in `batch` that stops the run (its tool's `on_reject` is `stop`),
    with its call id; None when every rejection so far is only told to the model (as is an
    approver's answer instead of the call: `response`). A run undoing its writes is already
    stopping: a rejected undo leaves only its write as is."""
    if state.compensation is not None:
        return None
    for call_id, decision in batch.decisions.items():
        stops = state.spec_of(call_id).on_reject == "stop" and not decision.response
        if not decision.approved and stops:
            return call_id, decision
    return None
