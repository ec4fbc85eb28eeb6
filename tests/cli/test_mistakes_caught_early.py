"""A newcomer's mistakes, caught where they are made (no server needed): a script file with a
misspelled key or a syntax error is refused by `agentloop scripts check` and by `agentloop dev
--scripts` before anything starts, naming file, line and key; a tool declared without
`effect=` warns at its declaration; an unknown tool name answers "did you mean"."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import agentloop
from agentloop.events import ToolCall
from agentloop.policies.validation import Refused, validate_call
from agentloop.tool_spec import ToolSpec
from agentloop.tools.options import UndeclaredEffectWarning
from agentloop.tools.registry import ToolRegistry
from agentloop.tools.source import ToolSourceError
from tests.cli.test_cli import agentloop as agentloop_cli
from tests.cli.test_cli import assert_no_traceback, process_env

MISSPELLED = """{
  "turns": [
    {"text": "Looking it up."},
    {
      "tool_call": [{"id": "c1", "name": "get_weather", "arguments": {}}]
    }
  ]
}
"""
"""`tool_call` for `tool_calls` on line 5: once silently played as an empty answer."""
BROKEN_TOML = """[[turns]]
text = "an unfinished string
"""
WRONG_TYPE = """[[turns]]
text = "one"

[[turns]]
text = "two"
[turns.usage]
prompt_tokens = "many"
completion_tokens = 1
"""
UNDECLARED_TOOL = '''
import agentloop


@agentloop.tool
async def create_ticket(title: str) -> str:
    """Open a ticket."""
    return title
'''


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "misspelled.json").write_text(MISSPELLED)
    (folder / "broken.toml").write_text(BROKEN_TOML)
    (folder / "wrong_type.toml").write_text(WRONG_TYPE)
    (folder / "fine.json").write_text('{"turns": [{"text": "done"}]}')
    return folder


def assert_names_each_problem(text: str, folder: Path) -> None:
    assert f"{folder / 'misspelled.json'}:5: turns.1.tool_call: unknown key 'tool_call';" in text
    assert "did you mean 'tool_calls'?" in text
    assert f"{folder / 'broken.toml'}:2: not valid TOML" in text
    assert f"{folder / 'wrong_type.toml'}:7: turns.1.usage.prompt_tokens:" in text
    assert "valid integer" in text


async def test_scripts_check_names_file_line_and_key_of_each_problem(scripts: Path) -> None:
    checked = await agentloop_cli("scripts", "check", str(scripts), env=process_env())
    assert checked.returncode == 1, checked.explain()
    assert_no_traceback(checked)
    assert_names_each_problem(checked.stdout, scripts)
    assert "ok       fine" in checked.stdout

    fine = await agentloop_cli("scripts", "check", str(scripts / "fine.json"), env=process_env())
    assert fine.returncode == 0, fine.explain()


async def test_dev_refuses_to_start_on_a_broken_script_and_warns_of_an_undeclared_effect(
    scripts: Path, tmp_path: Path
) -> None:
    (tmp_path / "team_tickets.py").write_text(UNDECLARED_TOOL)
    env = process_env(PYTHONPATH=str(tmp_path))
    refused = await agentloop_cli(
        "dev", "--scripts", str(scripts), "--tools", "team_tickets", "--state-dir",
        str(tmp_path / "state"), env=env, cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2, refused.explain()
    assert_no_traceback(refused)
    assert "not started" in refused.stderr and "agentloop scripts check" in refused.stderr
    assert_names_each_problem(refused.stderr, scripts.resolve())
    warned = [line for line in refused.stderr.splitlines() if "UndeclaredEffectWarning" in line]
    assert len(warned) == 1, refused.explain()
    assert "team_tickets.py" in warned[0] and "'create_ticket'" in warned[0]
    assert 'defaults to effect="write"' in warned[0]
    assert not (tmp_path / "state" / "temporal.db").exists()  # nothing started


def test_a_tool_declared_without_effect_warns_once_naming_it_and_its_default() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @agentloop.tool(effect="read")
        async def read_ticket(ticket_id: str) -> str:
            return ticket_id

        @agentloop.tool
        async def create_ticket(title: str) -> str:
            return title

    [warning] = caught
    assert warning.category is UndeclaredEffectWarning
    assert warning.filename == __file__  # the declaration, not agentloop's code
    assert "'create_ticket'" in str(warning.message) and 'effect="write"' in str(warning.message)
    assert create_ticket.spec.effect == "write" and read_ticket.spec.effect == "read"


async def test_an_unknown_tool_name_answers_did_you_mean() -> None:
    @agentloop.tool(effect="write")
    async def create_ticket(title: str) -> str:
        return title

    registry = ToolRegistry([create_ticket])
    with pytest.raises(
        ToolSourceError,
        match=re.escape("unknown tool 'create_tiket'; did you mean 'create_ticket'?"),
    ):
        await registry.routing().offer(["create_tiket"])
    # A model calling a misspelled tool is told the same.
    call = ToolCall(call_id="c1", name="create_tiket", arguments={}, args_digest="d")
    spec = ToolSpec(name="create_ticket", effect="write")
    verdict = validate_call(call, {"create_ticket": spec}, {"create_ticket"})
    assert isinstance(verdict, Refused)
    assert "did you mean 'create_ticket'?" in verdict.message
