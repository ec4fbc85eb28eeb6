"""The runs waiting for people as Temporal's visibility lists them, and what their memos say
they wait for (when a worker sealed them): what the inbox lists and the metrics poll ages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from pydantic import ValidationError
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client

from agentloop import search
from agentloop.contract import WORKFLOW_NAME
from agentloop.waiting import (
    MAX_WAITING_MEMO_BYTES,
    WAITING_MEMO,
    WAITING_PHASES,
    WaitingMemo,
    vouched,
)

PAGE_SIZE = 1_000
"""Visibility records read per request (every page is read)."""
MAX_MEMO_READ_BYTES = 4 * MAX_WAITING_MEMO_BYTES
"""A memo under `WAITING_MEMO` larger than this was not written by a run (runs write at most
`MAX_WAITING_MEMO_BYTES`, a codec may add to it): it is not read, the run not listed."""


def any_of(key: str, field: str, values: Sequence[str]) -> str:
    return "(" + " OR ".join(f"{key} = {search.quoted(field, v)}" for v in values) + ")"


def tenant_clause(tenants: Sequence[str] | None) -> str:
    """`tenants` None: every tenant; none searchable: a clause no run matches (a run is
    started only with a tenant it can be found by, `search.run_input_problem`)."""
    if tenants is None:
        return ""
    searchable = [t for t in tenants if search.unsearchable("tenant", t) is None]
    if not searchable:
        return " AND WorkflowId = ''"
    return " AND " + any_of(search.AGENT_TENANT.name, "tenant", searchable)


def waiting_query(tenants: Sequence[str] | None) -> str:
    return (
        f"WorkflowType = {search.quoted('type', WORKFLOW_NAME)} AND ExecutionStatus = 'Running'"
        + " AND "
        + any_of(search.AGENT_PHASE.name, "phase", list(WAITING_PHASES))
        + tenant_clause(tenants)
    )


async def waiting_runs(
    client: Client, tenants: Sequence[str] | None
) -> AsyncIterator[WorkflowExecutionInfo]:
    """The visibility records of the waiting runs, page by page to the last, as Temporal
    sends them: `Client.list_workflows` would decode every search attribute of every run,
    which costs more than the list itself for a thousand runs, and the inbox reads only the
    memo."""
    token = b""
    while True:
        page = await client.workflow_service.list_workflow_executions(
            ListWorkflowExecutionsRequest(
                namespace=client.namespace,
                query=waiting_query(tenants),
                page_size=PAGE_SIZE,
                next_page_token=token,
            ),
            retry=True,
        )
        for info in page.executions:
            yield info
        token = page.next_page_token
        if not token:
            return


async def memo_of(
    client: Client, key: bytes | None, info: WorkflowExecutionInfo
) -> WaitingMemo | None:
    """What the run's memo says it waits for, when a worker sealed it under `key` for this
    workflow (`waiting.vouched`) and it names this run; else None."""
    raw = info.memo.fields.get(WAITING_MEMO)
    if key is None or raw is None or raw.ByteSize() > MAX_MEMO_READ_BYTES:
        return None
    try:
        [value] = await client.data_converter.decode([raw])
        if not vouched(key, info.execution.workflow_id, value):
            return None
        memo = WaitingMemo.model_validate(value)
    # Whatever a memo holds that does not decode (a starter may set any) is as good as none.
    except (ValidationError, ValueError, TypeError, KeyError, RuntimeError):
        return None
    return memo if memo.run_id == info.execution.run_id else None
