"""The context budget: what the model is sent stays within what it can read.

Activity side, applied to the request only: the stored transcript keeps everything. When the
conversation would not fit, the oldest tool results give way first to a short preview (and
their artifact reference, when they have one); the results the model is answering now stay
whole. What must not be lost is then stated from run state (approvals, confirmed writes) —
never only from what a summary kept."""

from __future__ import annotations

import json

from agentloop.digests import canonical_json
from agentloop.events import Event, ModelOutput, StateUpdate, ToolResult

PREVIEW_CHARS = 300

CONTEXT_CHARS: dict[str, int] = {
    "gpt-4o": 400_000,
    "gpt-4.1": 3_000_000,
    "gpt-5": 1_200_000,
    "o3": 600_000,
    "o4-mini": 600_000,
    "claude-": 600_000,
}
"""Model-name prefix -> characters it can take (about 3 per token, with room to answer)."""


def budget_for(model: str, explicit: int | None) -> int | None:
    if explicit is not None:
        return explicit
    matches = [prefix for prefix in CONTEXT_CHARS if model.startswith(prefix)]
    return CONTEXT_CHARS[max(matches, key=len)] if matches else None


def size(event: Event) -> int:
    return len(canonical_json(event.model_dump(mode="json")))


def fit(events: list[Event], budget_chars: int | None, facts: list[str]) -> list[Event]:
    """`events` as sent to the model: unchanged when they fit, else older results elided and
    the run-state facts restated at the end."""
    total = sum(size(event) for event in events)
    if budget_chars is None or total <= budget_chars:
        return events
    last_output = max((i for i, e in enumerate(events) if isinstance(e, ModelOutput)), default=-1)
    fitted = list(events)
    for index, event in enumerate(events[:last_output]):
        if total <= budget_chars:
            break
        if isinstance(event, ToolResult) and len(event.content) > PREVIEW_CHARS:
            stub = event.model_copy(update={"content": _elided(event)})
            total -= size(event) - size(stub)
            fitted[index] = stub
    if facts:
        fitted.append(
            StateUpdate(
                kind="facts",
                text="Earlier tool results were shortened to fit your context. Facts from run "
                "state, which stay true: " + "; ".join(facts),
            )
        )
    return fitted


def _elided(result: ToolResult) -> str:
    return json.dumps(
        {
            "elided": True,
            "source": {"tool": result.tool, "call_id": result.call_id},
            "total_chars": len(result.content),
            "artifact": result.artifact_ref,
            "preview": result.content[:PREVIEW_CHARS],
        },
        ensure_ascii=False,
    )
