"""A team's existing MCP server, as agentloop's tests and demo meet it: a small ticket system.

Built on the official MCP Python SDK (`MCPServer`), served over stdio or streamable HTTP, so
the MCP tool adapter is exercised against a real server rather than a fake of one. Its state
lives in a JSON file (`--state`) so that the test process, which does not share memory with
the server, can count the effects that reached it and steer it:

    {"notes":   {KEY_OR_GENERATED_ID: {"note_id", "ticket_id", "text", "key"}},
     "closed":  {TICKET_ID: true},
     "calls":   {TOOL: COUNT},
     "control": {"tool_set": "v1" | "v2" | "broken",
                 "after_commit": null | "hang" | "exit",
                 "fail_next": null | "error",
                 "stall_next": null | true}}

The test writes "control"; the server reads the file afresh on every listing and call and
writes it back atomically after every change:

- `tool_set` "v2" lists an extra write tool, `close_ticket`, and a new `find_ticket`
  description, on the live server: what a team's server looks like after a deploy; "broken"
  lists `find_ticket` with an invalid input schema.
- `after_commit` makes the next applied write either hang (120 s) or kill the process
  (exit code 3) after the write is in the file: the caller cannot tell whether it happened.
- `fail_next` makes the next call to any tool return a tool error.
- `stall_next` makes the next call to any tool wait 120 s before it acts.

Run it with `python -m agentloop.demo.mcp_server --state PATH (--stdio | --http PORT)`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import struct
import tempfile
import uuid
import zlib
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool

from agentloop.runtime.mcp_config import IDEMPOTENCY_META_KEY

TICKET_ID = re.compile(r"^T-\d{4}$")
REPORT_CHARS = 1_000_000
HANG_SECONDS = 120.0
EXIT_CODE = 3
DOWN_MESSAGE = "ticket system is down"

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
        for section in ("notes", "closed", "calls", "control"):
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
    return chosen if chosen in ("v2", "broken") else "v1"


def require_ticket(ticket_id: str) -> None:
    if not TICKET_ID.match(ticket_id):
        raise ToolError(f"no ticket {ticket_id}")


def idempotency_key(ctx: Context) -> str | None:
    """The caller's idempotency key, from the request's `_meta` (not from the arguments, so
    the model never sees or invents it)."""
    meta = ctx.request_context.meta or {}
    key = meta.get(IDEMPOTENCY_META_KEY)
    return key if isinstance(key, str) and key else None


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

    def __init__(self, name: str, state: StateFile) -> None:
        super().__init__(name, log_level="WARNING")
        self.state = state
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
            listed.append(tool)
        return listed

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        state = self.state.load()
        if name == "close_ticket" and tool_set(state) != "v2":
            raise ToolError(f"Unknown tool: {name}")
        # Counted before acting, so a test sees calls that failed or never answered.
        state["calls"][name] = state["calls"].get(name, 0) + 1
        failing = state["control"].get("fail_next") == "error"
        if failing:
            state["control"]["fail_next"] = None
        stalling = state["control"].get("stall_next") is True
        if stalling:
            state["control"]["stall_next"] = None
        self.state.save(state)
        if stalling:  # a call in flight for as long as a test needs one
            await asyncio.sleep(HANG_SECONDS)
        if failing:
            # Returned rather than raised: a raised ToolError gets the SDK's prefix.
            return CallToolResult(
                content=[TextContent(type="text", text=DOWN_MESSAGE)], is_error=True
            )
        return await super().call_tool(name, arguments, context)

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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    server = TicketServer(args.name, StateFile(args.state))
    if args.stdio:
        asyncio.run(server.run_stdio_async())
    else:
        asyncio.run(serve_http(server, args.host, args.http))


if __name__ == "__main__":
    main()
