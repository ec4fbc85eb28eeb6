"""The tools some histories were recorded with. `note_for` (`approval_rule_in_worker`): a
write whose tool names an approval rule, so the worker evaluates the rule and the run acts on
the recorded verdict. `pick_seat` (`tools_ask`): a read that asks a person first.
`post_notice` (`activity_tool_start_bounded`): a write that is a team's activity on a queue no
worker polls. `file_claim` (`write_failed`): a write its system refuses. `says_verified`
(`verifier_rejects_then_accepts`): a verifier that wants the word "verified".
`book_seat_remote` (`activity_tool`): a write that is a team's activity
(tests/team_plugin/plain_worker.py) on a queue the recorder polls. Replaying those histories
needs only agentloop, not this module."""

from __future__ import annotations

import agentloop
from agentloop import BusinessRefusal, InputNeeded, ToolContext, Verdict, VerifyContext


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


@agentloop.tool(effect="write")
async def file_claim(ctx: ToolContext[None], claim: str) -> str:
    """File an insurance claim."""
    raise BusinessRefusal(f"the claim window for {claim!r} is closed")


@agentloop.verifier("says_verified")
async def says_verified(ctx: VerifyContext) -> Verdict:
    passed = "verified" in ctx.answer
    return Verdict(passed=passed, reason="says verified" if passed else "say it is verified")


book_seat_remote = agentloop.activity_tool(
    "book_seat_remote",
    activity="book_seat",
    task_queue="replay-team-queue",
    parameters={
        "type": "object",
        "properties": {"workshop_id": {"type": "string"}, "participant_id": {"type": "string"}},
        "required": ["workshop_id", "participant_id"],
    },
    description="Book a seat in a workshop (the team's own activity).",
    effect="write",
    lookup_activity="booking_outcome",
    timeout_seconds=30,
)
