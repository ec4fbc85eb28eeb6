"""Loading a team's tool modules: `AGENTLOOP_TOOLS=module[:attribute],...`.

A module given alone contributes every tool, approval rule, verifier and `@dependencies`
declared at its top level; `module:attribute` names one of them, or a `Toolset`. Each
declaration gets as `ctx.deps` the `dependencies=` of a `Toolset` naming it, else the
`@dependencies` of the module that declares it, when that module has them, else those of the
module that loads it; one object reached through several sources is one declaration. The
built-ins (`read_artifact`, `ask_user`, `give_up`, `roll_back`, `delegate`, the rules
`always` and `for_someone_else`, the verifier `writes_applied`) are always there. Everything
is checked when the worker starts, before it polls: a problem is a `PluginError` naming the
module, the object and what is wrong.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentloop.policies.approval import APPROVAL_RULES
from agentloop.policies.schema_cost import schema_cost_problem
from agentloop.tools.builtins import BUILTIN_TOOLS
from agentloop.tools.contract import Tool
from agentloop.tools.decorator import (
    ApprovalRule,
    Dependencies,
    ToolDefinitionError,
    Verifier,
    approval_rule,
)
from agentloop.tools.registry import ToolRegistry

T = TypeVar("T")

BUILTIN = "agentloop (built-in)"
BUILTIN_VERIFIERS = ("writes_applied",)
"""Verifiers every worker has (`activities.verify`)."""


class PluginError(Exception):
    """A tool module the worker cannot load; the message names the module, the object and
    the problem."""


@dataclass(frozen=True)
class Toolset:
    """What `module:attribute` may name: tools, rules and verifiers that share dependencies."""

    tools: Sequence[Tool] = ()
    rules: Sequence[ApprovalRule] = ()
    verifiers: Sequence[Verifier] = ()
    dependencies: Dependencies | None = None


@dataclass
class Plugin:
    """One loaded module (or attribute of one)."""

    source: str
    toolset: Toolset
    scanned: bool = False
    """The toolset is what a whole module declares, not one given as such: its dependencies
    then yield to those of the modules declaring its items."""


@dataclass
class Toolbox:
    """Every tool, rule and verifier a worker serves, each with the module it came from."""

    registry: ToolRegistry = field(default_factory=ToolRegistry)
    rules: dict[str, ApprovalRule] = field(default_factory=dict)
    verifiers: dict[str, Verifier] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    """`tool:NAME`, `rule:NAME`, `verifier:NAME` -> the source that loaded it (the first one,
    when several reach it)."""
    dependencies: dict[str, Dependencies] = field(default_factory=dict)
    """Owner (a module declaring `@dependencies`, or a source loading declarations from
    modules that declare none) -> how its dependencies are opened."""
    deps_owner: dict[str, str] = field(default_factory=dict)
    """`tool:NAME`, `rule:NAME`, `verifier:NAME` -> the owner whose dependencies it gets."""

    def verifier_names(self) -> list[str]:
        """Every verifier a run may name as its `completion_check`, the built-ins included."""
        return sorted(k.removeprefix("verifier:") for k in self.origin if k.startswith("verifier:"))

    @asynccontextmanager
    async def opened(self, settings: Any) -> AsyncIterator[OpenedToolbox]:
        """Every module's dependencies, opened for as long as the context is (a worker's
        life), closed in the reverse order."""
        async with AsyncExitStack() as stack:
            deps: dict[str, Any] = {}
            opened: dict[int, Any] = {}  # each declaration once, whoever reaches it
            for owner, declared in self.dependencies.items():
                if id(declared) not in opened:
                    try:
                        value = await stack.enter_async_context(declared.open(settings))
                    except Exception as exc:
                        raise PluginError(
                            f"{owner}: its dependencies did not open: {type(exc).__name__}: {exc}"
                        ) from exc
                    opened[id(declared)] = value
                deps[owner] = opened[id(declared)]
            yield OpenedToolbox(self, deps)


@dataclass(frozen=True)
class OpenedToolbox:
    """A toolbox whose dependencies are open: what the activities use."""

    box: Toolbox
    deps: dict[str, Any]

    @property
    def registry(self) -> ToolRegistry:
        return self.box.registry

    def deps_of(self, kind: str, name: str) -> Any:
        """The dependencies `kind:name` gets: its declaring module's, else its loader's (None:
        neither has any)."""
        key = f"{kind}:{name}"
        return self.deps.get(self.box.deps_owner.get(key, self.box.origin.get(key, "")))


def builtin_toolbox() -> Toolbox:
    """The built-ins alone: what `agentloop worker` serves with no tool modules."""
    box = Toolbox()
    for tool in BUILTIN_TOOLS:
        box.registry.add(tool)
        box.origin[f"tool:{tool.spec.name}"] = BUILTIN
    for name, function in APPROVAL_RULES.items():
        box.rules[name] = approval_rule(name)(function)
        box.origin[f"rule:{name}"] = BUILTIN
    for name in BUILTIN_VERIFIERS:
        box.origin[f"verifier:{name}"] = BUILTIN
    return box


def load_toolbox(sources: Iterable[str]) -> Toolbox:
    """The built-ins plus every module named in `sources` (`module` or `module:attribute`)."""
    unique = dict.fromkeys(s.strip() for s in sources if s.strip())
    return build_toolbox(load_plugin(source) for source in unique)


def build_toolbox(plugins: Iterable[Plugin]) -> Toolbox:
    """The built-ins plus `plugins`, every name checked to be declared once."""
    box = builtin_toolbox()
    for plugin in plugins:
        _add(box, plugin)
    _check_rules_named(box)
    return box


def load_plugin(source: str) -> Plugin:
    module_name, _, attribute = source.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ToolDefinitionError as exc:
        raise PluginError(f"{module_name}: {exc}") from None
    except Exception as exc:
        where = _where(exc, module_name)
        raise PluginError(
            f"{module_name}: cannot be imported: {type(exc).__name__}: {exc}{where}"
        ) from None
    if attribute:
        if not hasattr(module, attribute):
            raise PluginError(f"{source}: {module_name} has no attribute {attribute!r}")
        return Plugin(source, _toolset_of(source, getattr(module, attribute)))
    found = [value for value in vars(module).values() if _is_declaration(value)]
    return Plugin(module_name, _toolset_of(module_name, found), scanned=True)


def _where(exc: BaseException, module_name: str) -> str:
    """The line of the team's code the import failed at: where its syntax is wrong, or the
    last of its own frames (nothing for a module that is not there at all)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" (at {exc.filename}:{exc.lineno})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _importing(f.filename)]
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {last.filename}:{last.lineno})"


