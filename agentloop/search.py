"""Custom search attributes: find runs by phase, status, provider and tenant in Temporal's
visibility (`agentloop list`, the UI's search box).

They must be registered on the namespace: `agentloop dev` registers them on the embedded
server; on a real cluster run once, for each: `temporal operator search-attribute create
--name AgentPhase --type Keyword` (likewise AgentStatus, AgentProvider, AgentTenant;
`create_commands` spells them out). A run is indexed however it was started: `start_run` and
the CLI start it with them; a run started without them (a plain `start_workflow`) upserts
them as it starts, before its first model call, when the worker finds them registered on the
namespace (`agentloop.runtime.indexing` asks). On a
namespace without them no run is indexed, and `agentloop list` says so (naming the missing
attributes and the commands registering them) instead of listing nothing.

A value searched for is quoted into the query, and Temporal's query parser reads a '\\' as an
escape and a quote as the string's end: only what it reads back as written is searched for
(`quoted`), and a run is started only with a tenant and task family it can be found by."""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)

from agentloop.contract import AgentRunInput

AGENT_PHASE = SearchAttributeKey.for_keyword("AgentPhase")
AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_PROVIDER = SearchAttributeKey.for_keyword("AgentProvider")
AGENT_TENANT = SearchAttributeKey.for_keyword("AgentTenant")
ALL = (AGENT_PHASE, AGENT_STATUS, AGENT_PROVIDER, AGENT_TENANT)
"""What every run is indexed by (a namespace lacking any of them indexes no run)."""
AGENT_TASK_FAMILY = SearchAttributeKey.for_keyword("AgentTaskFamily")
"""A run's `task_family`, for `agentloop stats`: indexed where registered, and only for runs
that name one (a namespace without it indexes runs by `ALL` as before)."""
SCHEDULED_BY = SearchAttributeKey.for_keyword("TemporalScheduledById")
"""Temporal's own attribute on each run a schedule starts: the schedule's name (nothing to
register)."""
REGISTERED = (*ALL, AGENT_TASK_FAMILY)
"""What `agentloop dev` and `agentloop.testing` register."""


def initial(run_input: AgentRunInput) -> TypedSearchAttributes:
    """What a run is started with; the workflow keeps phase and status current."""
    pairs = [
        SearchAttributePair(AGENT_PHASE, "calling_model"),
        SearchAttributePair(AGENT_STATUS, "running"),
        SearchAttributePair(AGENT_PROVIDER, run_input.provider),
        SearchAttributePair(AGENT_TENANT, run_input.principal.tenant),
    ]
    if run_input.task_family is not None:
        pairs.append(SearchAttributePair(AGENT_TASK_FAMILY, run_input.task_family))
    return TypedSearchAttributes(pairs)


def dev_server_flags() -> list[str]:
    """`temporal server start-dev` flags registering them on the embedded server."""
    return [flag for key in REGISTERED for flag in ("--search-attribute", f"{key.name}=Keyword")]


def create_commands(names: Iterable[str], namespace: str) -> str:
    """The one shell line registering the attributes `names` on `namespace` (the Temporal CLI
    registers one attribute per command)."""
    return " && ".join(
        f"temporal operator search-attribute create --namespace {namespace} "
        f"--name {name} --type Keyword"
        for name in names
    )


SEARCHABLE_PUNCTUATION = " _-.:/@+#"
SEARCHABLE = "letters, digits, spaces and _ - . : / @ + #"
"""What a searched-for value may hold. Not '\\' (the parser takes it as an escape: a value
ending in one is malformed SQL), nor quotes (doubled, a quote inside a value is found; one
at its end is not) nor control characters (not found as written)."""


class Unsearchable(ValueError):
    """A value no visibility query can search for; the message names it and what may be."""


def unsearchable(field: str, value: str) -> str | None:
    """Why runs cannot be searched for by `value` (None: they can), naming `field`."""
    odd = sorted({c for c in value if not (c.isalnum() or c in SEARCHABLE_PUNCTUATION)})
    if not odd:
        return None
    shown = ", ".join(repr(c) for c in odd[:5]) + (", ..." if len(odd) > 5 else "")
    return f"{field}: {value!r} holds {shown}; it may hold only {SEARCHABLE}"


def run_input_problem(run_input: AgentRunInput) -> str | None:
    """Why a run of `run_input` could never be found by its tenant or task family (it is
    refused at start)."""
    problem = unsearchable("principal.tenant", run_input.principal.tenant)
    if problem is None and run_input.task_family is not None:
        problem = unsearchable("task_family", run_input.task_family)
    return problem


def quoted(field: str, value: str) -> str:
    """`value` as a string of a visibility query. Raises `Unsearchable` for a value the
    query could not say as written (rather than searching for another)."""
    problem = unsearchable(field, value)
    if problem is not None:
        raise Unsearchable(problem)
    return f"'{value}'"


def family_query(family: str) -> str:
    """A visibility query for the finished runs of a task family (each run of a chain that
    continued as new counts once: by its last run). Raises `Unsearchable`."""
    return (
        f"WorkflowType = 'AgentRun' AND {AGENT_TASK_FAMILY.name} = {quoted('family', family)}"
        " AND ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'"
    )


def list_query(
    *,
    phase: str | None = None,
    status: str | None = None,
    provider: str | None = None,
    tenant: str | None = None,
) -> str:
    """A visibility query for AgentRun runs matching every given attribute. Raises
    `Unsearchable`."""
    clauses = ["WorkflowType = 'AgentRun'"]
    if phase is not None and phase != "finished":
        # A run cancelled from outside keeps the phase it had: only running runs are in one.
        clauses.append("ExecutionStatus = 'Running'")
    for field, key, value in (
        ("phase", AGENT_PHASE, phase),
        ("status", AGENT_STATUS, status),
        ("provider", AGENT_PROVIDER, provider),
        ("tenant", AGENT_TENANT, tenant),
    ):
        if value is not None:
            clauses.append(f"{key.name} = {quoted(field, value)}")
    return " AND ".join(clauses)


def schedule_clause(schedule: str) -> str:
    """A visibility query's clause for the runs schedule `schedule` started. Raises
    `Unsearchable`."""
    return f"{SCHEDULED_BY.name} = {quoted('schedule', schedule)}"
