"""How many generated cases a fuzz test throws: a short slice in CI (`make test`), thousands
under `make fuzz` (AGENTLOOP_FUZZ=long). Fuzz tests carry the `fuzz` marker.

The cases are drawn from `SEED`: fixed in CI, new on each `make fuzz`, and a failure names it
(AGENTLOOP_FUZZ_SEED=N replays one). AGENTLOOP_FUZZ_CASES=N throws N of each (a medium run)."""

from __future__ import annotations

import os
import random

LONG = os.environ.get("AGENTLOOP_FUZZ", "") == "long"
SEED = int(os.environ.get("AGENTLOOP_FUZZ_SEED", "0")) or (
    random.randrange(1, 2**31) if LONG else 1
)
_CASES = int(os.environ.get("AGENTLOOP_FUZZ_CASES", "0"))


def cases(short: int, long: int) -> int:
    """`short` in CI, `long` under `make fuzz` (or AGENTLOOP_FUZZ_CASES, at most `long`)."""
    if not LONG:
        return short
    return min(_CASES, long) if _CASES else long


def case_rng(case: str) -> random.Random:
    """The generator of one named case, from `SEED`."""
    return random.Random(f"{SEED}/{case}")
