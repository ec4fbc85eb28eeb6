"""How many generated cases a fuzz test throws: a short slice in CI (`make test`), thousands
under `make fuzz` (AGENTLOOP_FUZZ=long). Fuzz tests carry the `fuzz` marker."""

from __future__ import annotations

import os

LONG = os.environ.get("AGENTLOOP_FUZZ", "") == "long"


def cases(short: int, long: int) -> int:
    """`short` in CI, `long` under `make fuzz`."""
    return long if LONG else short