def _importing(filename: str) -> bool:
    """A frame of the import machinery, or of this loader: none of the team's code."""
    return "importlib" in filename or filename == __file__


def _is_declaration(value: Any) -> bool:
    return isinstance(value, Tool | ApprovalRule | Verifier | Dependencies | Toolset)


def _toolset_of(source: str, value: Any) -> Toolset:
    """`value` (a declaration, a `Toolset`, or a list of declarations) as one toolset."""
    if isinstance(value, Toolset):
        return value
    items = list(value) if isinstance(value, list | tuple) else [value]
    tools: list[Tool] = []
    rules: list[ApprovalRule] = []
    verifiers: list[Verifier] = []
    deps: list[Dependencies] = []
    nested: list[Toolset] = []
    for item in items:
        match item:
            case Tool():
                tools.append(item)
            case ApprovalRule():
                rules.append(item)
            case Verifier():
                verifiers.append(item)
            case Dependencies():
                deps.append(item)
            case Toolset():
                nested.append(item)
            case _:
                raise PluginError(
                    f"{source}: {type(item).__name__} {item!r} is not a tool, an approval "
                    "rule, a verifier, @dependencies or a Toolset"
                )
    for toolset in nested:
        tools += toolset.tools
        rules += toolset.rules
        verifiers += toolset.verifiers
        deps += [toolset.dependencies] if toolset.dependencies else []
    # One declaration named twice (at the top and in a Toolset) is one declaration.
    tools, rules, verifiers, deps = (_once(t) for t in (tools, rules, verifiers, deps))
    if len(deps) > 1:
        raise PluginError(f"{source}: declares @dependencies {len(deps)} times; one per module")
    if not (tools or rules or verifiers):
        raise PluginError(f"{source}: declares no tool, approval rule or verifier")
    return Toolset(tools, rules, verifiers, deps[0] if deps else None)


