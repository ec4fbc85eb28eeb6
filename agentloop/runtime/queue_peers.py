"""Workers of one task queue that serve different tools: a run's tool call may then go to a
worker that lacks the tool (its activity fails there) or runs another version of it. Each
worker names a digest of its tool set in its Temporal identity (`identity`), and a worker
joining a queue looks at the queue's pollers and says which serve another set
(`other_tool_sets`), once, as it starts: a warning, never a refusal (a rolling deploy of a
new tool has two sets for a while on purpose)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from agentloop.digests import sha256_hex

TOOLS_MARK = " tools:"
"""What precedes the tool-set digest in a worker's identity."""

logger = logging.getLogger("agentloop.worker")


def tool_set_digest(tools: Iterable[str]) -> str:
    """Twelve hex digits of the SHA-256 of the tools' lines (name and effect), sorted."""
    return sha256_hex("\n".join(sorted(tools)))[:12]


def identity(digest: str) -> str:
    """Temporal's default worker identity (`pid@host`) with the tool-set digest."""
    return f"{os.getpid()}@{socket.gethostname()}{TOOLS_MARK}{digest}"


async def other_tool_sets(client: Client, task_queue: str, own: str) -> list[str]:
    """The identities of the queue's recent activity pollers (workers) that serve another
    tool set than `own` (this worker's identity). Workers that do not name theirs are not
    counted; a server that will not describe the queue is not judged (none)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    try:
        described = await client.workflow_service.describe_task_queue(request)
    except RPCError:
        return []
    digest = own.rpartition(TOOLS_MARK)[2]
    return sorted(
        {
            poller.identity
            for poller in described.pollers
            if TOOLS_MARK in poller.identity
            and poller.identity != own
            and poller.identity.rpartition(TOOLS_MARK)[2] != digest
        }
    )


async def warn_of_other_tool_sets(client: Client, task_queue: str, own: str) -> list[str]:
    """Log a warning naming the workers of `task_queue` that serve another tool set; returns
    their identities."""
    others = await other_tool_sets(client, task_queue, own)
    if others:
        logger.warning(
            "task queue %r has workers serving another tool set than this one (%s): %s. A run's"
            " tool call may go to any of them, and fail where its tool is missing: give every"
            " worker of a queue the same tools (AGENTLOOP_TOOLS, MCP servers), or give this"
            " worker its own queue (AGENT_LOOP_TASK_QUEUE)",
            task_queue,
            own.rpartition(TOOLS_MARK)[2],
            ", ".join(others),
        )
    return others
