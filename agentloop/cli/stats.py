"""`agentloop stats FAMILY` and `run --limits-from FAMILY`: what a task family's finished runs
used, and the limits their completed runs suggest (`agentloop.family_stats`)."""

from __future__ import annotations

import argparse
import sys

from temporalio.client import Client

from agentloop.cli.output import CommandError, ExitCode, print_json
from agentloop.client import FamilyUnindexed, family_stats, limits_from
from agentloop.contract import AgentRunInput, Limits
from agentloop.task_families import Distribution, FamilyStats, GroupStats


async def show_stats(client: Client, args: argparse.Namespace) -> int:
    try:
        stats = await family_stats(client, args.family, limit=args.limit)
    except FamilyUnindexed as exc:
        print(f"agentloop stats: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.json:
        print_json(stats)
    else:
        print("\n".join(describe(stats)))
    return ExitCode.OK


async def with_learned_limits(
    client: Client, args: argparse.Namespace, run_input: AgentRunInput
) -> AgentRunInput:
    """`run_input` with the limits `--limits-from` FAMILY suggests (unchanged without it);
    limits given on the command line still win. Exit 2 when there is nothing to learn from."""
    if not args.limits_from:
        return run_input
    try:
        learned, source = await limits_from(client, args.limits_from)
    except ValueError as exc:
        raise CommandError(f"--limits-from: {exc}", ExitCode.USAGE) from None
    given = run_input.limits.model_dump(exclude_unset=True)
    limits = Limits.model_validate({**learned.model_dump(), **given})
    return run_input.model_copy(update={"limits": limits, "limits_source": source})


def describe(stats: FamilyStats) -> list[str]:
    lines = [f"task family {stats.family}: {stats.runs} finished runs"]
    groups = (
        ("completed", stats.completed),
        ("  of which verified (a completion check passed)", stats.verified),
        ("not completed", stats.not_completed),
    )
    for title, group in groups:
        lines += _group_lines(title, group)
    lines.append(f"completed unverified (no completion check): {stats.unverified}")
    lines.append(f"blocked (the model gave up): {stats.blocked}")
    lines.append(
        f"ended unverified (verification required, no check accepted): {stats.ended_unverified}"
    )
    if stats.without_result:
        lines.append(f"  without a result (failed at start, terminated): {stats.without_result}")
    lines.append("stop reasons:")
    lines += [f"  {n:>4}  {reason}" for reason, n in stats.stop_reasons.items()]
    if stats.suggested is None:
        lines.append("suggested limits: none (no run of the family completed)")
    else:
        limits = stats.suggested.model_dump(exclude_none=True)
        lines.append(f"suggested limits ({stats.source()}; writes held to their max):")
        lines += [f"  {key}: {value}" for key, value in limits.items()]
        lines.append(f"  apply: agentloop run TASK --limits-from {stats.family}")
    return lines


def _group_lines(title: str, group: GroupStats | None) -> list[str]:
    if group is None:
        return [f"{title}: none"]
    lines = [f"{title}: {group.runs} runs      p50 / p90 / p99 / max"]
    rows = [
        ("model calls", group.model_calls),
        ("tool calls", group.tool_calls),
        *((f"  {tool}", d) for tool, d in group.per_tool.items()),
        ("tokens", group.tokens),
        ("cost $", group.cost_usd),
        ("seconds", group.seconds),
    ]
    lines += [f"  {name:<18} {_figures(d)}" for name, d in rows]
    return lines


def _figures(d: Distribution) -> str:
    return " / ".join(f"{v:g}" for v in (d.p50, d.p90, d.p99, d.max))