def _once(items: list[T]) -> list[T]:
    return list({id(item): item for item in items}.values())


def _add(box: Toolbox, plugin: Plugin) -> None:
    source, toolset = plugin.source, plugin.toolset
    for tool in toolset.tools:
        if _claim(box, plugin, "tool", tool.spec.name, tool, tool.function):
            problem = schema_cost_problem(tool.spec.parameters)
            if problem:
                raise PluginError(f"{source}: tool {tool.spec.name!r}: its parameters: {problem}")
            box.registry.add(tool)
    for rule in toolset.rules:
        if _claim(box, plugin, "rule", rule.name, rule, rule.function):
            box.rules[rule.name] = rule
    for check in toolset.verifiers:
        if _claim(box, plugin, "verifier", check.name, check, check.function):
            box.verifiers[check.name] = check


_KIND_WORDS = {"tool": "tool", "rule": "approval rule", "verifier": "verifier"}


def _claim(
    box: Toolbox, plugin: Plugin, kind: str, name: str, declared: object, function: Any
) -> bool:
    """Records `declared` under `kind:name`, with the dependencies it gets; False when this
    very object is there already (reached through another source)."""
    key = f"{kind}:{name}"
    owner, deps = _deps_owner(plugin, function)
    holder = box.origin.get(key)
    if holder is not None:
        if holder != BUILTIN and _declared(box, kind, name) is declared:
            if box.dependencies.get(box.deps_owner[key]) is deps:
                return False
            raise PluginError(
                f"{plugin.source}: {_KIND_WORDS[kind]} {name!r} is reached through {holder} "
                "too, which gives it other dependencies; declare @dependencies in its module"
            )
        whose = "a built-in" if holder == BUILTIN else f"already declared by {holder}"
        raise PluginError(f"{plugin.source}: {_KIND_WORDS[kind]} {name!r} is {whose}")
    if deps is not None and box.dependencies.setdefault(owner, deps) is not deps:
        raise PluginError(
            f"{plugin.source}: {_KIND_WORDS[kind]} {name!r} would get the dependencies of "
            f"{owner}, which gives others too; declare @dependencies once per module"
        )
    box.origin[key] = plugin.source
    box.deps_owner[key] = owner
    return True


def _declared(box: Toolbox, kind: str, name: str) -> object:
    if kind == "tool":
        return box.registry.get(name)
    return (box.rules if kind == "rule" else box.verifiers).get(name)


def _deps_owner(plugin: Plugin, function: Any) -> tuple[str, Dependencies | None]:
    """Whose dependencies a declaration gets, and them: a `Toolset`'s own `dependencies=`
    (what a team gives on purpose, test doubles say), else those of the module declaring
    `function` when it has them, else those of the module loading it."""
    if not plugin.scanned and plugin.toolset.dependencies is not None:
        return plugin.source, plugin.toolset.dependencies
    module_name = getattr(function, "__module__", None)
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    if module is not None:
        module_name = module.__name__
        declared = _once([v for v in vars(module).values() if isinstance(v, Dependencies)])
        if len(declared) > 1:
            raise PluginError(
                f"{plugin.source}: {module_name} declares @dependencies {len(declared)} times;"
                " one per module"
            )
        if declared:
            return module_name, declared[0]
    return plugin.source, plugin.toolset.dependencies


def _check_rules_named(box: Toolbox) -> None:
    """Every approval rule a tool names exists: a missing one would gate every call."""
    for name in box.registry.names():
        rule = box.registry.get(name).spec.needs_approval
        if isinstance(rule, str) and rule not in box.rules:
            source = box.origin[f"tool:{name}"]
            known = ", ".join(sorted(box.rules)) or "none"
            raise PluginError(
                f"{source}: tool {name!r} names approval rule {rule!r}, which no module "
                f"declares (rules: {known})"
            )
