"""How long a test waits for a run, a process or a state before it gives up.

One ceiling for every wait, so that a suite passing on a quiet laptop also passes on a
2-core CI machine running other work (load 10): a wait is a condition checked until it holds,
and the ceiling only decides how long a failing test takes to say what it waited for. It is
generous because a wait that holds returns as soon as it does: a quiet machine never waits it
out. `AGENTLOOP_TEST_PATIENCE` multiplies it for slower machines still (`2`: twice as long).
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from agentloop.contract import RunStatusView
from agentloop.run_client import NOT_ANSWERED, RunClient

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
SERVER_START = timedelta(seconds=CEILING_SECONDS)
"""How long a test waits for a Temporal dev or test server it starts to answer (the SDK's
`dev_server_startup_timeout`): its own 5 s is less than one takes to start beside six busy
processes on two cores."""


QUERY_SECONDS = 15.0
"""How long one `status` query may take before it is asked again (the server gives up on a
query sooner, and says so: `NOT_ANSWERED`)."""
async def status_or_why_not(handle: WorkflowHandle[Any, Any]) -> RunStatusView | str:
    """The run's `status` query, or why it was not answered this time (`NOT_ANSWERED`, or no
    answer within `QUERY_SECONDS`): a wait asks again. Any other refusal (no such run, a query
    the workflow rejects) raises."""
    try:
        run = RunClient(handle._client, handle.id, run_id=handle.run_id)
        view = await asyncio.wait_for(run.status(), QUERY_SECONDS)
    except TimeoutError:
        return f"its status query was not answered in {QUERY_SECONDS:g} s"
    except RPCError as exc:
        if exc.status not in NOT_ANSWERED:
            raise
        return f"its status query was not answered ({exc.status.name}: {exc.message})"
    return view
