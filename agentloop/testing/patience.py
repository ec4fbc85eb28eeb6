"""How long a test waits for a run, a process or a state before it gives up.

One ceiling for every wait, so that a suite passing on a quiet laptop also passes on a
2-core CI machine running other work (load 10): a wait is a condition checked until it holds,
and the ceiling only decides how long a failing test takes to say what it waited for. It is
generous because a wait that holds returns as soon as it does: a quiet machine never waits it
out. `AGENTLOOP_TEST_PATIENCE` multiplies it for slower machines still (`2`: twice as long).
"""

from __future__ import annotations

import os

PATIENCE_VARIABLE = "AGENTLOOP_TEST_PATIENCE"
BASE_CEILING_SECONDS = 120.0
"""The ceiling at patience 1: ten times what the slowest single wait of agentloop's own suite
takes on a quiet machine, enough for one at load 10 on two cores."""


def patience(environ: dict[str, str] | None = None) -> float:
    """The multiplier `AGENTLOOP_TEST_PATIENCE` sets (1 when unset); anything but a positive
    number is refused, naming the variable, rather than turning every wait into none."""
    raw = (os.environ if environ is None else environ).get(PATIENCE_VARIABLE, "").strip()
    if not raw:
        return 1.0
    try:
        factor = float(raw)
    except ValueError:
        factor = 0.0
    if not 0 < factor < float("inf"):
        raise ValueError(f"{PATIENCE_VARIABLE}={raw!r}: expected a positive number, like 2")
    return factor


CEILING_SECONDS = BASE_CEILING_SECONDS * patience()
"""How long a test waits for anything before it gives up, saying what it waited for."""
