"""A team's existing MCP server, as agentloop's tests and demo meet it: a small ticket system.

Built on the official MCP Python SDK (`MCPServer`), served over stdio or streamable HTTP, so
the MCP tool adapter is exercised against a real server rather than a fake of one. Its state
lives in a JSON file (`--state`) so that the test process, which does not share memory with
the server, can count the effects that reached it and steer it:

    {"notes":   {KEY_OR_GENERATED_ID: {"note_id", "ticket_id", "text", "key"}},
     "reassignments": {KEY_OR_GENERATED_ID: {"ticket_id", "assignee", "key"}},
     "closed":  {TICKET_ID: true},
     "calls":   {TOOL_OR_METHOD: COUNT},
     "tasks":   {TASK_ID: {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs",
                           "pollIntervalMs", "tool", "key", "result"?, "error"?}},
     "control": {"tool_set": "v1" | "v2" | "broken" | "deep" | "too_deep" | "huge_number",
                 "after_commit": null | "hang" | "exit",
                 "fail_next": null | "error",
                 "stall_next": null | true,
                 "garble_next": null | true,
                 "answers": {TICKET_ID: CALL_TOOL_RESULT},
                 "task_then": null | "exit"}}

The test writes "control"; the server reads the file afresh on every listing and call and
writes it back atomically after every change:

- `tool_set` "v2" lists an extra write tool, `close_ticket`, and a new `find_ticket`
  description, on the live server: what a team's server looks like after a deploy; "broken"
  lists `find_ticket` with an invalid input schema; "deep" lists it with an input schema
  nested `DEEP_SCHEMA_LEVELS` levels of `properties` deep (valid, and deeper than agentloop
  checks), "too_deep" `TOO_DEEP_SCHEMA_LEVELS` levels (the server's serializer still writes
  it, the SDK's JSON parser refuses the whole answer), "huge_number" with a schema holding a
  `HUGE_NUMBER_DIGITS`-digit number (the same, for the number); "fanning" lists it with an input
  schema whose `$ref`s fan out (`fanning_schema`: 2^40 nodes for one check to visit), and
  "fanning_output" with such an output schema (the SDK's client checks results against it).
- `after_commit` makes the next applied write either hang (120 s) or kill the process
  (exit code 3) after the write is in the file: the caller cannot tell whether it happened.
- `fail_next` makes the next call to any tool return a tool error.
- `stall_next` makes the next call to any tool wait 120 s before it acts.
- `garble_next` makes the next call to any tool act, then answer with structured content
  nested `TOO_DEEP_SCHEMA_LEVELS` deep: an answer no client can read.
- `answers` makes every call naming one of its ticket ids answer the result given for it
  (a `CallToolResult` as JSON, validated by the SDK), without acting: what a fuzz test
  throws at a run.
- `task_then` "exit" kills the process (exit code 3) right after the next task's final state
  is in the file (disarmed in that same write): a server that finished the work and died, so
  the caller must learn the outcome from a restarted server.

"calls" counts every tool call when it arrives (a tool call answered with a task included,
and each round of a call that needs input) and every `tasks/get` under that name.

`reassign_ticket` is a write that needs a person's word first, through the SDK's resolvers
(`Annotated[..., Resolve(ask_assignee)]`). On a 2026-07-28 connection whose client declares
the `elicitation` capability, the first `tools/call` is answered with an `InputRequiredResult`
holding one form-mode `ElicitRequest` ("Who should take ticket T-0001?", schema: a required
string `assignee`) and a `request_state`; the retry carrying the `ElicitResult` and that
`request_state` applies the reassignment, once per idempotency key (a call under a key
already applied is answered its first result without asking again). A decline or cancel is a
tool error that records nothing. On an older connection the SDK asks with a standalone
`elicitation/create` mid-call instead; a client without the capability gets a JSON-RPC error
(`MISSING_REQUIRED_CLIENT_CAPABILITY`).

With `--tasks` the server also speaks the MCP Tasks extension (`io.modelcontextprotocol/tasks`,
the 2026-07-28 lifecycle of SEP-2663), built on the SDK's server `Extension` API:

- It advertises `capabilities.extensions["io.modelcontextprotocol/tasks"] = {}` (in the
  `server/discover` and `initialize` results). Without `--tasks` it neither advertises nor
  serves anything of it.
- A `tools/call` of `add_note` on a 2026-07-28 connection whose request `_meta` declares the
  extension (`"io.modelcontextprotocol/clientCapabilities": {"extensions":
  {"io.modelcontextprotocol/tasks": {}}}`) is answered at once with a task, already written to
  "tasks":
  `{"resultType": "task", "taskId", "status": "working", "createdAt", "lastUpdatedAt",
  "ttlMs": 600000, "pollIntervalMs": 200}` (times are ISO 8601, UTC). 0.3 s later, in the
  background, the call runs exactly as an ordinary one would (the idempotency key in
  `_meta`, `fail_next`, `stall_next` and `after_commit` all apply); the record then becomes
  "completed" with "result" = the `CallToolResult` the call would have returned (a tool
  error is a completed task whose result has `isError: true`), or "failed" with "error" =
  a JSON-RPC error object if the call raised a protocol error. A request without the
  declaration, another tool, or an older protocol version gets the ordinary answer.
- `tasks/get` `{"taskId"}` answers the task's state: `{"resultType": "complete", "taskId",
  "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}` plus "result" when
  completed or "error" when failed; an unknown id is a JSON-RPC error -32602 (invalid params).
  It is served on 2026-07-28 connections only (-32601 on older ones, like any unknown method).
- Tasks live in the state file, so a restarted server (same `--state`) serves them. A task
  still "working" that no running server owns (its server died mid-way, e.g. by
  `after_commit` "exit") is reported "failed" with an error saying the outcome is unknown:
  the write may have happened, `lookup_note` tells. A task is dropped once `ttlMs` after its
  creation has passed (checked when a new task is created). One server per state file.

Run it with
`python -m agentloop.demo.mcp_server --state PATH (--stdio | --http PORT) [--tasks]`
(`--start-delay SECONDS`: a server slow to start, answering nothing meanwhile).

It stays one file, past the 550 lines any other module of agentloop keeps under (the one
exemption `tests/operations/test_layers.py` names): it is not agentloop's code but a stand-in for a
team's own server, run as a process of its own, sharing nothing with agentloop but the MCP
wire and the name of the idempotency key in `_meta`. Whole, it reads top to bottom as the one
server a test steers through the state file above, every knob acting in this file; split
into modules, it would look like a part of agentloop to import from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import struct
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    Image,
    MCPServer,
    Resolve,
)
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    InputRequiredResult,
    RequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp_types import Tool as MCPTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from agentloop.runtime.mcp_config import IDEMPOTENCY_META_KEY

TICKET_ID = re.compile(r"^T-\d{4}$")
REPORT_CHARS = 1_000_000
HANG_SECONDS = 120.0
EXIT_CODE = 3
DOWN_MESSAGE = "ticket system is down"

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"add_note"})
TASK_TTL_MS = 600_000
TASK_POLL_INTERVAL_MS = 200
TASK_START_DELAY_SECONDS = 0.3
TASK_WIRE_FIELDS = (
    "taskId",
    "status",
    "createdAt",
    "lastUpdatedAt",
    "ttlMs",
    "pollIntervalMs",
    "result",
    "error",
)
ORPHANED_MESSAGE = (
    "the server stopped before this task finished: whether the write was applied is unknown"
)

logger = logging.getLogger(__name__)

READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)


class Ticket(TypedDict):
    ticket_id: str
    status: str
    subject: str


class Note(TypedDict):
    note_id: str
    ticket_id: str
    text: str


class NoteLookup(TypedDict):
    state: str
    record: NotRequired[dict[str, Any]]


class Assignee(BaseModel):
    """What `reassign_ticket` asks a person for (the elicitation's requested schema)."""

    assignee: str


class Reassignment(BaseModel):
    ticket_id: str
    assignee: str


class StateFile:
    """The server's state on disk. Read on every use rather than cached, because the test
    process edits "control" between calls; written whole via a rename, so a reader (or a crash
    mid-write) never sees half a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        try:
            loaded = json.loads(self.path.read_text())
        except FileNotFoundError:
            loaded = None
        if isinstance(loaded, dict):
            state = loaded
        for section in ("notes", "reassignments", "closed", "calls", "tasks", "control"):
            if not isinstance(state.get(section), dict):
                state[section] = {}
        return state

    def save(self, state: dict[str, Any]) -> None:
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(state, out, indent=2, sort_keys=True)
                out.flush()
                # The exit fault kills the process right after this: the commit must be on disk.
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def tool_set(state: dict[str, Any]) -> str:
    chosen = state["control"].get("tool_set")
    known = ("v2", "broken", "deep", "too_deep", "huge_number", "fanning", "fanning_output")
    return chosen if chosen in known else "v1"


DEEP_SCHEMA_LEVELS = 40
TOO_DEEP_SCHEMA_LEVELS = 100
HUGE_NUMBER_DIGITS = 5_000
FANNING_STEPS = 40


def fanning_schema(steps: int) -> dict[str, Any]:
    """An object schema of `steps` `allOf` steps, each naming the next twice: 2,900
    characters at 40 steps, and 2^40 schema nodes for one check of any object to visit."""
    defs: dict[str, Any] = {
        f"s{i}": {"allOf": [{"$ref": f"#/$defs/s{i + 1}"}, {"$ref": f"#/$defs/s{i + 1}"}]}
        for i in range(steps)
    }
    defs[f"s{steps}"] = {}
    return {"type": "object", "$defs": defs, "$ref": "#/$defs/s0"}


def nested_schema(levels: int) -> dict[str, Any]:
    """An object schema whose one property is an object schema, `levels` times over."""
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


@dataclass(frozen=True)
class Faults:
    """The per-call faults a call took from "control" when it arrived."""

    failing: bool
    stalling: bool
    garbling: bool


# Set by the task runner around the deferred call: the call was counted, and took its faults,
# when its request arrived, so `TicketServer.call_tool` must not do either again.
ARRIVED: ContextVar[Faults | None] = ContextVar("arrived", default=None)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's `_meta` declares the Tasks extension among the client's
    capabilities. Per request, not per connection (2026-07-28), and only on that protocol
    generation: an older wire has no `resultType` to carry a task in."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = (ctx.meta or {}).get(CLIENT_CAPABILITIES_META_KEY)
    if not isinstance(capabilities, dict):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def task_view(record: dict[str, Any]) -> dict[str, Any]:
    """A task as the wire shows it: the record without the server's own bookkeeping."""
    return {name: record[name] for name in TASK_WIRE_FIELDS if name in record}


def expired(record: dict[str, Any], now: datetime) -> bool:
    try:
        created = datetime.fromisoformat(record["createdAt"])
        return created + timedelta(milliseconds=int(record["ttlMs"])) < now
    except (KeyError, TypeError, ValueError):
        return False


class TaskIdParams(RequestParams):
    """`tasks/get` params: `{"taskId": ...}` (plus the `_meta` every request carries)."""

    task_id: str


class Tasks(Extension):
    """The MCP Tasks extension for `add_note`, through the SDK's server extension API.

    Passing it to `MCPServer(extensions=[...])` advertises it (`settings()`, empty) under
    `capabilities.extensions`, registers `tasks/get` (a `MethodBinding`) and wraps `tools/call`
    (`intercept_tool_call`, which may answer with a result that is not a `CallToolResult`: the
    runner leaves a non-core `resultType` unvalidated on 2026-07-28 connections).
    """

    identifier = TASKS_EXTENSION

    def __init__(self, server: TicketServer) -> None:
        self.server = server
        # Tasks this process is running. Held so they are not garbage-collected, and to tell a
        # task in progress from one whose server died.
        self.running: dict[str, asyncio.Task[None]] = {}

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding(
                method="tasks/get",
                params_type=TaskIdParams,
                handler=self.get_task,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            )
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not declares_tasks(ctx):
            return await call_next(ctx)
        stamp = now_iso()
        record: dict[str, Any] = {
            "taskId": f"task-{uuid.uuid4().hex}",
            "status": "working",
            "createdAt": stamp,
            "lastUpdatedAt": stamp,
            "ttlMs": TASK_TTL_MS,
            "pollIntervalMs": TASK_POLL_INTERVAL_MS,
            "tool": params.name,
            "key": key_in(ctx.meta),
        }
        # Durable before it is answered: the task exists once the caller holds its id.
        faults = self.server.arrive(params.name, task=record)
        task_id = record["taskId"]
        self.running[task_id] = asyncio.create_task(self.run(task_id, ctx, call_next, faults))
        return {"resultType": "task", **task_view(record)}

    async def run(
        self,
        task_id: str,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        faults: Faults,
    ) -> None:
        """The deferred call: the rest of the `tools/call` chain, as an ordinary call runs it
        (the request context is only read for its `_meta`), then the task's final state."""
        try:
            await asyncio.sleep(TASK_START_DELAY_SECONDS)
            ARRIVED.set(faults)  # this asyncio task's own copy of the context
            try:
                outcome = await call_next(ctx)
            except MCPError as exc:
                error = exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)
                self.server.finish_task(task_id, error=error)
                return
            except Exception:
                logger.exception("task %s failed", task_id)
                error = {"code": INTERNAL_ERROR, "message": "the tool call failed"}
                self.server.finish_task(task_id, error=error)
                return
            if isinstance(outcome, BaseModel):
                result = outcome.model_dump(by_alias=True, mode="json", exclude_none=True)
            else:
                result = dict(outcome or {})
            self.server.finish_task(task_id, result=result)
        finally:
            self.running.pop(task_id, None)

    async def get_task(
        self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams
    ) -> dict[str, Any]:
        state = self.server.state.load()
        state["calls"]["tasks/get"] = state["calls"].get("tasks/get", 0) + 1
        record = state["tasks"].get(params.task_id)
        working = isinstance(record, dict) and record.get("status") == "working"
        if working and params.task_id not in self.running:  # its server died before finishing
            record.update(
                status="failed",
                lastUpdatedAt=now_iso(),
                error={"code": INTERNAL_ERROR, "message": ORPHANED_MESSAGE},
            )
        self.server.state.save(state)
        if not isinstance(record, dict):
            raise MCPError(code=INVALID_PARAMS, message=f"unknown task {params.task_id}")
        return {"resultType": "complete", **task_view(record)}


