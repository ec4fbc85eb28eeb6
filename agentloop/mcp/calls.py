"""One MCP tool call (or outcome lookup) through the worker's connection to its server.

How a call's outcome maps onto agentloop's error classes (`agentloop.tools.contract`): a
result with `isError` is the tool saying no (told to the model); the server's "invalid
params" goes back to the model to fix; a call that could not be sent is transient; a call
cut off after it was sent is transient for a read (Temporal retries it) and of unknown
outcome for a write: looked up by its task's status or the server's lookup tool by
idempotency key, or, with neither, left to a person (`awaiting_reconciliation`). Never resent
blindly. A server that asks a person first raises `InputNeeded` (`agentloop.mcp.input`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, METHOD_NOT_FOUND
from pydantic import ValidationError

from agentloop.mcp.input import answered, asking
from agentloop.mcp.pool import McpConnection, ServerUnreachable, error_text, session_terminated
from agentloop.mcp.tasks import (
    CreatedTask,
    TaskState,
    keep_handle,
    kept_handle,
    until_over,
)
from agentloop.policies.bounds import loads_bounded
from agentloop.runtime.mcp_config import IDEMPOTENCY_META_KEY
from agentloop.store import Store
from agentloop.tool_spec import Outcome, ToolSpec
from agentloop.tools.contract import (
    BusinessRefusal,
    InvalidArguments,
    OutcomeUnknown,
    ToolContext,
    ToolError,
    TransientError,
)

T = TypeVar("T")

MAX_CONTENT_BLOCKS = 64
RECONNECT_PAUSE_SECONDS = 0.5
MAX_STATE_ROUNDS = 3
"""How many times one run of a call follows a server that answers only "go on with this
state" (an `input_required` asking nobody) before it is refused."""


