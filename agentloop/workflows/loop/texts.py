"""Long texts by reference: a task, instructions or message
over `MAX_INLINE_TEXT_CHARS` is stored once, before the model call that first sends it; from
then on what carries it on (a model call's input, the state a continue-as-new carries, a
result's `unsent`) names it by its store key instead. The workflow keeps the whole text while
it has it, so the transcript check of the call that sends it still covers it. Pure.
"""

from __future__ import annotations

from agentloop.events import Instruction, UserInput
from agentloop.policies.bounds import MAX_INLINE_TEXT_CHARS
from agentloop.transcript import by_reference
from agentloop.workflows.loop.state import LoopState


def texts_to_store(state: LoopState) -> dict[int, str]:
    """The long texts of what the model has not seen that are not stored yet, by their place
    in the outbox (which only grows at its end until the model call)."""
    return {
        at: event.text
        for at, event in enumerate(state.outbox)
        if isinstance(event, Instruction | UserInput)
        and not event.text_ref
        and len(event.text) > MAX_INLINE_TEXT_CHARS
    }


def record_texts_stored(state: LoopState, refs: dict[int, str]) -> None:
    """The store keys `store_texts` gave the texts of `texts_to_store`, by the same places."""
    for at, ref in refs.items():
        state.outbox[at] = state.outbox[at].model_copy(update={"text_ref": ref})


def state_to_carry(state: LoopState) -> LoopState:
    """What continue-as-new hands the next run (once `texts_to_store` is empty): the outbox's stored
    texts and contents by reference, and of the input's task and instructions only their
    start (the model has them in the transcript; nothing else reads them)."""
    run_input = state.run_input.model_copy(
        update={
            "task": state.run_input.task[:MAX_INLINE_TEXT_CHARS],
            "instructions": state.run_input.instructions[:MAX_INLINE_TEXT_CHARS],
        }
    )
    outbox = [by_reference(event) for event in state.outbox]
    return state.model_copy(update={"run_input": run_input, "outbox": outbox})
