"""Wiring only: a Temporal client with the pydantic converter (and the tracing interceptor when
`AGENTLOOP_OTEL` asks for it), and a worker on `agent-loop` with the built-in tools and the
team's tool modules. `worker_parts` hands out AgentRun and its activities for a worker of
your own; `running_worker` is that worker; `serve` runs one until a signal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation, WorkflowActivationJob
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    Interceptor,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agentloop import stream_seals
from agentloop.activities.approvals import ApprovalActivities
from agentloop.activities.describe import RunDescriptions
from agentloop.activities.model import ModelActivities
from agentloop.activities.notices import NoticeActivities
from agentloop.activities.runs import RunActivities
from agentloop.activities.tools import ToolActivities
from agentloop.activities.verify import VerifierActivities
from agentloop.adapters import AdapterFactory
from agentloop.client import StartupError, connect_checked
from agentloop.mcp.listing import name_clashes
from agentloop.mcp.source import McpServers
from agentloop.policies.bounds import MAX_UPDATE_REQUEST_BYTES
from agentloop.pricing import PriceTable
from agentloop.redaction import redactor_names
from agentloop.runtime import queue_peers, tracing
from agentloop.runtime.audit import (
    DEFAULT_REDACT_FIELDS,
    Redactor,
    configure_logging,
    mask_url,
    settings_secrets,
)
from agentloop.runtime.config import VARIABLES, ConfigError, Settings
from agentloop.runtime.config_checks import SandboxMode
from agentloop.runtime.indexing import Registration
from agentloop.runtime.mcp_config import McpServerConfig
from agentloop.runtime.metrics import (
    MetricsInterceptor,
    metrics_runtime,
    otlp_telemetry,
    watch_waiting,
)
from agentloop.runtime.notice_routes import notice_timers
from agentloop.store import UNUSABLE, Store, open_store, why_unusable
from agentloop.tools.plugins import PluginError, Toolbox, load_toolbox
from agentloop.waiting import memo_key
from agentloop.workflows.agent_run import AgentRun

log = logging.getLogger(__name__)


PRODUCTION_BANNER = "; production: signed approvals, encrypted history, shared stream key"
"""What a production worker's ready line adds (`Settings.production_problems` held)."""


def workflow_runner(sandbox: SandboxMode) -> WorkflowRunner:
    """How AgentRun's code is run, by workers and by replay (`AGENTLOOP_WORKFLOW_SANDBOX`).

    Off by default. All of AgentRun's logic is in modules the sandbox passes through (so that
    it is not imported afresh for every run), and the sandbox restricts nothing a
    passed-through module calls: it guarded one thin module, at 4-9 ms of worker CPU a turn
    (mostly code the SDK compiles and runs in the sandbox once per payload). What keeps the
    workflow deterministic instead: `tests/loop/test_workflow_determinism.py` checks every module
    the workflow runs, statically, and every stored history replays in CI both unsandboxed
    and in the sandbox."""
    inner = SandboxedWorkflowRunner() if sandbox == "on" else UnsandboxedWorkflowRunner()
    return BoundedUpdatesRunner(inner)


class BoundedUpdatesRunner(WorkflowRunner):
    """`inner`, except that an update too large to answer never reaches the workflow.

    Temporal's answer to an update, accepted or rejected, carries the whole request back, and
    a task completion holding one over the server's payload limit fails; the server hands the
    same update to every retry, so every workflow task of the run failed for good (issue #33:
    gRPC lets 4 MiB through, the payload limit is 2 MiB). An update over
    `MAX_UPDATE_REQUEST_BYTES` is taken out of its activation instead: the task completes
    without answering it, and Temporal rejects it itself (`UnprocessedUpdate`), echoing
    nothing and leaving nothing in history. A replayed update is never taken out: it is in
    history, so it was answered."""

    def __init__(self, inner: WorkflowRunner) -> None:
        self.inner = inner

    def prepare_workflow(self, defn: Any) -> None:
        self.inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _BoundedUpdates(self.inner.create_instance(det))

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self.inner.set_worker_level_failure_exception_types(types)


class _BoundedUpdates(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance) -> None:
        self._inner = inner

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        kept = [job for job in act.jobs if not _unanswerable(job)]
        if len(kept) < len(act.jobs):
            log.warning(
                "an update over %d bytes to workflow %s left unanswered: Temporal rejects it",
                MAX_UPDATE_REQUEST_BYTES,
                self._inner.get_info().workflow_id,
            )
            del act.jobs[:]
            act.jobs.extend(kept)
        return self._inner.activate(act)

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


