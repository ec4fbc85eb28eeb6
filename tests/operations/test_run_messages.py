"""A run's messages (its signals, its update, its query) go by one set of names, the
`agentloop.contract` constants, which the workflow takes them by and one client sends them
by (`agentloop.run_client.RunClient`): a name spelled out on one side can drift from the
other's, and the run then refuses (or never answers) what was sent."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from temporalio import workflow

from agentloop import contract
from agentloop.workflows import inbound
from agentloop.workflows.agent_run import AgentRun
from tests.loop.test_workflow_determinism import PACKAGE_DIR
from tests.operations.test_layers import module_name, string_of

ROOT = PACKAGE_DIR.parent
SHIPPED = [PACKAGE_DIR, ROOT / "bench", ROOT / "scripts", ROOT / "examples", ROOT / "worker.py"]
"""Every place code that talks to runs is shipped from (the tests may send anything: they
send malformed and unknown messages on purpose)."""
MESSAGE_CALLS = frozenset({"signal", "execute_update", "start_update", "query"})
"""Temporal's ways to send a run a message by name (its first argument or `name=`), and
(`workflow.signal`, `workflow.query`, and `workflow.update`) to declare the name a workflow
takes one by."""
RUN_CLIENT = "agentloop.run_client"
WORKFLOWS = "agentloop.workflows"


def shipped_modules() -> Iterator[tuple[str, ast.AST]]:
    for place in SHIPPED:
        for path in sorted([place] if place.is_file() else place.rglob("*.py")):
            name = module_name(path) if place == PACKAGE_DIR else str(path.relative_to(ROOT))
            yield name, ast.parse(path.read_text())


def message_calls(tree: ast.AST) -> Iterator[ast.Call]:
    """Each `x.signal(...)`, `x.query(...)` and the like (not the stdlib's `signal.signal`,
    nor a dict's `update`)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = node.func.value
        named = receiver.id if isinstance(receiver, ast.Name) else ""
        if (node.func.attr in MESSAGE_CALLS and named != "signal") or (
            node.func.attr == "update" and named == "workflow"
        ):
            yield node


def spelled_message_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """`(line, name)` of each message name written out as a string: the first argument or
    `name=` of a message call, and any `start_signal=`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            spelled = [k.value for k in node.keywords if k.arg == "start_signal"]
            yield from ((node.lineno, s) for s in map(string_of, spelled) if s is not None)
    for call in message_calls(tree):
        spelled = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "name")]
        yield from ((call.lineno, s) for s in map(string_of, spelled) if s is not None)


def test_no_message_name_is_spelled_out() -> None:
    spelled = [
        f"{module}:{line} spells the message name {name!r}"
        for module, tree in shipped_modules()
        for line, name in sorted(spelled_message_names(tree))
    ]
    assert spelled == []


def test_only_the_run_client_sends_a_run_a_message() -> None:
    """Outside the workflow (which signals its children) the library sends through
    `RunClient` only: one place that sends each message with the shape it takes."""
    senders = [
        f"{module}:{call.lineno} calls .{getattr(call.func, 'attr', '')}() on a run"
        for module, tree in shipped_modules()
        if module.startswith("agentloop.")
        and module != RUN_CLIENT
        and not module.startswith(WORKFLOWS)
        for call in message_calls(tree)
    ]
    assert senders == []


def test_the_workflow_takes_its_messages_by_the_contracts_names() -> None:
    definition = workflow._Definition.from_class(AgentRun)
    assert definition is not None
    assert set(definition.updates) == {contract.DECIDE_UPDATE, contract.DELIVER_UPDATE}
    assert contract.STATUS_QUERY in definition.queries
    assert set(inbound.SIGNAL_SHAPES) == {
        contract.APPROVE_SIGNAL,
        contract.RESOLVE_SIGNAL,
        contract.MESSAGE_SIGNAL,
        contract.CANCEL_SIGNAL,
    }
    assert set(inbound.UPDATE_SHAPES) == {contract.DECIDE_UPDATE, contract.DELIVER_UPDATE}


def test_the_name_checks_find_a_spelled_name_and_a_sender(tmp_path: Path) -> None:
    source = """
await handle.signal("approve", decision)
await handle.signal(APPROVE_SIGNAL, decision)
await handle.execute_update("decide_approval", decision, result_type=ApprovalVerdict)
view = await handle.query(name="status")
await client.start_workflow(WORKFLOW_NAME, run_input, start_signal="message")
signal.signal(signal.SIGUSR1, handler)
settings.update(name="x")
@workflow.update(name="decide")
def decide(self): ...
"""
    tree = ast.parse(source)
    assert sorted(spelled_message_names(tree)) == [
        (2, "approve"),
        (4, "decide_approval"),
        (5, "status"),
        (6, "message"),
        (9, "decide"),
    ]
    assert sorted(call.lineno for call in message_calls(tree)) == [2, 3, 4, 5, 9]