def require_ticket(ticket_id: str) -> None:
    if not TICKET_ID.match(ticket_id):
        raise ToolError(f"no ticket {ticket_id}")


def idempotency_key(ctx: Context) -> str | None:
    """The caller's idempotency key, from the request's `_meta` (not from the arguments, so
    the model never sees or invents it)."""
    return key_in(ctx.request_context.meta)


def key_in(meta: Mapping[str, Any] | None) -> str | None:
    key = (meta or {}).get(IDEMPOTENCY_META_KEY)
    return key if isinstance(key, str) and key else None


def assign_prompt(ticket_id: str) -> str:
    return f"Who should take ticket {ticket_id}?"


def ask_assignee(ticket_id: str, ctx: Context) -> Assignee | Elicit[Assignee]:
    """`reassign_ticket`'s resolver, run before its body on every round: no question about a
    ticket that does not exist, and none for a write already applied under this call's
    idempotency key (its assignee stands); otherwise ask a person."""
    require_ticket(ticket_id)
    key = idempotency_key(ctx)
    server = ctx.mcp_server
    if key is not None and isinstance(server, TicketServer):
        record = server.state.load()["reassignments"].get(key)
        if isinstance(record, dict):
            return Assignee(assignee=record["assignee"])
    return Elicit(assign_prompt(ticket_id), Assignee)