def _unanswerable(job: WorkflowActivationJob) -> bool:
    return (
        job.HasField("do_update")
        and job.do_update.run_validator
        and job.do_update.ByteSize() > MAX_UPDATE_REQUEST_BYTES
    )


@dataclass(frozen=True)
class WorkerParts:
    """What an agentloop worker runs, for a `temporalio.worker.Worker` of your own:

        async with worker_parts(client, settings, tools=["my_team.tools"]) as parts:
            worker = Worker(client, task_queue=settings.task_queue, **parts.worker_kwargs())

    Model calls, tool executions and the rest all run on that task queue; add activities of
    your own beside `parts.activities` as you like."""

    workflows: list[type]
    activities: list[Callable[..., Any]]
    workflow_runner: WorkflowRunner
    toolbox: Toolbox

    max_cached_workflows: int = 1_000
    sticky_timeout_seconds: float = 10.0
    max_concurrent_activities: int | None = None
    max_concurrent_workflow_tasks: int | None = None
    interceptors: tuple[Interceptor, ...] = (MetricsInterceptor(),)
    """agentloop's metrics, on the client's runtime meter (`agentloop.runtime.metrics`)."""

    def worker_kwargs(self) -> dict[str, Any]:
        """The slot counts only when set: unset, Temporal's defaults apply, and a `tuner` of
        your own may be passed beside these (Temporal refuses both at once)."""
        slots = {
            "max_concurrent_activities": self.max_concurrent_activities,
            "max_concurrent_workflow_tasks": self.max_concurrent_workflow_tasks,
        }
        return {
            "workflows": self.workflows,
            "activities": self.activities,
            "workflow_runner": self.workflow_runner,
            "max_cached_workflows": self.max_cached_workflows,
            "interceptors": list(self.interceptors),
            "sticky_queue_schedule_to_start_timeout": timedelta(
                seconds=self.sticky_timeout_seconds
            ),
            **{name: count for name, count in slots.items() if count is not None},
        }


def tool_modules(settings: Settings, tools: Sequence[str] | None = None) -> list[str]:
    """The tool modules a worker loads: `tools` (e.g. `--tools`) after `AGENTLOOP_TOOLS`."""
    return list(dict.fromkeys([*settings.tool_modules(), *(tools or ())]))


def load_worker_toolbox(settings: Settings, tools: Sequence[str] | None = None) -> Toolbox:
    """The built-ins and the tool modules (`tool_modules`), checked against the worker's MCP
    servers; raises `PluginError` (or `ConfigError` for a bad `AGENTLOOP_MCP_SERVERS`)."""
    toolbox = load_toolbox(tool_modules(settings, tools))
    _check_mcp_names(toolbox, settings.mcp_server_configs())
    return toolbox


def _check_mcp_names(toolbox: Toolbox, servers: Mapping[str, McpServerConfig]) -> None:
    clashes = name_clashes(toolbox.registry.names(), servers)
    if clashes:
        raise PluginError(f"{'; '.join(clashes)}: rename one of them")


def tool_effects(toolbox: Toolbox, servers: Mapping[str, McpServerConfig]) -> list[str]:
    """What a worker says of its tools as it starts, one line each, as each tool source
    describes them: the effect, and for a write whether its outcome can be looked up (without
    a lookup, a write whose answer is lost pauses its run `awaiting_reconciliation` until an
    operator resolves it). An MCP server's tools are listed when a run first names them: its
    line says how they are taken."""
    rows = toolbox.registry.routing(McpServers(servers)).describe()
    width = max((len(row.name) for row in rows), default=0)
    return [f"{row.name:<{width}}  {row.effect:<5}  {row.note}".rstrip() for row in rows]


def mcp_servers(servers: Mapping[str, McpServerConfig], store: Store) -> McpServers:
    """The worker's MCP servers as a tool source, with its connections to them (none opens
    before a run needs it); `store` keeps the handles of writes the servers made tasks."""
    if not servers:
        return McpServers(servers)
    from agentloop.mcp.pool import McpPool
    from agentloop.mcp.tools import McpTools

    return McpServers(servers, McpTools(McpPool(servers), store))


