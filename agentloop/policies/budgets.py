"""The budget ledger: capacity is checked *before* an operation starts, never after.

Pure: the workflow passes `now` (workflow time). Each check returns the stop reason that
applies, or None when the operation may start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime

from agentloop.contract import Limits, LimitsLeft, Usage


def deadline_passed(limits: Limits, started_at: datetime, now: datetime) -> bool:
    if limits.deadline_seconds is None:
        return False
    return (now - started_at).total_seconds() >= limits.deadline_seconds


def model_call_blocked(limits: Limits, usage: Usage) -> str | None:
    if usage.model_calls >= limits.max_model_calls:
        return f"max_model_calls: {limits.max_model_calls} model calls used"
    tokens = usage.input_tokens + usage.output_tokens
    if limits.max_total_tokens is not None and tokens >= limits.max_total_tokens:
        return f"max_total_tokens: {tokens} of {limits.max_total_tokens} tokens used"
    if limits.max_cost_usd is not None and usage.cost_usd >= limits.max_cost_usd:
        return f"max_cost_usd: ${usage.cost_usd:.4f} of ${limits.max_cost_usd:.4f} spent"
    return None


def tool_batch_blocked(
    limits: Limits,
    usage: Usage,
    used_per_tool: Counter[str],
    batch: Sequence[str],
    tool_caps: Mapping[str, int | None] | None = None,
) -> str | None:
    """A batch starts whole or not at all: it reserves all of its calls first. `tool_caps`
    are the tools' own per-run caps; the run's `per_tool` limits apply as well."""
    if usage.tool_calls + len(batch) > limits.max_tool_calls:
        return (
            f"max_tool_calls: {usage.tool_calls} used, the next batch needs {len(batch)}, "
            f"limit {limits.max_tool_calls}"
        )
    wanted = Counter(batch)
    for tool, count in sorted(wanted.items()):
        caps = [limits.per_tool.get(tool), (tool_caps or {}).get(tool)]
        cap = min((c for c in caps if c is not None), default=None)
        if cap is not None and used_per_tool[tool] + count > cap:
            return f"per_tool: {tool} used {used_per_tool[tool]} of {cap}, the batch needs {count}"
    return None


def limits_left(limits: Limits, usage: Usage, started_at: datetime, now: datetime) -> LimitsLeft:
    seconds = None
    if limits.deadline_seconds is not None:
        seconds = max(0.0, limits.deadline_seconds - (now - started_at).total_seconds())
    tokens = None
    if limits.max_total_tokens is not None:
        tokens = max(0, limits.max_total_tokens - usage.input_tokens - usage.output_tokens)
    cost = None
    if limits.max_cost_usd is not None:
        cost = max(0.0, limits.max_cost_usd - usage.cost_usd)
    return LimitsLeft(
        cost_usd=cost,
        model_calls=max(0, limits.max_model_calls - usage.model_calls),
        tool_calls=max(0, limits.max_tool_calls - usage.tool_calls),
        total_tokens=tokens,
        seconds=seconds,
    )
