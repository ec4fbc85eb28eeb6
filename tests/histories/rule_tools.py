"""The tools some histories were recorded with. `note_for` (`approval_rule_in_worker`): a
write whose tool names an approval rule, so the worker evaluates the rule and the run acts on
the recorded verdict. `pick_seat` (`tools_ask`): a read that asks a person first.
`post_notice` (`activity_tool_start_bounded`): a write that is a team's activity on a queue no
worker polls. Replaying those histories needs only agentloop, not this module."""

from __future__ import annotations

import agentloop
from agentloop import InputNeeded, ToolContext


@agentloop.tool(effect="write", needs_approval="for_someone_else")
async def note_for(ctx: ToolContext[None], participant_id: str) -> str:
    """Leave a note for a participant (approval when it is for someone else)."""
    return f"noted for {participant_id} under {ctx.idempotency_key}"


@agentloop.tool(effect="read")
async def pick_seat(ctx: ToolContext[None], train_number: str) -> str:
    """Pick a seat on a train (a person says which)."""
    if ctx.reply is None:
        raise InputNeeded(f"Which seat on {train_number}?", {"train_number": train_number})
    return (
        f"seat {ctx.reply.text} on {ctx.reply.pending['train_number']}, as {ctx.reply.sender} said"
    )


post_notice = agentloop.activity_tool(
    "post_notice",
    activity="post_notice",
    task_queue="no-worker-polls-this",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    description="Post a notice on the board.",
    effect="write",
    lookup_activity="notice_outcome",
    start_timeout_seconds=1,
)
