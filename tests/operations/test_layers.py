"""The house's rules, read from the import graph: no import cycles, and no module importing one
that stands above it. Every agentloop module is read (imports inside functions and under
`TYPE_CHECKING` too), so a rule broken anywhere fails here, with the line that breaks it.

From the bottom up: the vocabulary every layer speaks (events, the contract, tool specs, what
the workflow and its activities exchange, the chain hashing); the pure policies and the process
concerns (`runtime/`); the store; the provider adapters and the tools; MCP servers as tool
sources (`mcp/`); the workflow (which never imports store, adapter, tool or activity code: it
runs on recorded results only); the activities (which know a tool source by its protocol
only, as the registry routes a name to it); the scripted model provider (it speaks the
providers' wire protocols and needs only the vocabulary); the demo's example tools and systems;
the client and the operators' reads (`operations/`: wedged runs, resets); the worker;
the inbox (a web app for the people in the loop); the CLI; and `agentloop.testing` on top
(the package's face, `agentloop/__init__.py`, hands on names from every floor).

And no module over `MAX_MODULE_LINES`: past that a room has become a catch-all, and is split
by the job of each part (`agentloop/testing/`, `cli/runs.py`, `runtime/config.py` were).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop import activity_io, tool_spec
from agentloop.testing.patience import CEILING_SECONDS
from tests.loop.test_workflow_determinism import PACKAGE_DIR, imported_modules

VOCABULARY = frozenset(
    {
        "activity_io",
        "argument_edits",
        "context",
        "contract",
        "digests",
        "input_limits",
        "envelope",
        "ledger",
        "moments",
        "notice_timers",
        "events",
        "people_messages",
        "pricing",
        "redaction",
        "reporting",
        "releases",
        "run_events",
        "run_failure",
        "search",
        "signed_words",
        "stream_seals",
        "task_families",
        "tool_spec",
        "transcript",
        "waiting",
    }
)
"""Top-level modules every layer may import: pure data and pure functions."""

MAY_IMPORT: dict[str, frozenset[str]] = {
    "vocabulary": frozenset({"vocabulary"}),
    "policies": frozenset({"vocabulary"}),
    "runtime": frozenset({"vocabulary"}),
    "store": frozenset({"vocabulary", "runtime"}),
    "adapters": frozenset({"vocabulary", "policies", "runtime"}),
    "tools": frozenset({"vocabulary", "policies", "runtime", "store"}),
    "workflows": frozenset({"vocabulary", "policies"}),
    "mcp": frozenset({"vocabulary", "policies", "runtime", "store", "tools"}),
    # Not `mcp`: the tool activities ask the registry (`tools.registry`), which routes each
    # name to its tool source; a kind of source named there would be a branch beside it.
    # And the run client: `load_previous_run` reads the run a new one continues as a client.
    "activities": frozenset(
        {
            "vocabulary",
            "policies",
            "runtime",
            "store",
            "adapters",
            "tools",
            "client",
            "run_client",
            "run_results",
        }
    ),
    "scripted_provider": frozenset({"vocabulary"}),
    "demo": frozenset({"vocabulary", "policies", "runtime", "store", "tools"}),
    # How a client reads a run's result, a failed run's included: over Temporal, no run code.
    "run_results": frozenset({"vocabulary"}),
    "client": frozenset({"vocabulary", "runtime", "run_results"}),
    # What an operator asks of Temporal about runs (a wedged run, its reset): no run code.
    "operations": frozenset({"vocabulary", "runtime"}),
    "run_client": frozenset({"vocabulary", "runtime", "client", "run_results"}),
}
# A worker serves real tools to real models: the example tools and the scripted model are
# what `agentloop dev` (the CLI) and the tests put beside it.
_BELOW_WORKER = frozenset(MAY_IMPORT) - {"demo", "scripted_provider"}
MAY_IMPORT["worker"] = _BELOW_WORKER
MAY_IMPORT["inbox"] = _BELOW_WORKER | {"demo", "worker"}
MAY_IMPORT["cli"] = MAY_IMPORT["inbox"] | {"inbox", "scripted_provider"}
MAY_IMPORT["testing"] = MAY_IMPORT["cli"] | {"cli"}
"""Each layer and the layers below it that it may import (its own modules aside)."""

STATE_TABLE = "agentloop.workflows.loop.decide"
STATE_TABLE_READS = frozenset(
    f"agentloop.workflows.loop.{name}" for name in ("next_step", "state", "stops", "views")
)
"""The loop modules the state table may import: the state, the steps it answers with, and
pure reads of the state. A fold (what records a step's outcome: `model_step`, `tool_step`,
`lifecycle`, `settle`, `humans`, `delegation`, `texts`) is none of them: `decide` reads the
state, and reading a rule out of a fold would put the state table above it again."""


ACTIVITY_CALLS = frozenset(
    {"execute_activity", "execute_local_activity", "start_activity", "start_local_activity"}
)
"""The workflow's ways of calling an activity by name (its first argument)."""


