"""A write on a server with the MCP Tasks extension (`io.modelcontextprotocol/tasks`, the
2026-07-28 lifecycle): the server may answer `tools/call` with a task handle instead of the
result, and `tasks/get` says how that task stands.

The handle is kept in the store under the write's idempotency key before anything else
happens (the extension asks clients to keep task ids durably). So when the call is cut off
after that (a timeout, a lost connection, a dead worker), the outcome is the task's status,
asked of the server by `lookup_outcome`, never a second call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any, Literal

import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict, Field, ValidationError

from agentloop.store import Store

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
WORKING = "working"
"""The one status polled on. `input_required` (the task waits for input agentloop does not
give through tasks), `completed`, `failed`, `cancelled` and any status the spec does not name
end the poll: the result, when it completed, or the status told."""
DEFAULT_POLL_SECONDS = 0.5
MAX_POLL_SECONDS = 5.0
DEFAULT_RESOLVE_SECONDS = 60.0
"""How long `Client.call_tool` waits for a task with no read timeout of its own."""


class _Task(types.Result):
    """What the extension's `Task` says of a task (the server's word: lenient on what is not
    needed, bounded on the id it is asked by)."""

    model_config = ConfigDict(extra="allow")

    task_id: str = Field(min_length=1, max_length=1_000)
    status: str = "working"
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class CreatedTask(_Task):
    """`CreateTaskResult`: the answer of a `tools/call` the server turned into a task."""

    result_type: Literal["task"] = "task"


class TaskState(_Task):
    """What `tasks/get` answers: the task's status, and its result or error once over."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def over(self) -> bool:
        return self.status != WORKING

    def tool_result(self) -> types.CallToolResult | None:
        """The call's own result, for a completed task. One that cannot be read is a text
        saying so: the task completed (a write's effect exists), only its answer is lost."""
        if self.status != "completed" or self.result is None:
            return None
        try:
            return types.CallToolResult.model_validate(self.result)
        except ValidationError as exc:
            told = (
                f"the server's task {self.task_id} completed, but its result could not be read"
                f" ({exc.error_count()} problems)"
            )
            return types.CallToolResult(content=[types.TextContent(type="text", text=told)])


class GetTaskParams(types.RequestParams):
    task_id: str


class GetTaskRequest(types.Request[GetTaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: GetTaskParams
    name_param = "taskId"  # mirrored into the Mcp-Name header, as the extension asks


class TasksExtension(ClientExtension):
    """Advertised on every connection (the SDK puts it in each request's capabilities), so
    a server with the extension may answer any call with a task. A call that allows it
    (`allow_claimed=True`) gets the `CreatedTask` itself: agentloop keeps a write's handle
    before it polls. `Client.call_tool` resolves one by polling it to its end."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_resolved)]


async def _resolved(task: CreatedTask, context: ClaimContext) -> types.CallToolResult:
    timeout = context.read_timeout_seconds or DEFAULT_RESOLVE_SECONDS
    state = await until_over(
        context.session, task.task_id, time.monotonic() + timeout, task.poll_interval_ms
    )
    result = state.tool_result()
    if result is None:
        raise RuntimeError(f"task {state.task_id} {state.status}: {state.error}")
    return result


async def get_task(session: ClientSession, task_id: str, timeout: float | None = None) -> TaskState:
    request = GetTaskRequest(params=GetTaskParams(task_id=task_id))
    return await session.send_request(request, TaskState, request_read_timeout_seconds=timeout)


async def until_over(
    session: ClientSession, task_id: str, deadline: float, poll_interval_ms: int | None = None
) -> TaskState:
    """Poll the task until it is over, at the pace it asks for; `TimeoutError` past
    `deadline` (`time.monotonic()`)."""
    interval = poll_interval_ms
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        state = await get_task(session, task_id, left)
        if state.over:
            return state
        interval = state.poll_interval_ms or interval
        pause = (interval or DEFAULT_POLL_SECONDS * 1000) / 1000
        await asyncio.sleep(min(max(pause, 0.05), MAX_POLL_SECONDS, max(0.0, left)))


def handle_key(idempotency_key: str) -> str:
    """Where a write's task handle is kept: derived from its idempotency key, so the lookup
    finds it with nothing else to go on."""
    return "mcp-task:" + hashlib.sha256(idempotency_key.encode()).hexdigest()


async def keep_handle(store: Store, idempotency_key: str, server: str, task_id: str) -> None:
    body = json.dumps({"parent": None, "server": server, "task_id": task_id}, sort_keys=True)
    await store.put_nodes([(handle_key(idempotency_key), body)])


async def kept_handle(store: Store, idempotency_key: str) -> str | None:
    body = await store.get_node(handle_key(idempotency_key))
    if body is None:
        return None
    task_id = json.loads(body).get("task_id")
    return task_id if isinstance(task_id, str) else None
