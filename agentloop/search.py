"""Custom search attributes: find runs by phase, status, provider and tenant in Temporal's
visibility (`agentloop list`, the UI's search box).

They must be registered on the namespace: `agentloop dev` registers them on the embedded
server; on a real cluster run once, for each: `temporal operator search-attribute create
--name AgentPhase --type Keyword` (likewise AgentStatus, AgentProvider, AgentTenant;
`create_commands` spells them out). A run is indexed however it was started: `start_run` and
the CLI start it with them; a run started without them (a plain `start_workflow`) upserts
them as it starts, before its first model call, when the worker finds them registered on the
namespace (feature `indexed-however-started`; `agentloop.runtime.indexing` asks). On a
namespace without them no run is indexed, and `agentloop list` says so (naming the missing
attributes and the commands registering them) instead of listing nothing."""

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


def family_query(family: str) -> str:
    """A visibility query for the finished runs of a task family (each run of a chain that
    continued as new counts once: by its last run)."""
    quoted = family.replace("'", "")
    return (
        f"WorkflowType = 'AgentRun' AND {AGENT_TASK_FAMILY.name} = '{quoted}'"
        " AND ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'"
    )


def list_query(
    *,
    phase: str | None = None,
    status: str | None = None,
    provider: str | None = None,
    tenant: str | None = None,
) -> str:
    """A visibility query for AgentRun runs matching every given attribute."""
    clauses = ["WorkflowType = 'AgentRun'"]
    if phase is not None and phase != "finished":
        # A run cancelled from outside keeps the phase it had: only running runs are in one.
        clauses.append("ExecutionStatus = 'Running'")
    for key, value in (
        (AGENT_PHASE, phase),
        (AGENT_STATUS, status),
        (AGENT_PROVIDER, provider),
        (AGENT_TENANT, tenant),
    ):
        if value is not None:
            quoted = value.replace("'", "")
            clauses.append(f"{key.name} = '{quoted}'")
    return " AND ".join(clauses)
