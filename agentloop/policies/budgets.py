"""The budget ledger: capacity is checked *before* an operation starts, never after.

Pure: the workflow passes `now` (workflow time). Each check returns the cap the operation
would pass (`OverCap`), or None when it may start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from agentloop.contract import Limits, LimitsLeft, Usage

Cap = Literal["max_model_calls", "max_tool_calls", "max_total_tokens", "max_cost_usd", "per_tool"]
"""The field of `Limits` a check found would be passed (the deadline is checked apart)."""


@dataclass(frozen=True)
class OverCap:
    """Why an operation may not start: the cap it would pass, and by how much in words."""

    cap: Cap
    detail: str

    @property
    def sentence(self) -> str:
        """The stop reason: `CAP: DETAIL` (the run's `stop_reason`, the activity's error)."""
        return f"{self.cap}: {self.detail}"


MIN_OUTPUT_TOKENS = 16
"""The fewest output tokens a model call is started with: a call that cannot be given them
within the budget is not started."""
MAX_OUTPUT_LIMIT = 2**31
"""Past this, a cost cap limits no output (a price of nearly nothing per token)."""


def deadline_passed(limits: Limits, started_at: datetime, now: datetime) -> bool:
    if limits.deadline_seconds is None:
        return False
    return (now - started_at).total_seconds() >= limits.deadline_seconds


def model_call_blocked(limits: Limits, usage: Usage) -> OverCap | None:
    if usage.model_calls >= limits.max_model_calls:
        return OverCap("max_model_calls", f"{limits.max_model_calls} model calls used")
    tokens = usage.input_tokens + usage.output_tokens
    if limits.max_total_tokens is not None and tokens >= limits.max_total_tokens:
        return OverCap("max_total_tokens", f"{tokens} of {limits.max_total_tokens} tokens used")
    if limits.max_cost_usd is not None and usage.cost_usd >= limits.max_cost_usd:
        spent = f"${usage.cost_usd:.4f} of ${limits.max_cost_usd:.4f} spent"
        return OverCap("max_cost_usd", spent)
    return None


def output_token_cap(
    input_bound: int,
    tokens_left: int | None,
    cost_left: float | None,
    price: tuple[float, float] | None,
    requested: int | None,
) -> int | OverCap | None:
    """What a model call's output may be, reserved before it starts (seed 003): its input can
    take at most `input_bound` tokens, so what is left of `max_total_tokens` and of
    `max_cost_usd` (at `price`, USD per million input and output tokens) after that input is
    what its output may use. The output-token limit to send (None: no cap applies and none
    was `requested`), or why the call cannot start, naming the cap and by how much."""
    caps = [] if requested is None else [requested]
    if tokens_left is not None:
        room = tokens_left - input_bound
        if room < MIN_OUTPUT_TOKENS:
            return OverCap(
                "max_total_tokens",
                f"the next model call needs up to {input_bound} input and"
                f" {MIN_OUTPUT_TOKENS} output tokens, {max(tokens_left, 0)} left"
                f" ({input_bound + MIN_OUTPUT_TOKENS - tokens_left} short)",
            )
        caps.append(room)
    if cost_left is not None and price is not None:
        input_cost = input_bound * price[0] / 1_000_000
        per_output = price[1] / 1_000_000
        floor = input_cost + MIN_OUTPUT_TOKENS * per_output
        if floor > cost_left:
            return OverCap(
                "max_cost_usd",
                f"the next model call could cost ${floor:.4f} (up to {input_bound}"
                f" input tokens and {MIN_OUTPUT_TOKENS} output), ${max(cost_left, 0.0):.4f}"
                f" left (${floor - cost_left:.4f} short)",
            )
        affordable = (cost_left - input_cost) / per_output if per_output > 0 else None
        if affordable is not None and affordable < MAX_OUTPUT_LIMIT:
            caps.append(int(affordable))
    return min(caps) if caps else None


def tool_batch_blocked(
    limits: Limits,
    usage: Usage,
    used_per_tool: Counter[str],
    batch: Sequence[str],
    tool_caps: Mapping[str, int | None] | None = None,
) -> OverCap | None:
    """A batch starts whole or not at all: it reserves all of its calls first. `tool_caps`
    are the tools' own per-run caps; the run's `per_tool` limits apply as well."""
    if usage.tool_calls + len(batch) > limits.max_tool_calls:
        return OverCap(
            "max_tool_calls",
            f"{usage.tool_calls} used, the next batch needs {len(batch)}, "
            f"limit {limits.max_tool_calls}",
        )
    wanted = Counter(batch)
    for tool, count in sorted(wanted.items()):
        cap = tool_cap(limits, tool, (tool_caps or {}).get(tool))
        if cap is not None and used_per_tool[tool] + count > cap:
            used = f"{tool} used {used_per_tool[tool]} of {cap}, the batch needs {count}"
            return OverCap("per_tool", used)
    return None


def tool_cap(limits: Limits, tool: str, own_cap: int | None) -> int | None:
    """The calls a run may make of `tool`: the lower of the run's `per_tool` limit and the
    tool's own per-run cap (None: uncapped)."""
    caps = [limits.per_tool.get(tool), own_cap]
    return min((c for c in caps if c is not None), default=None)


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


def children_blocked(limits: Limits, usage: Usage, children: int) -> OverCap | None:
    """Each child run needs a model call of its own, and this run one more to read their
    answers: otherwise none of the batch starts."""
    left = limits.max_model_calls - usage.model_calls
    if children and (left - 1) // children < 1:
        return OverCap(
            "max_model_calls",
            f"{left} left; {children} delegated run(s) need at least one "
            "model call each, and this run one to read their answers",
        )
    return None


def child_limits(
    left: LimitsLeft,
    *,
    children: int,
    unstarted_calls: int,
    tools_left: Mapping[str, int],
    requested_model_calls: int | None = None,
    requested_tool_calls: int | None = None,
) -> Limits:
    """One child's slice of what this run has left, shared fairly among the `children`
    starting together (tokens and cost with this run too). `unstarted_calls` are calls of
    this batch already reserved but not yet started; `tools_left`, what each capped tool may
    still be called. The child's usage is charged back to this run when it ends, so the
    slices never add up past the limits."""
    model_calls = (left.model_calls - 1) // children
    tool_calls = max(0, left.tool_calls - unstarted_calls) // children
    # What the parent's own next call will cost is not known: it keeps a child's share.
    shares = children + 1
    return Limits(
        max_model_calls=min(requested_model_calls or model_calls, model_calls),
        max_tool_calls=min(
            tool_calls if requested_tool_calls is None else requested_tool_calls, tool_calls
        ),
        max_total_tokens=(
            None if left.total_tokens is None else max(1, left.total_tokens // shares)
        ),
        max_cost_usd=None if left.cost_usd is None else left.cost_usd / shares,
        deadline_seconds=None if left.seconds is None else max(left.seconds, 0.001),
        per_tool={tool: max(0, n) // children for tool, n in sorted(tools_left.items())},
    )
