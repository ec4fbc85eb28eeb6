"""The client side: a Temporal client for agentloop's settings, starting a run, watching one.

Every client of agentloop's runs connects through `connect`, so all of them read and write
payloads the same way (encrypted when `AGENTLOOP_CODEC_KEYS` is set) and trace the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.converter import DataConverter
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from agentloop import search
from agentloop.contract import (
    DEFAULT_TASK_QUEUE,
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    Limits,
)
from agentloop.run_results import read_result
from agentloop.runtime import converter, tracing
from agentloop.runtime.codec import EncryptionCodec, encrypting_data_converter
from agentloop.runtime.config import Settings
from agentloop.runtime.indexing import missing_attributes, unregistered
from agentloop.runtime.start_signing import sign_start
from agentloop.task_families import FamilyStats, FinishedRun, summarize


def data_converter(settings: Settings) -> DataConverter:
    """The pydantic converter (reading what pydantic's JSON parser refuses, see
    `agentloop.runtime.converter`); with `AGENTLOOP_CODEC_KEYS` set, every payload encrypted
    (`agentloop.runtime.codec`). Raises `ConfigError` naming the variable when the keys are
    malformed."""
    ring = settings.codec_key_ring()
    if ring is None:
        return converter.data_converter
    return encrypting_data_converter(EncryptionCodec.from_ring(ring), converter.data_converter)


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client for `settings`; the worker, the CLI and the tests all connect here, so all of
    them read and write payloads the same way (encrypted when keys are configured) and trace
    the same way (`agentloop.runtime.tracing`: a worker built on this client inherits its
    interceptors, so they are never given to the worker a second time). `runtime`: Temporal's
    runtime for the client and its workers (`agentloop.runtime.metrics.metrics_runtime` for
    one serving metrics); unset, the process's default."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=data_converter(settings),
        api_key=settings.temporal_api_key,
        tls=settings.tls_config(),
        interceptors=tracing.interceptors(settings),
        runtime=runtime,
    )


CONNECT_TIMEOUT_SECONDS = 10.0


class StartupError(Exception):
    """What a command or a worker needs before it can start (Temporal, its namespace, the
    store) cannot be used; the message names the setting at fault and the fix."""


class TemporalUnreachable(StartupError):
    """No Temporal server answered at the configured address."""


async def connect_checked(
    settings: Settings,
    timeout_seconds: float = CONNECT_TIMEOUT_SECONDS,
    runtime: Runtime | None = None,
) -> Client:
    """`connect`, given `timeout_seconds` to answer: what the CLI and `agentloop worker`
    connect with. Raises `TemporalUnreachable` naming the address and how to fix it."""
    try:
        return await asyncio.wait_for(connect(settings, runtime), timeout_seconds)
    except (RuntimeError, TimeoutError) as exc:
        reason = str(exc) or f"no answer within {timeout_seconds:g} s"
        raise TemporalUnreachable(
            f"cannot reach Temporal at {settings.temporal_address}: {reason}\n"
            "start one with `agentloop dev`, or set TEMPORAL_ADDRESS"
        ) from None


async def start_run(
    client: Client,
    run_input: AgentRunInput,
    *,
    id: str,
    task_queue: str = DEFAULT_TASK_QUEUE,
    indexed: bool | None = None,
    principal_key: Ed25519PrivateKey | None = None,
    **options: Any,
) -> WorkflowHandle[Any, AgentRunResult]:
    """Start an `AgentRun` as the CLI does: its UI summary, its result type, and its search
    attributes (so `agentloop list` finds it). `indexed=None` indexes it when the namespace
    has agentloop's attributes registered and starts it unindexed otherwise; True insists.
    Starting twice with the same `id` while the first runs does not start a second run
    (Temporal raises `WorkflowAlreadyStartedError`). `options` go to `Client.start_workflow`.
    A run with `continue_from` must be given its `limits`, and its tenant and task family be
    searchable (`search.SEARCHABLE`): ValueError otherwise.
    `principal_key` (a starter's key, `agentloop.load_private_key`) signs the whole input for
    `id`, to be started within ten minutes and once (`agentloop.sign_start`): what workers with
    `AGENTLOOP_STARTER_KEYS` require."""
    problem = run_input.unbudgeted_continuation() or search.run_input_problem(run_input)
    if problem:
        raise ValueError(problem)
    if principal_key is not None:
        signature = sign_start(run_input, principal_key, workflow_id=id)
        run_input = run_input.model_copy(update={"principal_signature": signature})
    start = dict(
        id=id,
        task_queue=task_queue,
        result_type=AgentRunResult,
        static_summary=run_input.summary(),
        **options,
    )
    if indexed is False:
        return await client.start_workflow(WORKFLOW_NAME, run_input, **start)
    try:
        return await client.start_workflow(
            WORKFLOW_NAME, run_input, search_attributes=search.initial(run_input), **start
        )
    except RPCError as exc:
        if indexed or not _attributes_unregistered(exc):
            raise
    return await client.start_workflow(WORKFLOW_NAME, run_input, **start)


def _attributes_unregistered(exc: RPCError) -> bool:
    """The server refused the start because the namespace lacks agentloop's attributes."""
    return exc.status == RPCStatusCode.INVALID_ARGUMENT and "search attribute" in str(exc).lower()


class FamilyUnindexed(ValueError):
    """The namespace lacks the `AgentTaskFamily` search attribute: no run is found by it."""


async def family_stats(client: Client, family: str, *, limit: int = 1_000) -> FamilyStats:
    """What the finished runs of `family` (the newest `limit`) used, and the limits their
    completed runs suggest (`FamilyStats.suggested`). Raises `FamilyUnindexed` on a
    namespace without the `AgentTaskFamily` attribute."""
    missing = await missing_attributes(client, keys=[search.AGENT_TASK_FAMILY])
    if missing:
        server = client.service_client.config.target_host
        raise FamilyUnindexed(unregistered(missing, client.namespace, server))
    runs: list[FinishedRun] = []
    async for execution in client.list_workflows(search.family_query(family), limit=limit):
        handle = client.get_workflow_handle(
            execution.id, run_id=execution.run_id, result_type=AgentRunResult
        )
        try:
            result: AgentRunResult | None = await read_result(handle, follow_runs=False)
        except WorkflowFailureError:
            result = None
        seconds = await _chain_seconds(client, handle, execution)
        # Carried over the chain too, like the deadline it is taken out of.
        paused = result.paused_seconds if result is not None else 0.0
        runs.append(
            FinishedRun(workflow_id=execution.id, result=result, seconds=max(0.0, seconds - paused))
        )
    return summarize(family, runs)


async def _chain_seconds(
    client: Client, handle: WorkflowHandle[Any, Any], execution: WorkflowExecution
) -> float:
    """From the start of the chain's first run to the close of its last (`execution`, whose
    `handle` this is): a run that continued as new is one run to its family, and its deadline
    counts from that first start. (A listing does not say which run was first; a description
    does.) Where the first run is no longer kept, from the last run's own start."""
    start, close = execution.start_time, execution.close_time
    with contextlib.suppress(RPCError):
        first = first_run_of(await handle.describe())
        if first != execution.run_id:
            first_run = client.get_workflow_handle(execution.id, run_id=first)
            start = (await first_run.describe()).start_time
    if start is None or close is None:
        return 0.0
    return (close - start).total_seconds()


def first_run_of(description: WorkflowExecutionDescription) -> str:
    """The first run of the chain a description is of (its own when it never continued)."""
    return description.raw_info.first_run_id or description.run_id


async def limits_from(client: Client, family: str) -> tuple[Limits, str]:
    """The limits `family`'s completed runs suggest, and what a run records as their source
    (`AgentRunInput.limits_source`). Raises ValueError when no run of it completed."""
    stats = await family_stats(client, family)
    if stats.suggested is None:
        raise ValueError(
            f"task family {family!r}: no completed run to learn limits from ({stats.runs} runs)"
        )
    return stats.suggested, stats.source()