MAX_MODULE_LINES = 550
LONG_MODULES_ALLOWED = frozenset(
    {
        # A stand-in for a team's own MCP server, run as a process of its own: its docstring
        # says why it stays one file.
        "agentloop/demo/mcp_server.py",
    }
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """`agentloop.workflows.loop.decide` -> `workflows`; a vocabulary module -> `vocabulary`."""
    first = module.split(".")[1] if "." in module else ""
    if first in VOCABULARY:
        return "vocabulary"
    return first


def import_graph() -> dict[str, list[tuple[int, str]]]:
    """Module -> `(line, agentloop module)` for each agentloop import in it."""
    graph: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        name = module_name(path)
        graph[name] = [
            (line, imported)
            for line, imported in imported_modules(ast.parse(path.read_text()))
            if imported.startswith("agentloop.") and imported != name
        ]
    return graph


def cycles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = {m: sorted({i for _, i in deps if i in graph}) for m, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in edges:
        if module not in index:
            visit(module)
    return found


def upward_imports(graph: dict[str, list[tuple[int, str]]]) -> Iterator[str]:
    for module, deps in sorted(graph.items()):
        layer = layer_of(module)
        if layer not in MAY_IMPORT:
            continue  # the package's own face (`agentloop`) stands above everything
        for line, imported in deps:
            target = layer_of(imported)
            if target != layer and target not in MAY_IMPORT[layer]:
                yield f"{module}:{line} ({layer}) imports {imported} ({target})"


def folds_the_state_table_imports(graph: dict[str, list[tuple[int, str]]]) -> Iterator[str]:
    for line, imported in graph.get(STATE_TABLE, []):
        in_loop = imported.startswith("agentloop.workflows.loop")
        if in_loop and imported not in STATE_TABLE_READS:
            yield (
                f"{STATE_TABLE}:{line} imports {imported}: the state table imports no fold (it "
                "may read only the state, the steps and pure reads: "
                + ", ".join(sorted(STATE_TABLE_READS))
                + "); move what it needs into one of those"
            )


def module_lines() -> dict[str, int]:
    """Each agentloop module's path (from the checkout) -> its number of lines."""
    return {
        path.relative_to(PACKAGE_DIR.parent).as_posix(): len(path.read_text().splitlines())
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
    }


def long_modules(
    lines: dict[str, int], allowed: frozenset[str] = LONG_MODULES_ALLOWED
) -> list[str]:
    return [
        f"{m}: {n} lines" for m, n in lines.items() if n > MAX_MODULE_LINES and m not in allowed
    ]


def test_every_module_belongs_to_a_layer() -> None:
    unplaced = [m for m in import_graph() if m != "agentloop" and layer_of(m) not in MAY_IMPORT]
    assert unplaced == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_module_imports_one_that_stands_above_it() -> None:
    assert list(upward_imports(import_graph())) == []


def test_the_state_table_imports_no_fold() -> None:
    assert list(folds_the_state_table_imports(import_graph())) == []


def tool_source_branches(graph: dict[str, list[tuple[int, str]]]) -> Iterator[str]:
    """Imports of a kind of tool source (`agentloop.mcp`) by the activities."""
    for module, deps in sorted(graph.items()):
        if layer_of(module) == "activities":
            for line, imported in deps:
                if layer_of(imported) == "mcp":
                    yield f"{module}:{line} imports {imported}"


def test_no_tool_source_is_a_branch_outside_the_registry() -> None:
    """The activities know tool sources by their protocol (`agentloop.tools.source`) and
    ask the registry which one a name is; a kind of source they import by name (MCP) is
    the start of a branch for it, and of one more for each new kind."""
    found = list(tool_source_branches(import_graph()))
    assert found == [], (
        "the activities must ask the tool registry, not a tool source by name: " + "; ".join(found)
    )


def test_the_tool_source_check_finds_an_activity_importing_mcp() -> None:
    graph = {
        "agentloop.activities.tools": [(9, "agentloop.mcp.listing"), (10, "agentloop.tools")],
        "agentloop.worker": [(4, "agentloop.mcp.source")],
    }
    assert list(tool_source_branches(graph)) == [
        "agentloop.activities.tools:9 imports agentloop.mcp.listing"
    ]


def test_the_pure_loop_imports_no_temporal_and_nothing_of_the_shell() -> None:
    graph = import_graph()
    found = []
    for module, path in ((m, PACKAGE_DIR.parent.joinpath(*m.split("."))) for m in graph):
        if not module.startswith("agentloop.workflows.loop"):
            continue
        source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
        for line, imported in imported_modules(ast.parse(source)):
            outside_loop = imported.startswith("agentloop.workflows.") and not imported.startswith(
                "agentloop.workflows.loop"
            )
            if imported.startswith("temporalio") or outside_loop:
                found.append(f"{module}:{line} imports {imported}")
    assert found == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"agentloop.a": [(1, "agentloop.b")], "agentloop.b": [(2, "agentloop.a")]}, 1),
        ({"agentloop.a": [(1, "agentloop.b")], "agentloop.b": []}, 0),
    ],
)
def test_the_cycle_check_finds_a_cycle(
    graph: dict[str, list[tuple[int, str]]], expected: int
) -> None:
    assert len(cycles(graph)) == expected


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {
        "agentloop.workflows.steps": [(3, "agentloop.store.sqlite")],
        "agentloop.demo.run": [(5, "agentloop.cli.commands")],
        "agentloop.cli.commands": [(7, "agentloop.workflows.agent_run")],
        "agentloop.cli.dev": [(8, "agentloop.scripted_provider.server")],
        "agentloop.scripted_provider.scripts": [(9, "agentloop.demo.tools")],
        "agentloop.worker": [(4, "agentloop.scripted_provider")],
    }
    assert list(upward_imports(graph)) == [
        "agentloop.demo.run:5 (demo) imports agentloop.cli.commands (cli)",
        "agentloop.scripted_provider.scripts:9 (scripted_provider) imports agentloop.demo.tools"
        " (demo)",
        "agentloop.worker:4 (worker) imports agentloop.scripted_provider (scripted_provider)",
        "agentloop.workflows.steps:3 (workflows) imports agentloop.store.sqlite (store)",
    ]


