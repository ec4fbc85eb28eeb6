"""Every AgentRun history the test session's servers hold is replayed before they stop.

A run the suite drove that today's `AgentRun` cannot replay is a run a worker restart would
wedge (issue 42 found one such way). So each dev server a test session starts is read before
it stops: `replay_before_stop(client)` lists every `AgentRun` execution in each of its
namespaces (finished or not: a running one replays as far as it went), fetches the histories
a few at a time and replays them, and adds the outcome to `SUITE`. The session's own server
(`temporal_env` in conftest) does this in its teardown; a test starting a server of its own
calls it before that server stops. At the session's end, `conftest.pytest_sessionfinish`
fails the session when any history did not replay, and the terminal summary says how many
were replayed, which did not, and how long replaying took.

Only executions of type `AgentRun` are read: other workflow types some tests register (a
probe, `NotAnAgentRun`) are not agentloop's to replay. A test that runs encrypted runs on the
session's server hands the audit its keys (`read_encrypted_with`): their histories are read
with them, as its own client did."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from temporalio.api.workflowservice.v1 import ListNamespacesRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter

from agentloop.cli.replay import replay_fetched
from agentloop.contract import WORKFLOW_NAME
from agentloop.runtime.codec import EncryptionCodec, KeyRing, encrypting_data_converter

FETCHES_AT_ONCE = 8
SYSTEM_NAMESPACE = "temporal-system"


@dataclass
class SuiteReplay:
    """What the session's replays found, over every server read."""

    servers: int = 0
    replayed: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"replayed {self.replayed} histories from the suite ({self.servers} servers, "
            f"{self.seconds:.1f} s): {len(self.failures)} did not replay"
        )


SUITE = SuiteReplay()

CODEC_KEYS: dict[str, bytes] = {}
"""Every key a test encrypted runs with on the session's server, by key id."""


def read_encrypted_with(ring: KeyRing) -> None:
    """The audit reads histories with `ring`'s keys too (a test's encrypted runs)."""
    CODEC_KEYS.update(ring.keys)


def reading_converter(client: Client) -> DataConverter:
    """`client`'s converter, decrypting with every key a test handed the audit (payloads that
    are not encrypted pass through a codec as they are); a client with a codec of its own reads
    with it."""
    if not CODEC_KEYS or client.data_converter.payload_codec is not None:
        return client.data_converter
    ring = KeyRing(keys=dict(CODEC_KEYS), active=next(iter(CODEC_KEYS)))
    return encrypting_data_converter(EncryptionCodec.from_ring(ring), client.data_converter)


async def namespaces(client: Client) -> list[str]:
    names: list[str] = []
    request = ListNamespacesRequest()
    while True:
        page = await client.workflow_service.list_namespaces(request)
        names += [n.namespace_info.name for n in page.namespaces]
        if not page.next_page_token:
            return [name for name in names if name != SYSTEM_NAMESPACE]
        request = ListNamespacesRequest(next_page_token=page.next_page_token)


async def histories(client: Client) -> list[WorkflowHistory]:
    """The history of every AgentRun execution in `client`'s namespace."""
    gate = asyncio.Semaphore(FETCHES_AT_ONCE)
    query = f"WorkflowType = '{WORKFLOW_NAME}'"
    executions = [e async for e in client.list_workflows(query)]

    async def fetch(workflow_id: str, run_id: str) -> WorkflowHistory:
        async with gate:
            return await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()

    return await asyncio.gather(*(fetch(e.id, e.run_id) for e in executions))


async def replay_before_stop(client: Client) -> None:
    """Replay every AgentRun history on `client`'s server (all its namespaces) into `SUITE`."""
    started = time.monotonic()
    SUITE.servers += 1
    for namespace in await namespaces(client):
        converter = reading_converter(client)
        reader = Client(client.service_client, namespace=namespace, data_converter=converter)
        found = await histories(reader)
        reports = await replay_fetched(found, data_converter=converter)
        SUITE.replayed += len(reports)
        SUITE.failures += [f"{namespace}: {r.line()}" for r in reports if not r.ok]
    SUITE.seconds += time.monotonic() - started