def tiny_png() -> bytes:
    """A valid 1x1 RGB PNG, built by hand so the server needs no imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\x2a\x7f\xd4")  # filter byte, then one pixel
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def report_text(ticket_id: str) -> str:
    lines: list[str] = []
    size = 0
    n = 0
    while size < REPORT_CHARS:
        n += 1
        line = f"line {n}: {ticket_id} history entry, customer and agent exchanged messages\n"
        lines.append(line)
        size += len(line)
    return "".join(lines)[:REPORT_CHARS]


class TicketServer(MCPServer):
    """`MCPServer` whose listing and calls consult the state file first.

    Every tool is registered once; the tool set is applied when listing (and when calling, so
    a v1 server refuses `close_ticket` like a server that never had it). That keeps the listing
    live without re-registering tools, and the SDK's own list/call paths stay in charge.
    """

    def __init__(self, name: str, state: StateFile, *, tasks: bool = False) -> None:
        self.state = state
        self.tasks = Tasks(self) if tasks else None
        super().__init__(
            name, log_level="WARNING", extensions=[self.tasks] if self.tasks is not None else None
        )
        self.add_tool(self.find_ticket, annotations=READ, description="Find a ticket")
        self.add_tool(self.add_note, annotations=WRITE, description="Add a note to a ticket")
        self.add_tool(
            self.lookup_note,
            annotations=READ,
            description="Whether the note written under an idempotency key was applied",
        )
        # Unstructured on purpose: a structured copy would double the million characters.
        self.add_tool(
            self.ticket_report,
            annotations=READ,
            description="The ticket's full history",
            structured_output=False,
        )
        self.add_tool(self.ticket_chart, annotations=READ, description="A chart of the ticket")
        self.add_tool(
            self.close_ticket,
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
            description="Close a ticket",
        )
        self.add_tool(
            self.reassign_ticket,
            annotations=WRITE,
            description="Reassign a ticket to someone a person names",
        )

    async def list_tools(self) -> list[MCPTool]:
        version = tool_set(self.state.load())
        listed: list[MCPTool] = []
        for tool in await super().list_tools():
            if tool.name == "close_ticket" and version != "v2":
                continue
            if tool.name == "find_ticket" and version == "v2":
                tool = tool.model_copy(update={"description": "Find a ticket (v2)"})
            if tool.name == "find_ticket" and version == "broken":
                # A deploy gone wrong: a schema no JSON Schema checker accepts.
                tool = tool.model_copy(update={"input_schema": {"type": "object", "required": 7}})
            if tool.name == "find_ticket" and version in ("deep", "too_deep"):
                levels = DEEP_SCHEMA_LEVELS if version == "deep" else TOO_DEEP_SCHEMA_LEVELS
                tool = tool.model_copy(update={"input_schema": nested_schema(levels)})
            if tool.name == "find_ticket" and version == "huge_number":
                schema = {"type": "object", "maxProperties": 10**HUGE_NUMBER_DIGITS}
                tool = tool.model_copy(update={"input_schema": schema})
            if tool.name == "find_ticket" and version == "fanning":
                tool = tool.model_copy(update={"input_schema": fanning_schema(FANNING_STEPS)})
            if tool.name == "find_ticket" and version == "fanning_output":
                tool = tool.model_copy(update={"output_schema": fanning_schema(FANNING_STEPS)})
            listed.append(tool)
        return listed

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        faults = ARRIVED.get()
        if faults is None:
            state = self.state.load()
            if name == "close_ticket" and tool_set(state) != "v2":
                raise ToolError(f"Unknown tool: {name}")
            faults = self.arrive(name, state=state)
        if faults.stalling:  # a call in flight for as long as a test needs one
            await asyncio.sleep(HANG_SECONDS)
        if faults.failing:
            # Returned rather than raised: a raised ToolError gets the SDK's prefix.
            return CallToolResult(
                content=[TextContent(type="text", text=DOWN_MESSAGE)], is_error=True
            )
        answers = self.state.load()["control"].get("answers", {})
        answer = answers.get(str(arguments.get("ticket_id")))
        if answer is not None:
            return CallToolResult.model_validate(answer)
        result = await super().call_tool(name, arguments, context)
        if faults.garbling and isinstance(result, CallToolResult):
            # It acted; its answer is nested deeper than a client's JSON parser reads.
            deep = nested_schema(TOO_DEEP_SCHEMA_LEVELS)
            return CallToolResult(
                content=[TextContent(type="text", text="?")], structured_content=deep
            )
        return result

    def arrive(
        self,
        name: str,
        *,
        state: dict[str, Any] | None = None,
        task: dict[str, Any] | None = None,
    ) -> Faults:
        """Count a call that arrived and take the per-call faults armed for it; with `task`,
        record the task it is answered with, in the same write."""
        if state is None:
            state = self.state.load()
        # Counted before acting, so a test sees calls that failed or never answered.
        state["calls"][name] = state["calls"].get(name, 0) + 1
        failing = state["control"].get("fail_next") == "error"
        if failing:
            state["control"]["fail_next"] = None
        stalling = state["control"].get("stall_next") is True
        if stalling:
            state["control"]["stall_next"] = None
        garbling = state["control"].get("garble_next") is True
        if garbling:
            state["control"]["garble_next"] = None
        if task is not None:
            now = datetime.now(UTC)
            tasks: dict[str, Any] = state["tasks"]
            for task_id in [tid for tid, record in tasks.items() if expired(record, now)]:
                del tasks[task_id]
            tasks[task["taskId"]] = task
        self.state.save(state)
        return Faults(failing=failing, stalling=stalling, garbling=garbling)

    def finish_task(
        self,
        task_id: str,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Write a task's final state, then play the armed `task_then` fault, if any (disarmed
        in the same write)."""
        state = self.state.load()
        record: dict[str, Any] = state["tasks"].setdefault(task_id, {"taskId": task_id})
        record["lastUpdatedAt"] = now_iso()
        if error is None:
            record.update(status="completed", result=result)
        else:
            record.update(status="failed", error=error)
        fault = state["control"].get("task_then")
        if fault == "exit":
            state["control"]["task_then"] = None
        self.state.save(state)
        if fault == "exit":
            # The outcome is on disk and nobody has been told: only tasks/get can tell now.
            os._exit(EXIT_CODE)

    async def commit(self, state: dict[str, Any]) -> None:
        """Write a change, then play the armed after-commit fault, if any. The fault is
        disarmed in the same write as the change, so it fires exactly once."""
        fault = state["control"].get("after_commit")
        if fault in ("hang", "exit"):
            state["control"]["after_commit"] = None
        self.state.save(state)
        if fault == "exit":
            # No cleanup, no answer: like a host that died right after the write.
            os._exit(EXIT_CODE)
        if fault == "hang":
            await asyncio.sleep(HANG_SECONDS)

    # The tools. Bound methods: `self` is not part of the signature the SDK inspects.

    async def find_ticket(self, ticket_id: str) -> Ticket:
        require_ticket(ticket_id)
        closed = self.state.load()["closed"].get(ticket_id, False)
        return Ticket(
            ticket_id=ticket_id,
            status="closed" if closed else "open",
            subject="Refund for order 17",
        )

    async def add_note(self, ticket_id: str, text: str, ctx: Context) -> Note:
        require_ticket(ticket_id)
        key = idempotency_key(ctx)
        state = self.state.load()
        notes: dict[str, dict[str, Any]] = state["notes"]
        if key is not None and key in notes:
            # Honouring the key: a retry gets the first write's result and writes nothing.
            return note_result(notes[key])
        record = {
            "note_id": f"N-{len(notes) + 1}",
            "ticket_id": ticket_id,
            "text": text,
            "key": key,
        }
        notes[key if key is not None else f"gen-{uuid.uuid4().hex}"] = record
        await self.commit(state)
        return note_result(record)

    async def lookup_note(self, idempotency_key: str) -> NoteLookup:
        record = self.state.load()["notes"].get(idempotency_key)
        if record is None or record.get("key") != idempotency_key:
            return NoteLookup(state="not_applied")
        return NoteLookup(state="applied", record=record)

    async def ticket_report(self, ticket_id: str) -> str:
        require_ticket(ticket_id)
        return report_text(ticket_id)

    async def ticket_chart(self, ticket_id: str) -> list[Image | TextContent]:
        require_ticket(ticket_id)
        return [
            Image(data=tiny_png(), format="png"),
            TextContent(type="text", text=f"chart of {ticket_id}"),
        ]

    async def close_ticket(self, ticket_id: str) -> Ticket:
        require_ticket(ticket_id)
        state = self.state.load()
        state["closed"][ticket_id] = True
        await self.commit(state)
        return Ticket(ticket_id=ticket_id, status="closed", subject="Refund for order 17")

    async def reassign_ticket(
        self,
        ticket_id: str,
        answer: Annotated[ElicitationResult[Assignee], Resolve(ask_assignee)],
        ctx: Context,
    ) -> Reassignment:
        require_ticket(ticket_id)
        if not isinstance(answer, AcceptedElicitation):
            how = "" if answer.action == "decline" else " (the person cancelled)"
            raise ToolError(f"the reassignment of {ticket_id} was declined{how}")
        key = idempotency_key(ctx)
        state = self.state.load()
        reassignments: dict[str, dict[str, Any]] = state["reassignments"]
        if key is not None and key in reassignments:
            # Honouring the key: a retry gets the first write's result and writes nothing.
            first = reassignments[key]
            return Reassignment(ticket_id=first["ticket_id"], assignee=first["assignee"])
        record = {"ticket_id": ticket_id, "assignee": answer.data.assignee, "key": key}
        reassignments[key if key is not None else f"gen-{uuid.uuid4().hex}"] = record
        await self.commit(state)
        return Reassignment(ticket_id=ticket_id, assignee=record["assignee"])


