"""What a tool source is to a worker: one small protocol that the team's `@tool` tools, its
activity tools (`agentloop.activity_tool`) and its MCP servers each implement, and that a
fourth kind of source implements alone.

A source says which tool names it answers for, what those tools are (their specs, recorded in
a run's history as it starts), what a call of one runs (its handler, its precondition, and for
a write the lookup of its outcome by idempotency key), and what the worker prints of it as it
starts. The registry (`agentloop.tools.registry`) routes each name to its source; the tool
activities ask the registry, never a kind of source by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentloop.tool_spec import ToolSpec
from agentloop.tools.contract import Tool

NO_LOOKUP = "no lookup: an unknown outcome waits for an operator"
"""What the worker prints of a write whose lost answer cannot be looked up."""


class ToolSourceError(Exception):
    """A source cannot give a run the tools it names (a server that cannot be listed, a tool
    it no longer offers): the run fails as it starts, with this message."""


@dataclass(frozen=True)
class Offer:
    """A source's answer to a run naming some of its tools."""

    specs: list[ToolSpec]
    absent: list[str] = field(default_factory=list)
    """Tools named that the run goes without, each with why (an optional server that is
    down); the audit log says so."""


@dataclass(frozen=True)
class ToolLine:
    """One line of what a worker prints of its tools as it starts."""

    name: str
    effect: str
    note: str = ""
    """For a write: whether its lost answer can be looked up, and what else is worth saying."""


class ToolSource(Protocol):
    """A kind of tool a worker serves. Every method runs in the worker (in its activities, or
    as it starts), never in the workflow."""

    name: str
    """What the source is called in the audit log (`NAME.tools_absent`) and in errors."""

    def owns(self, name: str) -> bool:
        """Whether a run's tool `name` is this source's to answer for."""
        ...

    async def offer(self, names: Sequence[str]) -> Offer:
        """The specs of `names` (each one it owns), as a run starting now keeps them: the run
        uses these, whatever the source says later. Raises `ToolSourceError` when the run
        cannot have them."""
        ...

    def tool(self, name: str, *, write: bool) -> Tool:
        """What a call of `name` runs: `handler` runs the call, `precondition` (if any) checks
        it first, and `lookup_outcome` (a write's, if any) asks by `ctx.idempotency_key`
        whether a write whose answer was lost happened. `write` is the run's word (its frozen
        spec gave the call an idempotency key), never what the source says now."""
        ...

    def describe(self) -> list[ToolLine]:
        """What the worker prints of this source's tools as it starts."""
        ...

    def not_found(self, name: str) -> str:
        """What to add when a run names a tool no source owns (empty: nothing), starting
        with "; ": e.g. that it would be the tool of an MCP server not configured here."""
        ...


def lookup_note(spec: ToolSpec) -> str:
    """What the worker prints of a tool's lost answer: nothing for a read; for a write,
    whether its outcome can be looked up."""
    if spec.effect == "read":
        return ""
    return "looked up" if spec.has_outcome_lookup else NO_LOOKUP


class RegisteredTools:
    """Tools declared in the worker's own code, registered by name: a source whose tools are
    known before any run starts. `@tool` tools are these as they stand."""

    name = "tools"

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def add(self, tool: Tool) -> None:
        self._tools[tool.spec.name] = tool

    def owns(self, name: str) -> bool:
        return name in self._tools

    async def offer(self, names: Sequence[str]) -> Offer:
        return Offer([self._tools[name].spec for name in names])

    def tool(self, name: str, *, write: bool) -> Tool:
        return self._tools[name]

    def describe(self) -> list[ToolLine]:
        return [self.line(self._tools[name].spec) for name in sorted(self._tools)]

    def line(self, spec: ToolSpec) -> ToolLine:
        return ToolLine(spec.name, spec.effect, lookup_note(spec))

    def not_found(self, name: str) -> str:
        return ""
