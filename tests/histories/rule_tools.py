"""The tool the `approval_rule_in_worker` history was recorded with: a write whose tool names
an approval rule, so the worker evaluates the rule and the run acts on the recorded verdict.
Replaying that history needs only agentloop, not this module."""

from __future__ import annotations

import agentloop
from agentloop import ToolContext


@agentloop.tool(effect="write", needs_approval="for_someone_else")
async def note_for(ctx: ToolContext[None], participant_id: str) -> str:
    """Leave a note for a participant (approval when it is for someone else)."""
    return f"noted for {participant_id} under {ctx.idempotency_key}"
