"""Who wrote a stream item: the seal a worker's activities put on what they publish to a run's
stream, and its check (docs/guides/streaming.md, "Who wrote it").

Anyone who may signal a run may send its stream's publish signal, so an item that came by the
signal is the run's own only when it is sealed: an HMAC-SHA256, with the key the worker holds,
over the run (workflow id and run id), the publisher (a random id per model call attempt), the
item's number for that publisher, and the item itself. The run keeps, per publisher, the last
number it took, so a sealed item copied out of history and sent again is not taken twice, and
the run id keeps it from counting in another run.

The key never travels: a worker installs it here once (`use_key`: `AGENTLOOP_STREAM_KEY`, or
one drawn per process when that is unset), its model activity seals with it and the workflow,
in the same process, checks with it. The check issues no command, so a process without the key
(`agentloop replay`, a worker with another key) reads every sealed item as foreign: the stream
it holds is then different, and no replay is. With several workers on a task queue, give them
one `AGENTLOOP_STREAM_KEY`: a run's model call may run on another worker than the run's next
workflow task, and the text it sealed with another key reads as foreign there. A production
worker refuses to start without it (`Settings.production_problems`); the per-process key is
for a single worker process (development, `agentloop dev`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

SEAL_FIELDS = ("publisher", "seq", "seal")
"""The fields a sealed item carries beside its `RunEvent` fields."""
MAX_PUBLISHER_CHARS = 64

_installed: list[bytes] = []
"""The worker's key (at most one: the last installed)."""


def use_key(key: bytes) -> None:
    """The key this process's activities seal with and its workflows check with."""
    _installed[:] = [key]


def worker_key() -> bytes | None:
    return _installed[0] if _installed else None


def derived_key(configured: str) -> bytes:
    """The key of an `AGENTLOOP_STREAM_KEY` value (any length of secret text)."""
    return hashlib.sha256(b"agentloop stream seal\0" + configured.encode()).digest()


def _seal(key: bytes, workflow_id: str, run_id: str, item: dict[str, Any]) -> str:
    signed = json.dumps(
        [workflow_id, run_id, item], sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()


def sealed(
    key: bytes, workflow_id: str, run_id: str, publisher: str, seq: int, item: dict[str, Any]
) -> dict[str, Any]:
    """`item` as an activity publishes it: with its publisher, number and seal."""
    signed = {**item, "publisher": publisher, "seq": seq}
    return {**signed, "seal": _seal(key, workflow_id, run_id, signed)}


@dataclass(frozen=True)
class Opened:
    """A sealed item whose seal holds: who published it, its number, the item itself."""

    publisher: str
    seq: int
    item: dict[str, Any]


def opened(key: bytes | None, workflow_id: str, run_id: str, value: object) -> Opened | None:
    """`value` as the run's own (its seal holds for this run under `key`), or None."""
    if key is None or not isinstance(value, dict):
        return None
    seal, publisher, seq = value.get("seal"), value.get("publisher"), value.get("seq")
    if not (
        isinstance(seal, str)
        and isinstance(publisher, str)
        and len(publisher) <= MAX_PUBLISHER_CHARS
        and type(seq) is int
    ):
        return None
    signed = {name: field for name, field in value.items() if name != "seal"}
    if not hmac.compare_digest(seal.encode(), _seal(key, workflow_id, run_id, signed).encode()):
        return None
    item = {name: field for name, field in signed.items() if name not in SEAL_FIELDS}
    return Opened(publisher, seq, item)