class McpCall:
    """One tool of one server, called through the worker's connection to it."""

    def __init__(
        self, connection: McpConnection, tool: str, spec: ToolSpec, store: Store | None
    ) -> None:
        self._connection = connection
        self._tool = tool
        self._spec = spec
        self._store = store

    @property
    def _server(self) -> str:
        return self._connection.name

    def _deadline(self) -> float:
        """A little inside the activity's own timeout (the tool's), so the call says what
        became of it before Temporal gives up on the attempt."""
        margin = min(1.0, self._spec.timeout_seconds / 4)
        return time.monotonic() + self._spec.timeout_seconds - margin

    async def run(self, arguments: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        """One call. A server that asks a person first (`input_required`) raises
        `InputNeeded`; the call's next run sends the person's reply with the server's state."""
        write = self._spec.effect == "write"
        deadline = self._deadline()
        meta = {IDEMPOTENCY_META_KEY: ctx.idempotency_key} if ctx.idempotency_key else None
        responses, state = answered(self._tool, ctx.reply) if ctx.reply else (None, None)
        for _ in range(MAX_STATE_ROUNDS):
            answer = await self._guarded(
                self._tool,
                partial(
                    _call_tool,
                    tool=self._tool,
                    arguments=arguments,
                    meta=meta,
                    deadline=deadline,
                    responses=responses,
                    request_state=state,
                ),
                sent_matters=write,
            )
            if not isinstance(answer, types.InputRequiredResult):
                break
            if answer.input_requests:
                raise asking(self._tool, answer)
            # Only state to echo: the server goes on with it, asking nobody.
            responses, state = None, answer.request_state
        else:
            raise BusinessRefusal(
                f"{self._tool}: the server asked to go on {MAX_STATE_ROUNDS} times"
            )
        if isinstance(answer, CreatedTask):
            if write and self._store is not None:
                await keep_handle(self._store, ctx.idempotency_key, self._server, answer.task_id)
            answer = await self._finished(answer, deadline, write)
        if answer.is_error:
            raise BusinessRefusal(f"{self._tool}: {_text_of(answer) or 'the tool failed'}")
        return await shown_output(answer, ctx)

    async def _finished(
        self, task: CreatedTask, deadline: float, write: bool
    ) -> types.CallToolResult:
        """The task's result once it is over. A write whose task failed or was cancelled
        may have acted in part: its outcome is unknown, and the lookup asks the task again."""
        state = await self._task_over(task.task_id, deadline, task.poll_interval_ms, write)
        result = state.tool_result()
        if result is None:
            why = state.status_message or json.dumps(state.error or {})[:500]
            message = f"{self._tool}: the server's task {state.status}: {why}"
            raise OutcomeUnknown(message) if write else BusinessRefusal(message)
        return result

    async def _task_over(
        self, task_id: str, deadline: float, interval_ms: int | None, sent_matters: bool
    ) -> TaskState:
        """The task, polled until it is over through lost connections and a server that is
        restarting, until `deadline`: the task outlives both."""
        while True:
            try:
                return await self._guarded(
                    "tasks/get",
                    lambda c: until_over(c.session, task_id, deadline, interval_ms),
                    sent_matters=sent_matters,
                )
            except (OutcomeUnknown, TransientError):
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(RECONNECT_PAUSE_SECONDS)

    async def lookup(self, arguments: dict[str, Any], ctx: ToolContext[Any]) -> Outcome:
        """What became of a write whose answer was lost: its task's status when the server
        gave it one, else the server's lookup tool asked by the idempotency key."""
        task_id = None
        if self._store is not None:
            task_id = await kept_handle(self._store, ctx.idempotency_key)
        if task_id is not None:
            deadline = self._deadline()
            return task_outcome(await self._task_over(task_id, deadline, None, False))
        lookup_tool = self._connection.config.lookup_tool
        if lookup_tool is None:
            return Outcome(state="unknown", record=f"{self._server} has no way to look it up")
        deadline = self._deadline()
        asked = {"idempotency_key": ctx.idempotency_key}
        result = await self._guarded(
            lookup_tool,
            lambda c: _call_tool(c, lookup_tool, asked, None, deadline),
            sent_matters=False,
        )
        if isinstance(result, types.InputRequiredResult):
            return Outcome(state="unknown", record=f"{lookup_tool} asks a person for input")
        if isinstance(result, CreatedTask):
            result = await self._finished(result, deadline, False)
        if result.is_error:
            raise TransientError(f"{lookup_tool}: {_text_of(result) or 'the lookup failed'}")
        return looked_up(lookup_tool, result)

    async def _client(self) -> Client:
        try:
            return await self._connection.client()
        except ServerUnreachable as exc:
            # Nothing was sent: safe to try again, a write included (with the same key).
            raise TransientError(f"MCP server {self._server!r} is unreachable: {exc}") from None

    async def _guarded(
        self,
        what: str,
        request: Callable[[Client], Awaitable[T]],
        *,
        sent_matters: bool,
        client: Client | None = None,
    ) -> T:
        """`request` on the connection, its failures as agentloop's error classes.
        `sent_matters`: a request cut off after it was sent may have acted (a write), so it
        is of unknown outcome, not merely transient."""
        client = client or await self._client()
        where = f"MCP server {self._server!r}: {what}"
        try:
            with self._connection.sending() as sent_at:
                return await request(client)
        except MCPError as exc:
            if exc.code in (INVALID_PARAMS, METHOD_NOT_FOUND):
                raise InvalidArguments(f"{what}: {exc.message}") from None
            if session_terminated(exc):
                # The server no longer knows the session (it restarted): it ran nothing,
                # and only a new session gets an answer.
                await self._connection.broken(client)
                raise TransientError(f"{where}: {error_text(exc)}; reconnecting") from None
            if exc.code == CONNECTION_CLOSED:
                await self._connection.broken(client)
                cut_off = f"{where}: connection lost: {self._connection.lost(exc)}"
            else:
                cut_off = f"{where}: {error_text(exc)}"
        except TimeoutError:
            if self._connection.restart_on_timeout(sent_at):
                await self._connection.broken(client)
            cut_off = f"{where}: no answer in {self._spec.timeout_seconds:g} s"
        except ValidationError as exc:
            # The server answered something that is not the answer asked for: whatever it
            # did, the answer says nothing usable.
            cut_off = f"{where}: a malformed answer ({exc.error_count()} errors)"
        except ToolError:
            raise
        except Exception as exc:  # the connection broke under the request
            await self._connection.broken(client)
            cut_off = f"{where}: connection lost: {self._connection.lost(exc)}"
        if sent_matters:
            raise OutcomeUnknown(cut_off)
        raise TransientError(cut_off)


MAX_LOOKUP_CHARS = 1_000_000
"""The most of a lookup tool's JSON text that is read for the outcome."""


def looked_up(lookup_tool: str, result: types.CallToolResult) -> Outcome:
    """The outcome a lookup tool answered, as structured content or JSON text; anything else
    is an unknown outcome saying what came back."""
    answer = result.structured_content
    if answer is None:
        text = "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
        try:
            # Whole, not cut like a message: a record may be long (the workflow cuts it).
            answer = loads_bounded(text, max_chars=MAX_LOOKUP_CHARS)
        except ValueError:  # not JSON, or too long or too deep to read
            answer = text
    try:
        return Outcome.model_validate(answer)
    except ValidationError:
        return Outcome(state="unknown", record=f"{lookup_tool} gave no outcome: {answer!r:.200}")


def task_outcome(state: TaskState) -> Outcome:
    result = state.tool_result()
    if result is None:
        # Failed or cancelled while it ran: it may have written in part. A person decides.
        return Outcome(state="unknown", record=f"the task {state.status}: {state.status_message}")
    if result.is_error:  # the tool said no: it did not write
        return Outcome(state="not_applied", record=_text_of(result))
    record = result.structured_content
    return Outcome(state="applied", record=record if record is not None else _text_of(result))


async def _call_tool(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    meta: dict[str, Any] | None,
    deadline: float,
    responses: types.InputResponses | None = None,
    request_state: str | None = None,
) -> types.CallToolResult | CreatedTask | types.InputRequiredResult:
    """One `tools/call`. The worker's client says it takes tasks (`TasksExtension`), so a
    server with the Tasks extension may answer any call with one."""
    timeout = max(0.1, deadline - time.monotonic())
    async with asyncio.timeout(timeout):
        result = await client.session.call_tool(
            tool,
            arguments,
            read_timeout_seconds=timeout,
            meta=meta,  # type: ignore[arg-type]
            input_responses=responses,
            request_state=request_state,
            allow_input_required=True,
            allow_claimed=True,
        )
    if isinstance(result, CreatedTask | types.CallToolResult | types.InputRequiredResult):
        return result
    raise BusinessRefusal(f"{tool}: the server answered a {type(result).__name__}")


async def shown_output(result: types.CallToolResult, ctx: ToolContext[Any]) -> Any:
    """What the model is sent: the structured result when there is one, else the text
    blocks; binary content (images, audio, blobs) is kept as an artifact, named in a line of
    text where it stood."""
    if result.structured_content is not None:
        return result.structured_content
    parts: list[str] = []
    for block in result.content[:MAX_CONTENT_BLOCKS]:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(await _kept(ctx, block.type, block.data, block.mime_type))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                mime = resource.mime_type or "application/octet-stream"
                parts.append(await _kept(ctx, "resource", resource.blob, mime))
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
    if len(result.content) > MAX_CONTENT_BLOCKS:
        parts.append(f"[{len(result.content) - MAX_CONTENT_BLOCKS} more content blocks left out]")
    return "\n".join(parts)


async def _kept(ctx: ToolContext[Any], kind: str, data: str, mime_type: str) -> str:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[{kind} {mime_type}: not valid base64, left out]"
    ref = await ctx.artifacts.put(raw, mime_type[:100])
    return f"[{kind} {mime_type}, {len(raw):,} bytes, kept as artifact {ref}]"


def _text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))[:2000]
