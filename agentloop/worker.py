"""Wiring only: a Temporal client with the pydantic converter (and the tracing interceptor when
`AGENTLOOP_OTEL` asks for it), and a worker on `agent-loop`."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agentloop.activities.model import ModelActivities
from agentloop.activities.runs import RunActivities
from agentloop.activities.tools import ToolActivities
from agentloop.activities.verify import VerifierActivities
from agentloop.adapters import AdapterFactory
from agentloop.pricing import PriceTable
from agentloop.runtime import tracing
from agentloop.runtime.audit import DEFAULT_REDACT_FIELDS, configure_logging, settings_secrets
from agentloop.runtime.codec import EncryptionCodec, encrypting_data_converter
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.config_checks import SandboxMode
from agentloop.store import Store, open_store
from agentloop.tools.http import ServiceClient
from agentloop.tools.registry import default_registry
from agentloop.workflows.agent_run import AgentRun


def data_converter(settings: Settings) -> DataConverter:
    """The pydantic converter; with `AGENTLOOP_CODEC_KEYS` set, every payload encrypted
    (`agentloop.runtime.codec`). Raises `ConfigError` naming the variable when the keys are
    malformed."""
    ring = settings.codec_key_ring()
    if ring is None:
        return pydantic_data_converter
    return encrypting_data_converter(EncryptionCodec.from_ring(ring))


def workflow_runner(sandbox: SandboxMode) -> WorkflowRunner:
    """How AgentRun's code is run, by workers and by replay (`AGENTLOOP_WORKFLOW_SANDBOX`).

    Off by default. All of AgentRun's logic is in modules the sandbox passes through (so that
    it is not imported afresh for every run), and the sandbox restricts nothing a
    passed-through module calls: it guarded one thin module, at 4-9 ms of worker CPU a turn
    (mostly code the SDK compiles and runs in the sandbox once per payload). What keeps the
    workflow deterministic instead: `tests/test_workflow_determinism.py` checks every module
    the workflow runs, statically, and every stored history replays in CI both unsandboxed
    and in the sandbox."""
    return SandboxedWorkflowRunner() if sandbox == "on" else UnsandboxedWorkflowRunner()


async def connect(settings: Settings) -> Client:
    """A client for `settings`; the worker, the CLI and the tests all connect here, so all of
    them read and write payloads the same way (encrypted when keys are configured) and trace
    the same way (`agentloop.runtime.tracing`: a worker built on this client inherits its
    interceptors, so they are never given to the worker a second time)."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=data_converter(settings),
        api_key=settings.temporal_api_key,
        tls=settings.tls_config(),
        interceptors=tracing.interceptors(settings),
    )


@dataclass(frozen=True)
class ToolServices:
    """What example tools reach: the example service standing in for systems of record."""

    example: ServiceClient
    store: Store
    """Where `read_artifact` finds large tool outputs."""


@asynccontextmanager
async def running_worker(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    """A worker polling `settings.task_queue` for as long as the context is open."""
    store = open_store(settings.store_url)
    timeout = aiohttp.ClientTimeout(total=settings.tool_http_timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        services = ToolServices(
            example=ServiceClient(settings.example_service_url, session), store=store
        )
        adapters = AdapterFactory(settings.provider_endpoints())
        model = ModelActivities(store, adapters, PriceTable.with_overrides(settings.pricing_file))
        registry = default_registry()
        tools = ToolActivities(registry, services)
        runs = RunActivities(client)
        verifiers = VerifierActivities(registry, services)
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            workflows=[AgentRun],
            workflow_runner=workflow_runner(settings.workflow_sandbox),
            activities=[
                *model.activities(),
                tools.describe_tools,
                tools.check_precondition,
                tools.run_tool,
                tools.lookup_outcome,
                runs.load_previous_run,
                verifiers.verify_completion,
            ],
        )
        try:
            async with worker:
                yield worker
        finally:
            await adapters.close()
            await store.close()


async def serve(settings: Settings) -> None:
    """Run a worker until SIGINT or SIGTERM."""
    configure_logging(
        level=os.environ.get("AGENTLOOP_LOG_LEVEL", "INFO"),
        fmt="json",
        secrets=settings_secrets(settings),
        redact_fields=DEFAULT_REDACT_FIELDS,
    )
    client = await connect(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with running_worker(client, settings):
            print(
                f"agentloop worker polling task queue {settings.task_queue!r} "
                f"on {settings.temporal_address}",
                flush=True,
            )
            await stop.wait()
    finally:
        tracing.flush(settings)


def main() -> None:
    try:
        settings = Settings.load()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