def test_the_fold_check_finds_a_fold() -> None:
    graph = {
        STATE_TABLE: [
            (3, "agentloop.workflows.loop.state"),
            (4, "agentloop.workflows.loop.model_step"),
            (5, "agentloop.workflows.loop"),
        ]
    }
    found = [problem.split(": ", 1)[0] for problem in folds_the_state_table_imports(graph)]
    assert found == [
        f"{STATE_TABLE}:4 imports agentloop.workflows.loop.model_step",
        f"{STATE_TABLE}:5 imports agentloop.workflows.loop",
    ]


def test_no_module_is_longer_than_the_limit() -> None:
    lines = module_lines()
    assert long_modules(lines) == []
    # An exemption outlives its reason no longer than the module's length does.
    allowed = sorted(LONG_MODULES_ALLOWED)
    assert [m for m in allowed if lines.get(m, 0) <= MAX_MODULE_LINES] == []


def test_the_length_check_finds_a_long_module() -> None:
    lines = {"agentloop/a.py": MAX_MODULE_LINES, "agentloop/b.py": MAX_MODULE_LINES + 1}
    assert long_modules(lines) == [f"agentloop/b.py: {MAX_MODULE_LINES + 1} lines"]
    assert long_modules(lines, allowed=frozenset({"agentloop/b.py"})) == []


def test_a_worker_starts_without_importing_a_provider_sdk_or_mcp() -> None:
    """Each SDK is imported by the adapter that uses it, when a run first calls that provider:
    anthropic alone costs a worker 2 s at start, openai 1 s, and most workers need one."""
    code = (
        "import sys, agentloop.worker, agentloop.cli.commands; "
        "print(sorted({'openai', 'anthropic', 'mcp'} & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=CEILING_SECONDS,
    ).stdout.strip()
    assert loaded == "[]"


