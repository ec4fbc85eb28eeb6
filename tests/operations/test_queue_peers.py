"""A worker joining a task queue whose other workers serve another tool set says so as it
starts (real dev server, two real workers); one joining workers of its own tool set says
nothing."""

from __future__ import annotations

import logging
import uuid

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from agentloop.runtime.config import Settings
from agentloop.runtime.queue_peers import TOOLS_MARK
from agentloop.worker import running_worker
from tests.support import eventually

pytestmark = pytest.mark.integration


async def polling(client: Client, queue: str) -> list[str]:
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
    )
    return [poller.identity for poller in described.pollers]


async def test_a_worker_with_another_tool_set_on_the_queue_says_so(
    client: Client, worker_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    queue = f"peers-{uuid.uuid4().hex[:8]}"
    examples = worker_settings.model_copy(update={"task_queue": queue})
    builtins_only = examples.model_copy(update={"tools": None})
    caplog.set_level(logging.WARNING, logger="agentloop.worker")
    # Another process's worker: a client runs one worker per queue.
    other = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=client.data_converter,
    )
    async with running_worker(client, examples):
        await eventually(lambda: _has_poller(client, queue), "the first worker to poll")
        assert not _warnings(caplog)
        async with running_worker(other, examples):  # the same tools: nothing to say
            pass
        assert not _warnings(caplog)
        async with running_worker(other, builtins_only):
            pass
    [warning] = _warnings(caplog)
    assert f"task queue {queue!r} has workers serving another tool set" in warning
    assert TOOLS_MARK.strip() in warning


async def _has_poller(client: Client, queue: str) -> bool:
    return any(TOOLS_MARK in identity for identity in await polling(client, queue))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "another tool set" in r.getMessage()]
