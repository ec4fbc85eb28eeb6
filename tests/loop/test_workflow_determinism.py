"""AgentRun's code cannot read a clock, draw a random number, or reach the outside world.

Workers run AgentRun unsandboxed by default (`agentloop.worker.workflow_runner` says why), and
Temporal's sandbox would not catch these in any case: it restricts only the workflow's own
module, while the loop, the steps and the policies are passed through. So every agentloop
module the workflow imports, followed from `agentloop.workflows.agent_run`, is read here:

- it imports only modules on `ALLOWED_IMPORTS` (deterministic for the same input) and other
  agentloop modules (checked in turn);
- it touches no clock, event loop, thread or environment (`FORBIDDEN_ATTRIBUTES`), except
  through `workflow.` (`workflow.now()` is the workflow's clock), and no builtin that does
  I/O or differs between processes (`FORBIDDEN_BUILTINS`, called or passed on).

A module that must be imported but is deterministic goes on `ALLOWED_IMPORTS` with a reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentloop

ROOT = "agentloop.workflows.agent_run"
PACKAGE_DIR = Path(agentloop.__file__).parent

ALLOWED_IMPORTS = frozenset(
    {
        "__future__",
        "base64",  # the stream's wire format (`run_events.wire_payload`)
        "asyncio",  # in a workflow, Temporal's own event loop: sleep is a durable timer
        "collections",
        "collections.abc",
        "contextlib",
        "dataclasses",
        "datetime",  # types and arithmetic; the clock only through workflow.now()
        "difflib",  # "did you mean" for an unknown tool name: pure, on bounded names
        "enum",
        "functools",
        "hashlib",
        "hmac",  # the stream's seals (`agentloop.stream_seals`): pure, keyed by the caller
        "itertools",
        "json",
        "jsonschema",  # argument validation: pure
        "jsonschema.exceptions",
        "math",
        "pydantic",
        "re",
        "re2",  # RE2: patterns in linear time, the same answer everywhere
        "temporalio",
        "temporalio.api.common.v1",  # payload messages (signals are taken raw)
        "temporalio.common",
        # the run's stream (`workflows/stream.py`): its workflow side keeps a log, answers
        # polls and takes publishes through the workflow API only; the package also holds the
        # client side (uuid, the clock), which the workflow never calls
        "temporalio.contrib.workflow_streams",
        "temporalio.exceptions",
        "temporalio.workflow",
        "typing",
    }
)
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "now",
        "utcnow",
        "today",
        "time",
        "time_ns",
        "monotonic",
        "perf_counter",
        "get_event_loop",
        "get_running_loop",
        "new_event_loop",
        "run_in_executor",
        "to_thread",
        "getenv",
        "environ",
        "urandom",
    }
)
FORBIDDEN_BUILTINS = frozenset(
    {"open", "input", "print", "hash", "id", "breakpoint", "exec", "eval", "__import__"}
)
"""`hash` and `id` differ between processes (string hashing is salted per process)."""


@dataclass(frozen=True)
class Problem:
    module: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.what}"


def module_file(name: str) -> Path | None:
    """The source of agentloop module `name`, or None when `name` is not a module (an
    attribute of one)."""
    path = PACKAGE_DIR.parent.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """`(line, module)` for each import in `tree`, functions' own imports too; `from m import
    n` counts as module `m.n` when that is an agentloop module, else as `m`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "agentloop imports absolutely"
            base = node.module or ""
            for alias in node.names:
                full = f"{base}.{alias.name}"
                is_module = base.startswith("agentloop") and module_file(full) is not None
                found.append((node.lineno, full if is_module else base))
    return found


def problems_in(module: str, source: str) -> list[Problem]:
    """What in `source` could make a replay differ, other than its agentloop imports."""
    tree = ast.parse(source)
    problems = [
        Problem(module, line, f"imports {name}")
        for line, name in imported_modules(tree)
        if not name.startswith("agentloop.") and name not in ALLOWED_IMPORTS
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            receiver = node.value
            if not (isinstance(receiver, ast.Name) and receiver.id == "workflow"):
                problems.append(Problem(module, node.lineno, f"uses .{node.attr}"))
        elif (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in FORBIDDEN_BUILTINS
        ):
            problems.append(Problem(module, node.lineno, f"uses {node.id}"))
    return problems


def workflow_modules() -> dict[str, str]:
    """Module name -> source, for every agentloop module the workflow imports."""
    sources: dict[str, str] = {}
    pending = [ROOT]
    while pending:
        name = pending.pop()
        path = module_file(name)
        if name in sources or path is None:
            continue
        sources[name] = path.read_text()
        pending += [
            imported
            for _, imported in imported_modules(ast.parse(sources[name]))
            if imported.startswith("agentloop.")
        ]
    return sources


def test_the_walk_reaches_every_module_of_the_loop_the_steps_and_the_policies() -> None:
    modules = workflow_modules()
    loop_modules = {
        f"agentloop.workflows.loop.{path.stem}"
        for path in (PACKAGE_DIR / "workflows" / "loop").glob("*.py")
        if path.stem != "__init__"
    }
    shell_modules = {
        f"agentloop.workflows.{path.stem}"
        for path in (PACKAGE_DIR / "workflows").glob("*.py")
        if path.stem != "__init__"
    }
    assert len(loop_modules) >= 8 and len(shell_modules) >= 7
    for name in (
        ROOT,
        "agentloop.workflows.loop",
        *sorted(loop_modules),
        *sorted(shell_modules),
        "agentloop.policies.budgets",
        "agentloop.policies.validation",
        "agentloop.transcript",
    ):
        assert name in modules, name


def test_no_workflow_module_reads_a_clock_randomness_or_the_outside_world() -> None:
    problems = [
        str(problem)
        for name, source in sorted(workflow_modules().items())
        for problem in problems_in(name, source)
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("import random", "imports random"),
        ("import time", "imports time"),
        ("from os import environ", "imports os"),
        ("from agentloop.workflows import loop", None),
        ("stamp = datetime.now()", "uses .now"),
        ("stamp = datetime.datetime.utcnow()", "uses .utcnow"),
        ("day = date.today()", "uses .today"),
        ("loop = asyncio.get_running_loop()", "uses .get_running_loop"),
        ("stamp = workflow.now()", None),
        ("text = open('notes.txt').read()", "uses open"),
        ("order = sorted(names, key=hash)", "uses hash"),
        ("key = hash(name)", "uses hash"),
        ("print(state)", "uses print"),
        ("order = sorted(names, key=len)", None),
    ],
)
def test_the_check_finds_each_kind_of_problem(line: str, expected: str | None) -> None:
    source = f"def step(state, names, name):\n    {line}\n"
    found = [problem.what for problem in problems_in("example", source)]
    assert found == ([] if expected is None else [expected])
