"""The behaviour sets of releases still in flight, for `workflow.patched` (see
docs/guides/upgrading.md, "Changing workflow code safely").

Release 1.0.0 is the baseline: every behaviour is simply the code, and no run asks
`workflow.patched` for anything. A later release whose workflow code changes what runs already
in flight would do (runs under auto-upgrade, those waiting on people) adds one entry here,
never one per behaviour: its patch id, asked once at the start of a run, with the branches it
guards. The entry leaves, with its branches, once `RETIRE_AFTER_RELEASES` releases have come
after it (`tests/operations/test_release_sets.py` fails when one outlives that).
"""

from __future__ import annotations

from typing import NamedTuple


class ReleaseSet(NamedTuple):
    """The behaviours one release added to runs already in flight, under one patch id."""

    release: str
    """The release that came with it (a version in `RELEASES`)."""
    patch_id: str
    """What a run asks `workflow.patched` for, once, at its start."""


RELEASES: tuple[str, ...] = ("1.0.0",)
"""Every release, oldest first; the last is the package's version (`pyproject.toml`)."""

RETIRE_AFTER_RELEASES = 2
"""How many releases may come after a set's own before it is retired: by then no run of a
worker without it may still be replayed (the upgrade guide's rule, with the namespace's
retention and the deployment's drain under it)."""

RELEASE_SETS: tuple[ReleaseSet, ...] = ()
"""The sets still in force, newest first. None for the first release."""