def spelled_activity_names(tree: ast.AST, names: frozenset[str]) -> Iterator[tuple[int, str]]:
    """`(line, name)` of each activity name written out as a string: an `activity.defn`'s
    `name=`, the first argument of `execute_activity` and the like, and any argument equal to
    one of `names` (a helper handing the name on to them)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = getattr(node.func, "attr", getattr(node.func, "id", ""))
        if activity_defn(node):
            spelled = [keyword.value for keyword in node.keywords if keyword.arg == "name"]
        elif called in ACTIVITY_CALLS:
            spelled = node.args[:1]
        else:
            spelled = [arg for arg in node.args if string_of(arg) in names]
        yield from ((node.lineno, text) for text in map(string_of, spelled) if text is not None)


def string_of(node: ast.expr) -> str | None:
    """The string `node` writes out, if it is a string literal."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def activity_defn(node: ast.Call) -> bool:
    """`activity.defn(...)` (not `workflow.defn`, whose name is the workflow's)."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "defn"
        and isinstance(func.value, ast.Name)
        and func.value.id == "activity"
    )


def test_every_activity_name_is_one_constant_used_on_both_sides() -> None:
    """A name spelled on each side of the workflow/activity boundary can drift on one: the
    workflow then schedules an activity no worker has, and the run waits until it times out.
    So each name is an `agentloop.activity_io` constant; the workflow's helpers are read for
    the registered names too (outside `workflows/` a tool may share a word with one: the
    `lookup_outcome` of `@tool`)."""
    trees = {module_name(path): ast.parse(path.read_text()) for path in PACKAGE_DIR.rglob("*.py")}
    registered = frozenset(
        getattr(activity_io, keyword.value.id)
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and activity_defn(node)
        for keyword in node.keywords
        if keyword.arg == "name" and isinstance(keyword.value, ast.Name)
    )
    assert {activity_io.MODEL_CALL, activity_io.RUN_TOOL, activity_io.NOTIFY_WAITING} <= registered
    spelled = [
        f"{module}:{line} spells the activity name {name!r}"
        for module, tree in sorted(trees.items())
        for line, name in sorted(
            spelled_activity_names(
                tree, registered if module.startswith("agentloop.workflows") else frozenset()
            )
        )
    ]
    assert spelled == []


def test_the_name_check_finds_a_spelled_name() -> None:
    source = """
@activity.defn(name="run_tool")
async def run_tool(request): ...
@activity.defn(name=RUN_TOOL)
async def run(request):
    await workflow.execute_activity("frame_team_answer", request)
    await workflow.execute_activity(MODEL_CALL, request)
    await workflow.defn(name="AgentRun")
    await _ask_worker(execute, "describe_run", request)
    return helper("describe_run_later", request.note)
"""
    found = sorted(spelled_activity_names(ast.parse(source), frozenset({"describe_run"})))
    assert found == [(2, "run_tool"), (6, "frame_team_answer"), (9, "describe_run")]


BUILTIN_TOOL_NAMES = frozenset(
    {tool_spec.READ_ARTIFACT, tool_spec.ASK_USER, tool_spec.GIVE_UP, tool_spec.DELEGATE}
)


def spelled_tool_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """`(line, name)` of each built-in tool's name written out where a tool is named: in a
    comparison (`call.name == "ask_user"`) or a `tool(name=...)`. (A stop cause may share the
    word: `give_up` is also one.)"""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            named = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "tool":
            named = [keyword.value for keyword in node.keywords if keyword.arg == "name"]
        else:
            continue
        for text in map(string_of, named):
            if text in BUILTIN_TOOL_NAMES:
                yield node.lineno, text


def test_every_builtin_tool_name_is_its_constant() -> None:
    spelled = [
        f"{module_name(path)}:{line} spells the built-in tool {name!r}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for line, name in sorted(spelled_tool_names(ast.parse(path.read_text())))
    ]
    assert spelled == []


def test_the_tool_name_check_finds_a_spelled_name() -> None:
    source = """
@tool(name="read_artifact")
async def read(ctx, args): ...
questions = [call for call in calls if call.name == "ask_user"]
same = call.name == ASK_USER
stop = Finish("blocked", cause="give_up")
"""
    found = sorted(spelled_tool_names(ast.parse(source)))
    assert found == [(2, "read_artifact"), (4, "ask_user")]
