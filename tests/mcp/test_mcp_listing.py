"""What an MCP server's listing becomes, and what the team's configuration may say (pure: no
server). A server is untrusted: its annotations are hints the configuration decides whether
to believe, and its names and schemas are checked and bounded before a run sees them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import mcp_types as types
import pytest
from pydantic import ValidationError

from agentloop.demo.mcp_server import fanning_schema, nested_schema
from agentloop.mcp.http import _ListingEvents
from agentloop.mcp.listing import (
    MAX_SCHEMA_BYTES,
    TOO_DEEP,
    ListedTool,
    decide_effect,
    name_clashes,
    offer,
    offered,
    readable,
    server_of,
)
from agentloop.runtime.config import ConfigError, Settings, load_config
from agentloop.runtime.mcp_config import (
    McpConfigError,
    McpServerConfig,
    mask_servers,
    parse_servers,
)

OBJECT = {"type": "object", "properties": {"ticket_id": {"type": "string"}}}


def listed(
    name: str = "find_ticket", schema: object = OBJECT, hint: bool | None = True
) -> ListedTool:
    return ListedTool(name, "Find a ticket.", schema, hint)


def server(**fields: object) -> McpServerConfig:
    return McpServerConfig.model_validate({"url": "http://127.0.0.1:9/mcp", **fields})


@pytest.mark.parametrize(
    ("fields", "hint", "effect", "why"),
    [
        ({"reads_from_hints": True}, True, "read", "readOnlyHint, believed"),
        ({}, True, "write", "reads_from_hints is off"),
        ({"reads_from_hints": True}, None, "write", "no readOnlyHint"),
        ({"reads_from_hints": True}, False, "write", "no readOnlyHint"),
        ({"tools": {"find_ticket": {"effect": "read"}}}, None, "read", "configuration"),
        (
            {"reads_from_hints": True, "tools": {"find_ticket": {"effect": "write"}}},
            True,
            "write",
            "configuration",
        ),
    ],
)
def test_a_tool_is_a_write_unless_the_team_says_or_lets_the_server_say_it_reads(
    fields: dict[str, object], hint: bool | None, effect: str, why: str
) -> None:
    got, reason = decide_effect(server(**fields), listed(hint=hint))
    assert (got, why in reason) == (effect, True), reason


def test_an_offered_tool_has_the_server_prefix_a_schema_hash_version_and_the_overrides() -> None:
    config = server(
        lookup_tool="lookup_note",
        tools={
            "add_note": {
                "needs_approval": True,
                "scopes": ["tickets:write"],
                "max_result_chars": 500,
            }
        },
    )
    [note, _] = offered("tickets", config, [listed("add_note", hint=False), listed("lookup_note")])
    assert note.name == "tickets_add_note" and note.tool == "add_note"
    assert note.spec is not None
    assert note.spec.effect == "write" and note.spec.has_outcome_lookup
    assert note.spec.needs_approval is True and note.spec.required_scopes == ["tickets:write"]
    assert note.spec.max_result_chars == 500 and note.spec.version.startswith("mcp-")
    changed = ListedTool("add_note", "Find a ticket.", {**OBJECT, "required": ["ticket_id"]}, False)
    assert offer("tickets", config, changed).spec.version != note.spec.version  # type: ignore[union-attr]
    assert server_of("tickets_add_note", {"tickets": config}) == ("tickets", "add_note")
    assert server_of("other_add_note", {"tickets": config}) is None


def test_a_write_names_its_undo_among_the_servers_tools_by_configuration() -> None:
    config = server(tools={"add_note": {"compensate": "delete_note"}})
    tools = [listed("add_note", hint=False), listed("delete_note", hint=False)]
    [note, delete] = offered("tickets", config, tools)
    assert note.spec is not None and note.spec.compensate == "tickets_delete_note"
    assert delete.spec is not None and delete.spec.compensate is None
    # An undo the server does not list is shown left out; a read has nothing to undo.
    [_, missing] = offered("tickets", config, tools[:1])
    assert (missing.tool, missing.spec) == ("delete_note", None)
    assert missing.problem is not None and "(compensate)" in missing.problem
    reading = server(tools={"find_ticket": {"effect": "read", "compensate": "x"}})
    [read, _] = offered("tickets", reading, [listed()])
    assert read.spec is None and "only a write has something to undo" in (read.problem or "")


def test_include_and_exclude_choose_what_runs_may_have() -> None:
    tools = [listed("a"), listed("b"), listed("c")]
    assert [o.tool for o in offered("s", server(include=["a", "c"]), tools)] == ["a", "c"]
    assert [o.tool for o in offered("s", server(exclude=["b"]), tools)] == ["a", "c"]


@pytest.mark.parametrize(
    ("tool", "problem"),
    [
        (listed(schema={"type": "string"}), 'not a JSON Schema of type "object"'),
        (listed(schema=None), 'not a JSON Schema of type "object"'),
        (listed(schema={"type": "object", "properties": 5}), "not a valid JSON Schema"),
        # As the run checks arguments: patterns on RE2, $ref within the schema, bounded work.
        (
            listed(schema={**OBJECT, "properties": {"a": {"type": "string", "pattern": "(?=x)"}}}),
            "a pattern RE2 cannot run",
        ),
        (listed(schema={**OBJECT, "$ref": "#/$defs/missing"}), "does not resolve"),
        (listed(schema=fanning_schema(40)), "could visit more than 20,000 schema nodes"),
        (listed(schema={**OBJECT, "$ref": "#"}), "loops back to where it started"),
        (
            listed(schema={"type": "object", "description": "x" * MAX_SCHEMA_BYTES}),
            "bytes (at most",
        ),
        (
            listed(schema=json.loads('{"type": "object", "a": ' + "[" * 60 + "]" * 60 + "}")),
            "nests",
        ),
        (listed(name="has.dots"), "is not 1-64 letters"),
        (listed(name="x" * 70), "is not 1-64 letters"),
    ],
)
def test_a_tool_the_loop_cannot_check_is_left_out_with_the_reason(
    tool: ListedTool, problem: str
) -> None:
    result = offer("tickets", server(), tool)
    assert result.spec is None and result.problem is not None and problem in result.problem


def test_a_server_configured_trusted_or_redacting_gives_its_tools_that_policy() -> None:
    plain = offer("s", server(), listed()).spec
    assert plain is not None
    assert (plain.trusted, plain.redact, plain.keep_redacted) == (False, [], "approvers")
    config = server(trusted=True, redact=["email"], keep_redacted="nobody")
    spec = offer("s", config, listed()).spec
    assert spec is not None
    assert (spec.trusted, spec.redact, spec.keep_redacted) == (True, ["email"], "nobody")
    with pytest.raises(ValidationError, match="no redactor phone"):
        server(redact=["phone"])


def test_a_long_description_is_cut() -> None:
    tool = ListedTool("t", "d" * 50_000, OBJECT, None)
    spec = offer("s", server(), tool).spec
    assert spec is not None and len(spec.description) == 4_000


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('{"tickets": {}}', "exactly one"),
        ('{"tickets": {"url": "http://a/mcp", "command": ["x"]}}', "exactly one"),
        ('{"tickets": {"url": "ftp://a"}}', "not an http(s) URL"),
        ('{"tickets": {"command": []}}', "non-empty"),
        ('{"Tickets": {"url": "http://a/mcp"}}', "lower-case"),
        ('{"tick_ets": {"url": "http://a/mcp"}}', "lower-case"),
        ('{"tickets": {"url": "http://a/mcp", "colour": 1}}', "colour"),
        ('{"tickets": {"url": "http://a/mcp", "tools": {"x": {"effect": "delete"}}}}', "effect"),
        ('{"tickets": {"url": "http://a/mcp", "timeout_seconds": 0}}', "timeout_seconds"),
        ("[1]", "an object"),
        ("{", "not JSON"),
    ],
)
def test_a_bad_configuration_names_the_server_and_the_problem(value: str, problem: str) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_servers(value)
    assert problem in str(caught.value), caught.value
    with pytest.raises(ConfigError, match="AGENTLOOP_MCP_SERVERS"):
        Settings.load({"AGENTLOOP_MCP_SERVERS": value})


def test_servers_come_from_the_toml_file_as_tables(tmp_path: Path) -> None:
    file = tmp_path / "agentloop.toml"
    file.write_text(
        '[mcp_servers.tickets]\nurl = "http://127.0.0.1:9/mcp"\nheaders = {X-Key = "s3cret"}\n'
        "[mcp_servers.tickets.tools.add_note]\nneeds_approval = true\n"
    )
    loaded = load_config({"AGENTLOOP_CONFIG": str(file)})
    [tickets] = loaded.settings.mcp_server_configs().values()
    assert tickets.tools["add_note"].needs_approval is True
    shown = {name: value for name, value, _ in loaded.entries()}["AGENTLOOP_MCP_SERVERS"]
    assert "s3cret" not in shown and "tickets" in shown
    assert "s3cret" not in mask_servers(loaded.settings.mcp_servers or "")


def test_a_worker_tool_named_like_a_servers_tools_is_a_clash() -> None:
    assert name_clashes(["tickets_find", "send_reply"], {"tickets": server()}) == [
        "tool 'tickets_find' is named like a tool of MCP server 'tickets'"
    ]


def test_a_tool_the_configuration_names_but_the_server_does_not_list_is_shown_left_out() -> None:
    """A mistyped override (`add_nte`) would otherwise be dropped unseen, and the write it was
    for go without the approval it sets; a lookup tool the server does not list gives no
    write an outcome lookup."""
    config = server(
        tools={"add_nte": {"needs_approval": True}},
        include=["add_note", "find_tickt"],
        lookup_tool="lookup_nte",
    )
    offers = offered("tickets", config, [listed("add_note", hint=None), listed("lookup_note")])
    by_tool = {o.tool: o for o in offers}
    assert list(by_tool) == ["add_note", "add_nte", "find_tickt", "lookup_nte"]
    note = by_tool["add_note"].spec
    assert note is not None and note.effect == "write" and not note.has_outcome_lookup
    for name, where in [
        ("add_nte", "tools"),
        ("find_tickt", "include"),
        ("lookup_nte", "lookup_tool"),
    ]:
        left_out = by_tool[name]
        assert left_out.spec is None and left_out.name == f"tickets_{name}"
        assert left_out.problem == (
            f"the configuration names it ({where}), but the server does not list it"
        )
    # Named right, the override and the lookup take effect.
    config = server(tools={"add_note": {"needs_approval": True}}, lookup_tool="lookup_note")
    [note_offer, lookup_offer] = offered(
        "tickets", config, [listed("add_note", hint=None), listed("lookup_note")]
    )
    assert note_offer.spec is not None and note_offer.spec.needs_approval is True
    assert note_offer.spec.has_outcome_lookup and lookup_offer.spec is not None


def listing_answer(*tools: str) -> str:
    """A tools/list answer of `tools`, each given as JSON text."""
    return '{"jsonrpc": "2.0", "id": 3, "result": {"tools": [' + ", ".join(tools) + "]}}"


def deep_tool(levels: int) -> str:
    """find_ticket with `nested_schema(levels)`, written without a recursive encoder."""
    schema = '{"type": "object", "properties": {"inner": ' * levels + '{"type": "object"}'
    return '{"name": "find_ticket", "inputSchema": ' + schema + "}}" * levels + "}"


TRICKY = {
    "name": "add_note",
    "description": 'Brackets in text: [{ "quoted" \\ }] are not structure',
    "inputSchema": {**OBJECT, "description": "]]]}}}"},
}


@pytest.mark.parametrize("levels", [100, 10_000])
def test_a_listing_too_deep_for_the_parser_is_read_with_the_deep_tool_left_out(
    levels: int,
) -> None:
    """Before, one tool's schema past the 200 levels the SDK's parser reads made the whole
    answer unreadable, and every tool of the server with it."""
    assert json.loads(deep_tool(100))["inputSchema"] == nested_schema(100)
    answer = listing_answer(json.dumps(TRICKY), deep_tool(levels))
    with pytest.raises(ValidationError, match="recursion limit exceeded"):
        types.jsonrpc_message_adapter.validate_json(answer)
    shortened = readable(answer)
    assert shortened is not None
    message = types.jsonrpc_message_adapter.validate_json(shortened)
    assert isinstance(message, types.JSONRPCResponse)
    tricky, cut = message.result["tools"]
    assert tricky == TRICKY  # the other tool is read as it was sent
    assert TOO_DEEP in json.dumps(cut["inputSchema"])
    listed = [ListedTool(t["name"], None, t["inputSchema"], None) for t in (tricky, cut)]
    assert [(o.tool, o.problem) for o in offered("tickets", server(), listed)] == [
        ("add_note", None),
        ("find_ticket", "its inputSchema nests deeper than 32 levels"),
    ]


@pytest.mark.parametrize(
    "answer",
    [
        listing_answer(json.dumps(TRICKY)),  # read as it is
        json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"content": nested_schema(120)}}),
        listing_answer(deep_tool(120))[:-1],  # cut off
    ],
)
def test_an_answer_read_as_it_is_or_that_is_no_listing_is_left_as_it_is(answer: str) -> None:
    assert readable(answer) is None


async def test_a_too_deep_listing_in_an_event_stream_is_cut_line_by_line() -> None:
    """A server answering tools/list with an event stream: its `data:` line is cut, the rest
    of the stream passed on as it came, however the bytes were split."""
    data = listing_answer(json.dumps(TRICKY), deep_tool(100))
    stream = f"event: message\r\nid: 7\r\ndata: {data}\r\n\r\n".encode()

    class Arriving(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for start in range(0, len(stream), 97):
                yield stream[start : start + 97]

    passed = b"".join([chunk async for chunk in _ListingEvents(Arriving())])
    lines = passed.split(b"\r\n")
    assert lines[:2] == [b"event: message", b"id: 7"] and lines[3:] == [b"", b""]
    cut = readable(data)
    assert cut is not None and lines[2] == b"data: " + cut.encode()
