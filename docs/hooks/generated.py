"""MkDocs hook: the reference pages' generated parts, rendered from the code at build time.

A page holds a marker (`<!-- agentloop:cli -->`, ...) where its generated part goes, so the
CLI's help, the settings and the API list can never drift from what the code says: the parser,
`Settings` with `VARIABLES`, and `agentloop/__init__.py`'s exports are the only sources.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The pages describe this checkout's code, whatever agentloop the environment has installed.
sys.path.insert(0, str(ROOT))

CONTRACT_NAMES = [
    "AgentRunInput",
    "Principal",
    "Limits",
    "FallbackModel",
    "ModelSettings",
    "AgentRunResult",
    "Usage",
    "CallRecord",
    "ApprovalRecord",
    "ResolutionRecord",
    "UnresolvedWrite",
    "ModelSwitch",
    "RunStatusView",
    "LimitsLeft",
    "NoticeSent",
    "ApprovalDecision",
    "ApprovalVerdict",
    "ResolveRequest",
    "UserMessage",
    "CancelRequest",
    "Delivery",
]
"""The contract page's shapes, in reading order: input, result, status, signal payloads."""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def walk_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command and sub-command (`mcp list`, `keys new`), depth first, in parser order."""
    for name, sub in subcommands(parser).items():
        yield (*path, name), sub
        yield from walk_commands(sub, (*path, name))


def cli_markdown() -> str:
    from agentloop.cli.parser import build_parser

    # argparse wraps to the terminal's width; the page should not depend on who builds it.
    os.environ["COLUMNS"] = "100"
    parser = build_parser()
    parts = ["### agentloop", "", "```text", parser.format_help().rstrip(), "```", ""]
    for path, sub in walk_commands(parser):
        parts += [f"### agentloop {' '.join(path)}", "", "```text"]
        parts += [sub.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def field_docstrings(cls: type) -> dict[str, str]:
    """The docstring under each field of a class body (pydantic keeps none of them)."""
    body = ast.parse(inspect.getsource(cls)).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_markdown() -> str:
    from agentloop.runtime.config import CONFIG_FILE_VARIABLE, VARIABLES, Settings

    docs = field_docstrings(Settings)
    rows = [
        "| environment variable | file key | default | what it is |",
        "|---|---|---|---|",
    ]
    for field, info in Settings.model_fields.items():
        variable = VARIABLES[field]
        default = "unset" if info.default is None else f"`{info.default}`"
        if variable.secret:
            default += " (secret: masked by `agentloop config`)"
        rows.append(f"| `{variable.name}` | `{field}` | {default} | {cell(docs.get(field, ''))} |")
    return (
        f"`{CONFIG_FILE_VARIABLE}` names the TOML file whose keys are the file keys below.\n\n"
        + "\n".join(rows)
        + "\n"
    )


def api_markdown() -> str:
    import agentloop
    from agentloop import contract

    parts = []
    by_module: dict[str, list[str]] = {}
    for name in sorted(agentloop.__all__, key=str.lower):
        module = agentloop._EXPORTS[name]
        if module == contract.__name__:
            continue  # on the contract page, with the shapes they are used with
        by_module.setdefault(module, []).append(name)
    for module in sorted(by_module):
        parts += [f"## `{module}`", ""]
        for name in by_module[module]:
            parts += [f"::: {module}.{name}", "    options:", "      heading_level: 3", ""]
    return "\n".join(parts)


def contract_markdown() -> str:
    from agentloop import contract

    parts = []
    for name in CONTRACT_NAMES:
        assert hasattr(contract, name), name
        parts += [f"::: agentloop.contract.{name}", "    options:", "      heading_level: 2", ""]
    return "\n".join(parts)


def metrics_markdown() -> str:
    from agentloop.runtime.metrics import METRICS

    rows = ["| metric | type | labels | what it counts |", "|---|---|---|---|"]
    for metric in METRICS.values():
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "none"
        rows.append(f"| `{metric.exported}` | {metric.kind} | {labels} | {cell(metric.help)} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "<!-- agentloop:cli -->": cli_markdown,
    "<!-- agentloop:settings -->": settings_markdown,
    "<!-- agentloop:api -->": api_markdown,
    "<!-- agentloop:contract -->": contract_markdown,
    "<!-- agentloop:metrics -->": metrics_markdown,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, generate in GENERATORS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
