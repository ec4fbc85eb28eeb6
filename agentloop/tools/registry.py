"""The tool registry: which tools this worker can run, by name."""

from __future__ import annotations

from collections.abc import Iterable

from agentloop.tool_spec import ToolSpec
from agentloop.tools.contract import Tool


class UnknownToolError(KeyError):
    pass


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.spec.name in self._tools:
            raise ValueError(f"tool {tool.spec.name!r} is registered twice")
        self._tools[tool.spec.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name) from None

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self, names: Iterable[str]) -> list[ToolSpec]:
        return [self.get(name).spec for name in names]
