"""Limits learned from a task family (seed 001: start from the distribution of a task family,
not from a guess). Pure: what the finished runs of a family used, completed runs apart from the
others (verified completions and blocked runs counted apart), and the limits their tail
suggests (the verified completions', when there are any). `agentloop.client.family_stats`
reads the runs; `agentloop stats FAMILY` prints this."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field

from agentloop.contract import AgentRunResult, Limits

HEADROOM = 1.25
"""Suggested limits are the completed runs' p99 times this (rounded up), reads included."""
DEADLINE_HEADROOM = 1.5
"""The working time varies more than the counts: more room for the deadline."""
RESERVATION_ROOM = 4
"""A token or cost cap is at least this many times the most a completed run used: each model
call is reserved by a bound on its input (the first by the bytes of its request, 3 to 4
times its tokens), so a cap at the tail alone would stop runs that fit."""


class FinishedRun(BaseModel):
    workflow_id: str
    result: AgentRunResult | None = None
    """None: the run ended without a result (failed at start, terminated)."""
    seconds: float = 0.0
    """Its working time: from start to close, less the time it waited for people."""


class Distribution(BaseModel):
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        ordered = sorted(values) or [0.0]
        return cls(
            p50=_rank(ordered, 0.50),
            p90=_rank(ordered, 0.90),
            p99=_rank(ordered, 0.99),
            max=ordered[-1],
        )


class GroupStats(BaseModel):
    runs: int
    model_calls: Distribution
    tool_calls: Distribution
    per_tool: dict[str, Distribution] = Field(default_factory=dict)
    tokens: Distribution
    cost_usd: Distribution
    seconds: Distribution


class FamilyStats(BaseModel):
    family: str
    runs: int
    completed: GroupStats | None = None
    """Every completed run, verified or not."""
    verified: GroupStats | None = None
    """The completed runs a completion check verified (what limits are learned from, when
    there are any)."""
    unverified: int = 0
    """Completed runs nothing verified (no `completion_check`): the model stopped asking for
    tools, which is no evidence the task was done."""
    not_completed: GroupStats | None = None
    blocked: int = 0
    """Runs that stopped `blocked`: the model gave up (or answered nothing); also counted in
    `not_completed`."""
    ended_unverified: int = 0
    """Runs that ended `unverified`: they required verification and no completion check
    accepted their answer; also counted in `not_completed`."""
    without_result: int = 0
    """Runs that ended without a result (not in either group)."""
    stop_reasons: dict[str, int] = Field(default_factory=dict)
    """`status: stop cause` -> how many runs (the status alone for a run from before causes)."""
    writes: list[str] = Field(default_factory=list)
    """The tools that wrote (their suggested limit is the most any completed run made)."""
    suggested: Limits | None = None
    """None: no run of the family completed, so nothing to learn a limit from."""

    def source(self) -> str:
        """What a run started with the suggestion records as `limits_source`."""
        if self.verified is not None:
            learned = f"{self.verified.runs} verified completed"
        else:
            learned = f"{self.completed.runs if self.completed else 0} completed (none verified)"
        return f"agentloop stats {self.family}: {learned} of {self.runs} runs"


def summarize(family: str, runs: Sequence[FinishedRun]) -> FamilyStats:
    with_result = [run for run in runs if run.result is not None]
    completed = [run for run in with_result if _result(run).status == "completed"]
    verified = [run for run in completed if _result(run).verified]
    others = [run for run in with_result if _result(run).status != "completed"]
    reasons = Counter(_stopped(_result(run)) for run in with_result)
    writes = sorted(
        {c.tool for run in with_result for c in _result(run).calls if c.idempotency_key}
    )
    stats = FamilyStats(
        family=family,
        runs=len(runs),
        completed=_group(completed),
        verified=_group(verified),
        unverified=len(completed) - len(verified),
        not_completed=_group(others),
        blocked=sum(1 for run in others if _result(run).status == "blocked"),
        ended_unverified=sum(1 for run in others if _result(run).status == "unverified"),
        without_result=len(runs) - len(with_result),
        stop_reasons=dict(reasons.most_common()),
        writes=writes,
    )
    learned_from = stats.verified or stats.completed
    if learned_from is not None:
        stats.suggested = suggested_limits(learned_from, writes)
    return stats


def _stopped(result: AgentRunResult) -> str:
    """What `stop_reasons` counts a run under: its status and stop cause, both typed."""
    return f"{result.status}: {result.stop_cause}" if result.stop_cause else result.status


def suggested_limits(completed: GroupStats, writes: Sequence[str]) -> Limits:
    """From the completed runs' tail: their p99 with `HEADROOM` (tokens and cost at least
    `RESERVATION_ROOM` times their max); a tool that writes gets the most any completed run
    made of it, no more (a write beyond what tasks of the family needed is the one worth
    stopping for)."""
    per_tool = {
        tool: int(d.max) if tool in writes else _room(d.p99)
        for tool, d in sorted(completed.per_tool.items())
    }
    tokens = max(completed.tokens.p99 * HEADROOM, completed.tokens.max * RESERVATION_ROOM)
    cost = max(completed.cost_usd.p99 * HEADROOM, completed.cost_usd.max * RESERVATION_ROOM)
    return Limits(
        max_model_calls=max(1, _room(completed.model_calls.p99)),
        max_tool_calls=_room(completed.tool_calls.p99),
        max_total_tokens=math.ceil(tokens) if tokens > 0 else None,
        max_cost_usd=round(cost, 6) if cost > 0 else None,
        deadline_seconds=max(1.0, math.ceil(completed.seconds.p99 * DEADLINE_HEADROOM)),
        per_tool=per_tool,
    )


def _group(runs: Sequence[FinishedRun]) -> GroupStats | None:
    if not runs:
        return None
    tools = sorted({c.tool for run in runs for c in _result(run).calls if c.attempts > 0})
    per_run = [Counter(c.tool for c in _result(run).calls if c.attempts > 0) for run in runs]
    usages = [_result(run).usage for run in runs]
    return GroupStats(
        runs=len(runs),
        model_calls=Distribution.of([u.model_calls for u in usages]),
        tool_calls=Distribution.of([u.tool_calls for u in usages]),
        per_tool={tool: Distribution.of([counts[tool] for counts in per_run]) for tool in tools},
        tokens=Distribution.of([u.input_tokens + u.output_tokens for u in usages]),
        cost_usd=Distribution.of([u.cost_usd for u in usages]),
        seconds=Distribution.of([run.seconds for run in runs]),
    )


def _rank(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: a value some run really had."""
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


def _room(value: float) -> int:
    return math.ceil(value * HEADROOM)


def _result(run: FinishedRun) -> AgentRunResult:
    assert run.result is not None
    return run.result
