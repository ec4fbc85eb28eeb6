"""The tool registry: which tools this worker can run, by name, and which source each comes
from. The one place that tells the kinds of tool source apart: a tool declared with
`@tool` is the team's own code run by `run_tool`, one declared with `activity_tool` is a
Temporal activity the run schedules itself, and any other source (MCP servers, or one of the
team's) is added beside them (`add_source`, or per worker with `routing`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentloop.policies.validation import did_you_mean
from agentloop.tool_spec import ToolSpec
from agentloop.tools.activity_tools import ActivityTools
from agentloop.tools.contract import Tool
from agentloop.tools.source import RegisteredTools, ToolLine, ToolSource, ToolSourceError


class UnknownToolError(KeyError):
    pass


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._native = RegisteredTools()
        self._activities = ActivityTools()
        self._sources: list[ToolSource] = []
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Register a tool declared in the worker's own code (`@tool`, `activity_tool`)."""
        if tool.spec.name in self._tools:
            raise ValueError(f"tool {tool.spec.name!r} is registered twice")
        self._tools[tool.spec.name] = tool
        kind = self._activities if tool.spec.activity is not None else self._native
        kind.add(tool)

    def add_source(self, source: ToolSource) -> None:
        """Serve the tools of `source` too: a name the registered tools or an earlier source
        own stays theirs."""
        self._sources.append(source)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool:
        """A registered tool (`@tool` or `activity_tool`), as declared."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name) from None

    def names(self) -> list[str]:
        """The registered tools' names (a source's own are known only when a run names them)."""
        return sorted(self._tools)

    def specs(self, names: Iterable[str]) -> list[ToolSpec]:
        return [self.get(name).spec for name in names]

    def routing(self, *more: ToolSource) -> ToolSources:
        """Every source of this registry, then `more` (a worker's own, such as its MCP
        servers), in the order a name is routed."""
        return ToolSources([self._native, self._activities, *self._sources, *more], self.names())


@dataclass(frozen=True)
class Offered:
    """What a run starting with some tools gets from the worker's sources."""

    specs: list[ToolSpec]
    """In the order the run named them."""
    absent: dict[str, list[str]] = field(default_factory=dict)
    """Source name -> the tools the run goes without, each with why."""


class ToolSources:
    """A worker's tool sources in order: a tool name is the first one's that owns it."""

    def __init__(self, sources: Sequence[ToolSource], registered: list[str]) -> None:
        self._sources = list(sources)
        self._registered = registered

    def source_of(self, name: str) -> ToolSource:
        for source in self._sources:
            if source.owns(name):
                return source
        raise UnknownToolError(name)

    async def offer(self, names: Sequence[str]) -> Offered:
        """The specs of `names`, each from its source. Raises `ToolSourceError` (before any
        source is asked) for the first name no source owns, and whatever a source raises."""
        by_source: dict[int, list[str]] = {}
        for name in names:
            try:
                source = self.source_of(name)
            except UnknownToolError:
                raise ToolSourceError(self.unknown(name)) from None
            by_source.setdefault(id(source), []).append(name)
        specs: dict[str, ToolSpec] = {}
        absent: dict[str, list[str]] = {}
        for source in self._sources:
            if id(source) in by_source:
                offer = await source.offer(by_source[id(source)])
                specs.update((spec.name, spec) for spec in offer.specs)
                if offer.absent:
                    absent[source.name] = offer.absent
        return Offered([specs[name] for name in names if name in specs], absent)

    def tool(self, name: str, *, write: bool) -> Tool:
        """What a call of `name` runs (see `ToolSource.tool`)."""
        return self.source_of(name).tool(name, write=write)

    def describe(self) -> list[ToolLine]:
        return [line for source in self._sources for line in source.describe()]

    def unknown(self, name: str) -> str:
        """Why a run naming the tool `name`, which no source owns, cannot start."""
        known = ", ".join(self._registered)
        hints = "".join(source.not_found(name) for source in self._sources)
        near = did_you_mean(name, self._registered)
        return f"tools: unknown tool {name!r}{near}; this worker has: {known}{hints}"
