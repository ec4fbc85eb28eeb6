"""The documentation stays true: the site builds with `mkdocs build --strict` (no broken link,
no page left out of the navigation, the generated reference pages rendered), and what the
README and docs/ name exists: modules, CLI commands and their options, configuration keys, and
Python snippets that compile and whose agentloop imports import.

docs/concepts/design.md is the design card, kept as written: it names what is planned too
(`agentloop.watch`), so the name checks leave it out; the build still checks its links.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.cli.parser import build_parser
from agentloop.runtime import config
from agentloop.runtime.config import CONFIG_FILE_VARIABLE, VARIABLES, Settings

ROOT = Path(__file__).resolve().parents[2]
DESIGN_CARD = ROOT / "docs" / "concepts" / "design.md"
DOCUMENTS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if p != DESIGN_CARD),
]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
MODULE_PATH = re.compile(r"(?<![\w/.-])agentloop/[\w/.-]*")
DOTTED_NAME = re.compile(r"(?<![\w/.-])agentloop(?:\.[A-Za-z_]\w*)+")
FILE_SUFFIXES = {"toml", "pem", "db", "yaml", "yml", "json"}
"""`agentloop.toml`, `agentloop.yaml`: files named after the project, not modules."""
COMMAND = re.compile(r"(?:^|(?<=[\s(=;&|]))agentloop\s+([a-z][\w-]*)((?:\s+[^\s#]+)*)")
CONFIG_KEY = re.compile(r"(?<![\w])(?:AGENTLOOP|AGENT_LOOP|TEMPORAL)_[A-Z0-9_]*[A-Z0-9]")


def document_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_blocks(text: str, language: str | None = None) -> Iterator[tuple[str, str]]:
    for match in FENCE.finditer(text):
        if language is None or match.group(1) == language:
            yield match.group(1), match.group(2)


def command_texts(text: str) -> Iterator[str]:
    """Where a document shows a command: inline code, shell blocks (continuation lines joined),
    and indented code lines; never prose, which says "agentloop keeps ..." freely."""
    for language, block in code_blocks(text):
        if language != "python":
            yield from block.replace("\\\n", " ").splitlines()
    outside = FENCE.sub("", text)
    yield from INLINE_CODE.findall(outside)
    yield from (line for line in outside.splitlines() if line.startswith("    "))


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_problems(text: str) -> list[str]:
    parser = build_parser()
    problems = []
    for line in command_texts(text):
        for match in COMMAND.finditer(line.split(" # ")[0]):
            name, rest = match.group(1), match.group(2).split()
            commands = subcommands(parser)
            if name not in commands:
                problems.append(f"`agentloop {name}`: no such command")
                continue
            command = commands[name]
            nested = subcommands(command)
            if nested:
                if not rest or rest[0] not in nested:
                    problems.append(f"`agentloop {name} {' '.join(rest[:1])}`: no such command")
                    continue
                command = nested[rest[0]]
            for option in re.findall(r"(?<!\S)--[a-z][\w-]*", " ".join(rest)):
                if option not in command._option_string_actions:
                    problems.append(f"`agentloop {name}` has no option {option}")
    return problems


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attribute in parts[split:]:
                value = getattr(value, attribute)
        except AttributeError:
            return False
        return True
    return False


@functools.cache
def known_keys() -> frozenset[str]:
    """The settings' variables, and the other variables code here reads (the compose file's,
    the CLI's `AGENTLOOP_APPROVER_KEY`, the test and bench knobs)."""
    keys = {variable.name for variable in VARIABLES.values()} | {CONFIG_FILE_VARIABLE}
    # Where settings may be given as files (`NAME_FILE=PATH`), each variable has that form too.
    file_suffix = getattr(config, "FILE_SUFFIX", None)
    if file_suffix:
        keys |= {variable.name + file_suffix for variable in VARIABLES.values()}
    sources = [*ROOT.joinpath("agentloop").rglob("*.py"), *ROOT.joinpath("bench").rglob("*.py")]
    sources += [*ROOT.joinpath("tests").rglob("*.py"), *ROOT.joinpath("examples").rglob("*.py")]
    sources += [ROOT / "docker-compose.yml", ROOT / "Dockerfile", ROOT / "Makefile"]
    for source in sources:
        if source != Path(__file__).resolve():
            keys |= set(CONFIG_KEY.findall(source.read_text()))
    return frozenset(keys)


