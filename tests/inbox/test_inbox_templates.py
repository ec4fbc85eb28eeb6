"""The inbox's HTML comes from its templates only, with autoescaping on: no Python string under
agentloop/inbox/ holds an HTML tag, and a value from outside renders as text."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path

import agentloop.inbox
from agentloop.inbox.pages import environment
from agentloop.inbox.reading import WaitingItem

INBOX = Path(agentloop.inbox.__file__).parent
TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(\s[^<>]*)?/?>|<!doctype", re.IGNORECASE)


def strings_in(source: str) -> list[str]:
    """Every string constant of a module, f-strings' literal parts included."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_the_tag_finder_finds_tags_however_they_are_built() -> None:
    found = strings_in(
        'a = "<p>"\nb = f"<td class=\\"x\\">{b}"\nc = "</ul>"\nd = "<!doctype html>"\n'
        'e = "user -> tenants, a < b > c"'
    )
    tags = {s for s in found if TAG.search(s)}
    assert tags == {"<p>", '<td class="x">', "</ul>", "<!doctype html>"}


def test_no_html_tag_is_built_in_a_python_string_of_the_inbox() -> None:
    modules = sorted(INBOX.rglob("*.py"))
    assert len(modules) >= 8  # the package is read, not an empty folder
    tags = {
        f"{path.relative_to(INBOX)}: {text!r}"
        for path in modules
        for text in strings_in(path.read_text())
        if TAG.search(text)
    }
    assert tags == set()


def test_a_value_from_outside_renders_as_text_in_a_row() -> None:
    hostile = "<script>alert(1)</script>\"'&"
    item = WaitingItem(
        workflow_id=hostile,
        kind="approval",
        tenant="default",
        task=hostile,
        tool="reserve_seat",
        call_id="c_1",
        approvers=[hostile],
        since=None,
    )
    now = datetime.now(UTC)
    html = environment().get_template("inbox_rows.html").render(items=[item], counts="1", now=now)
    assert "<script>" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;") == 3