def note_result(record: dict[str, Any]) -> Note:
    return Note(note_id=record["note_id"], ticket_id=record["ticket_id"], text=record["text"])


async def serve_http(server: TicketServer, host: str, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)
    serving = asyncio.create_task(web.serve())
    while not web.started:
        if serving.done():
            await serving  # failed to bind: surface the error
            return
        await asyncio.sleep(0.02)
    # A parent process waits for this line before connecting.
    print(f"mcp server listening on http://{host}:{port}/mcp", flush=True)
    await serving


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    mode.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP at /mcp")
    parser.add_argument("--host", default="127.0.0.1", help="address for --http")
    parser.add_argument("--state", type=Path, required=True, help="the JSON state file")
    parser.add_argument("--name", default="tickets", help="the server's name")
    parser.add_argument(
        "--tasks",
        action="store_true",
        help="speak the MCP Tasks extension (io.modelcontextprotocol/tasks) for add_note",
    )
    parser.add_argument(
        "--banner",
        metavar="TEXT",
        help="with --stdio, print TEXT on stdout first, as careless servers do (not JSON-RPC)",
    )
    parser.add_argument(
        "--start-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait SECONDS before serving, as a server run through a package runner does on"
        " its first start (fetching it): nothing sent to it is answered meanwhile",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # Python writes no int of over 4,300 digits unless told: this server writes any ("huge_number").
    sys.set_int_max_str_digits(0)
    server = TicketServer(args.name, StateFile(args.state), tasks=args.tasks)
    time.sleep(args.start_delay)
    if args.stdio:
        if args.banner:
            print(args.banner, flush=True)
        asyncio.run(server.run_stdio_async())
    else:
        asyncio.run(serve_http(server, args.host, args.http))


if __name__ == "__main__":
    main()