@pytest.fixture(scope="module")
def documents() -> dict[str, str]:
    return {document_id(path): path.read_text() for path in DOCUMENTS}


def test_the_site_builds_strict_with_its_generated_pages(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for name, command in subcommands(build_parser()).items():
        assert f"agentloop {name}" in cli
        for nested in subcommands(command):
            assert f"agentloop {name} {nested}" in cli
    settings = (site / "reference" / "configuration" / "index.html").read_text()
    assert all(variable.name in settings for variable in VARIABLES.values())
    contract = (site / "reference" / "contract" / "index.html").read_text()
    for shape in ("AgentRunInput", "AgentRunResult", "RunStatusView", "ApprovalDecision"):
        assert f'id="agentloop.contract.{shape}"' in contract
    api = (site / "reference" / "api" / "index.html").read_text()
    assert 'id="agentloop.client.start_run"' in api
    assert 'id="agentloop.tools.decorator.tool"' in api


def test_every_setting_is_described_for_the_configuration_page() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs/hooks/generated.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    described = hooks.field_docstrings(Settings)
    assert [field for field in Settings.model_fields if not described.get(field)] == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=document_id)
def test_named_modules_exist(path: Path) -> None:
    text = path.read_text()
    missing = [
        found.rstrip(".")
        for found in MODULE_PATH.findall(text)
        if not (ROOT / found.rstrip(".")).exists()
    ]
    missing += [
        dotted
        for dotted in DOTTED_NAME.findall(text)
        if dotted.rsplit(".", 1)[-1] not in FILE_SUFFIXES and not resolves(dotted)
    ]
    assert missing == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=document_id)
def test_named_commands_and_options_exist(path: Path) -> None:
    assert command_problems(path.read_text()) == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=document_id)
def test_named_configuration_keys_exist(path: Path) -> None:
    unknown = set(CONFIG_KEY.findall(path.read_text())) - known_keys()
    assert unknown == set()


@pytest.mark.parametrize("path", DOCUMENTS, ids=document_id)
def test_snippets_compile_and_their_agentloop_imports_import(path: Path) -> None:
    text = path.read_text()
    for number, (_, block) in enumerate(code_blocks(text, "python")):
        tree = ast.parse(compile(block, f"{path.name} python block {number}", "exec", 0x400))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "agentloop":
                        importlib.import_module(alias.name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentloop"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert resolves(f"{module.__name__}.{alias.name}"), alias.name
    for _, block in code_blocks(text, "toml"):
        tomllib.loads(block)


def test_readme_links_name_files_that_exist() -> None:
    """The README's links are paths from the repository's root (it is outside the site's
    build), and it links every guide."""
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)", text)
    assert [link for link in links if "://" not in link and not (ROOT / link).exists()] == []
    guides = {str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guides").glob("*.md")}
    assert sorted(guides - set(links)) == []


def test_the_checks_catch_what_does_not_exist() -> None:
    assert command_problems("`agentloop launch RUN`") == ["`agentloop launch`: no such command"]
    assert command_problems("```sh\nagentloop run TASK \\\n    --tool x --wait\n```\n") == [
        "`agentloop run` has no option --wait"
    ]
    assert command_problems("`agentloop keys rotate`") == [
        "`agentloop keys rotate`: no such command"
    ]
    assert command_problems("agentloop keeps each piece once; `agentloop mcp list`") == []
    assert not resolves("agentloop.client.no_such_name")
    assert not resolves("agentloop.no_such_module")
    assert resolves("agentloop.start_run")
    assert "AGENTLOOP_NO_SUCH_KEY" not in known_keys()
    assert {"AGENTLOOP_STORE_URL", "TEMPORAL_ADDRESS", "AGENT_LOOP_TASK_QUEUE"} <= known_keys()