@asynccontextmanager
async def worker_parts(
    client: Client,
    settings: Settings,
    tools: Sequence[str] | Toolbox | None = None,
) -> AsyncIterator[WorkerParts]:
    """AgentRun and its activities for `client`, with the built-in tools and the tool modules
    `tools` names (default: `settings.tools`, `AGENTLOOP_TOOLS`). Their dependencies, the store
    and the provider clients are open for as long as the context is.

    Raises `PluginError` (before anything opens) when a tool module cannot be loaded, and
    `ConfigError` when production settings lack what production needs
    (`Settings.production_problems`)."""
    settings.check_production()
    install_stream_key(settings)
    principals = settings.principal_signatures()
    toolbox = tools if isinstance(tools, Toolbox) else load_toolbox(tool_modules(settings, tools))
    servers = settings.mcp_server_configs()
    _check_mcp_names(toolbox, servers)  # once, however the toolbox came
    store = open_store(settings.store_url, settings.codec_key_ring())
    adapters = AdapterFactory(settings.provider_endpoints())
    mcp = mcp_servers(servers, store)
    try:
        async with toolbox.opened(settings) as opened:
            prices = PriceTable.with_overrides(settings.pricing_file)
            model = ModelActivities(
                store,
                adapters,
                prices,
                Redactor(settings_secrets(settings)),
                publish=settings.publish_events == "on",
            )
            approver_keys = settings.approvers()
            webhooks = settings.notice_webhooks()
            notices = NoticeActivities(webhooks, settings.notify_secret or "", settings.inbox_url)
            tool_activities = ToolActivities(
                opened, store, sources=[mcp], redact=redactor_names(settings.redact)
            )
            descriptions = RunDescriptions(
                opened,
                Registration(client),
                sources=[mcp],
                approvals_signed=approver_keys.signing,
                operators=settings.operator_names(),
                prices=prices,
                principals=principals,
                nonces=store,
                notify=notices.sends,
                notice_timers=notice_timers(webhooks),
                failed_runs_complete=settings.failed_runs == "complete",
                verification_required=settings.requires_verification,
            )
            runs = RunActivities(client)
            verifiers = VerifierActivities(opened, store)
            approvals = ApprovalActivities(approver_keys)
            yield WorkerParts(
                workflows=[AgentRun],
                activities=[
                    *model.activities(),
                    descriptions.describe_run,
                    tool_activities.check_precondition,
                    tool_activities.run_tool,
                    tool_activities.lookup_outcome,
                    tool_activities.frame_team_answer,
                    tool_activities.read_team_outcome,
                    runs.load_previous_run,
                    verifiers.verify_completion,
                    approvals.check_approval,
                    approvals.check_resolution,
                    approvals.check_word,
                    notices.notify_waiting,
                ],
                workflow_runner=workflow_runner(settings.workflow_sandbox),
                toolbox=toolbox,
                max_cached_workflows=settings.max_cached_workflows,
                sticky_timeout_seconds=settings.sticky_timeout_seconds,
                max_concurrent_activities=settings.max_concurrent_activities,
                max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
            )
    finally:
        await mcp.close()
        await adapters.close()
        await store.close()


def install_stream_key(settings: Settings) -> None:
    """The key this process's model calls seal their stream items with and its runs check
    them with: `AGENTLOOP_STREAM_KEY`, or, when unset, one drawn once per process (so every
    worker of one process agrees: enough for development's single worker process; a
    production worker has the key, `Settings.production_problems`)."""
    if settings.stream_key:
        stream_seals.use_key(stream_seals.derived_key(settings.stream_key))
    elif stream_seals.worker_key() is None:
        stream_seals.use_key(secrets.token_bytes(32))


@asynccontextmanager
async def running_worker(
    client: Client,
    settings: Settings,
    tools: Sequence[str] | Toolbox | None = None,
) -> AsyncIterator[Worker]:
    """A worker polling `settings.task_queue` for as long as the context is open (see
    `worker_parts` for `tools`)."""
    async with worker_parts(client, settings, tools) as parts:
        served = tool_effects(parts.toolbox, settings.mcp_server_configs())
        named = queue_peers.identity(queue_peers.tool_set_digest(served))
        worker = Worker(
            client, task_queue=settings.task_queue, identity=named, **parts.worker_kwargs()
        )
        async with worker, _waiting_watched(client, settings):
            await queue_peers.warn_of_other_tool_sets(client, settings.task_queue, named)
            yield worker


@asynccontextmanager
async def _waiting_watched(client: Client, settings: Settings) -> AsyncIterator[None]:
    """With metrics on, the runs waiting for people counted for as long as the worker runs."""
    if settings.metrics_port is None and settings.metrics_otlp_url is None:
        yield
        return
    runtime = client.service_client.config.runtime or Runtime.default()
    watch = asyncio.create_task(
        watch_waiting(
            client,
            runtime.metric_meter,
            settings.metrics_poll_seconds,
            memo_key(stream_seals.worker_key()),
        )
    )
    try:
        yield
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


