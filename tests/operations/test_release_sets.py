"""The release-set policy (docs/guides/upgrading.md): one behaviour set per release, each
retired once `RETIRE_AFTER_RELEASES` releases came after its own; and no `workflow.patched`
call in the workflow package but those of the sets in force."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from agentloop.releases import (
    RELEASE_SETS,
    RELEASES,
    RETIRE_AFTER_RELEASES,
    ReleaseSet,
)

ROOT = Path(__file__).parents[2]
WORKFLOWS = ROOT / "agentloop" / "workflows"


def overdue(sets: tuple[ReleaseSet, ...], releases: tuple[str, ...]) -> list[str]:
    """The sets that outlived the rule: more than `RETIRE_AFTER_RELEASES` releases came after
    their own (or their release is none of `releases`)."""
    newest = len(releases) - 1
    return [
        f"{s.patch_id} (release {s.release})"
        for s in sets
        if s.release not in releases or newest - releases.index(s.release) > RETIRE_AFTER_RELEASES
    ]


def test_the_newest_release_is_the_packages_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert RELEASES[-1] == version
    assert len(set(RELEASES)) == len(RELEASES)


def test_no_set_outlives_the_releases_the_policy_allows() -> None:
    assert overdue(RELEASE_SETS, RELEASES) == []
    assert len({s.release for s in RELEASE_SETS}) == len(RELEASE_SETS), "one set per release"


@pytest.mark.parametrize(
    ("releases", "late"),
    [(("1.0.0", "1.1.0", "1.2.0"), []), (("1.0.0", "1.1.0", "1.2.0", "1.3.0"), ["s (1.0.0)"])],
    ids=["within", "outlived"],
)
def test_the_rule_counts_the_releases_after_a_sets_own(
    releases: tuple[str, ...], late: list[str]
) -> None:
    sets = (ReleaseSet(release="1.0.0", patch_id="s"),)
    assert [x.replace("release ", "") for x in overdue(sets, releases)] == late


def patched_ids() -> list[tuple[str, str]]:
    """Each `workflow.patched` / `deprecate_patch` call in the workflow package: where, and
    what it asks (its argument as written)."""
    found = []
    for path in sorted(WORKFLOWS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"patched", "deprecate_patch"}
            ):
                found.append((path.name, ast.unparse(node.args[0]) if node.args else ""))
    return found


def test_the_workflow_asks_for_no_patch_but_the_sets_in_force() -> None:
    asked = patched_ids()
    # A release's set is asked for by its id, once: none for the first release.
    assert len(asked) == len(RELEASE_SETS), asked