async def check_store(settings: Settings) -> None:
    """Open the store and read from it once; raises `StartupError` naming
    AGENTLOOP_STORE_URL when that fails (a folder that cannot be made, a file that is not a
    database, a PostgreSQL that does not answer), instead of every run's first model call."""
    try:
        store = open_store(settings.store_url)
        try:
            await store.get_node("")
        finally:
            await store.close()
    except UNUSABLE as exc:
        name = VARIABLES["store_url"].name
        raise StartupError(
            f"{name}={mask_url(settings.store_url)!r}: the store cannot be used: "
            f"{why_unusable(exc)}"
        ) from None


async def check_namespace(client: Client, settings: Settings) -> None:
    """Raises `StartupError` when the server does not know the worker's namespace."""
    request = DescribeNamespaceRequest(namespace=settings.temporal_namespace)
    try:
        await client.workflow_service.describe_namespace(request)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            return  # not ours to judge (e.g. not allowed to describe it): the worker tries
        namespace = settings.temporal_namespace
        raise StartupError(
            f"TEMPORAL_NAMESPACE={namespace!r}: no such namespace on "
            f"{settings.temporal_address}: set it to one that exists, or create it "
            f"(temporal operator namespace create --namespace {namespace})"
        ) from None


async def serve(settings: Settings, toolbox: Toolbox) -> None:
    """Run a worker until SIGINT or SIGTERM. Before it polls, raises `StartupError` when
    the store, Temporal or the namespace cannot be used (`TemporalUnreachable` for Temporal),
    and `PluginError` when a tool module's dependencies do not open."""
    configure_logging(
        level=settings.log_level,
        fmt="json",
        secrets=settings_secrets(settings),
        redact_fields=DEFAULT_REDACT_FIELDS,
    )
    await check_store(settings)
    client = await connect_checked(settings, runtime=serving_metrics(settings))
    await check_namespace(client, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with running_worker(client, settings, toolbox):
            effects = tool_effects(toolbox, settings.mcp_server_configs())
            print(
                f"agentloop worker polling task queue {settings.task_queue!r} "
                f"on {settings.temporal_address}"
                f"{PRODUCTION_BANNER if settings.env == 'production' else ''}"
                f"{metrics_banner(settings)}; tools:\n"
                + "\n".join(f"  {line}" for line in effects),
                flush=True,
            )
            await stop.wait()
    finally:
        tracing.flush(settings)


def serving_metrics(settings: Settings) -> Runtime | None:
    """The Temporal runtime exporting the worker's metrics: serving them on
    `AGENTLOOP_METRICS_PORT`, or pushing them to `AGENTLOOP_METRICS_OTLP_URL` (None: neither
    is set). Raises `ConfigError` when both are (one exporter per runtime), `StartupError`
    naming the setting when the port cannot be bound."""
    port, otlp = VARIABLES["metrics_port"].name, VARIABLES["metrics_otlp_url"].name
    if settings.metrics_port is not None and settings.metrics_otlp_url is not None:
        raise ConfigError(
            [f"{port} and {otlp} are both set: the metrics go to one exporter, unset one"]
        )
    if settings.metrics_otlp_url is not None:
        return Runtime(telemetry=otlp_telemetry(settings.metrics_otlp_url))
    if settings.metrics_port is None:
        return None
    try:
        return metrics_runtime(settings.metrics_port)
    except ValueError as exc:  # what the SDK raises when its exporter cannot listen
        raise StartupError(f"{port}={settings.metrics_port}: {exc}") from None


def metrics_banner(settings: Settings) -> str:
    """What a ready line says of the metrics endpoint, when there is one."""
    if settings.metrics_otlp_url is not None:
        return f"; metrics pushed to {mask_url(settings.metrics_otlp_url)}"
    if settings.metrics_port is None:
        return ""
    return f"; metrics on http://127.0.0.1:{settings.metrics_port}/metrics"


def main() -> None:
    """`python worker.py` (and `python -m agentloop.worker`): a worker from the configuration;
    exit 2 on a bad configuration (production settings without what production needs), a
    tool module that cannot be loaded or opened, or a Temporal, namespace or store that cannot
    be used, before polling."""
    try:
        settings = Settings.load()
        settings.check_production()
        toolbox = load_worker_toolbox(settings)
        asyncio.run(serve(settings, toolbox))
    except (ConfigError, PluginError, StartupError) as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
