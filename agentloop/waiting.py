"""What a run waiting for a person says of it in its memo, so the inbox lists it from one
visibility list without asking each run. Display only: the run page
and every decision read the run's own `status`."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, Field

from agentloop.contract import Phase

WAITING_MEMO = "agentloop_waiting"
"""The memo key under which a run waiting for a person says what for (`WaitingMemo`)."""
WaitingKind = Literal["approval", "question", "unknown_write"]
WAITING_PHASES: dict[Phase, WaitingKind] = {
    "awaiting_approval": "approval",
    "awaiting_input": "question",
    "awaiting_reconciliation": "unknown_write",
}
"""The phases in which a run waits for a person, and what for; in any other it is working."""


class WaitingCall(BaseModel):
    """One thing a run waits on a person for: a decision, an answer, an unknown write's
    outcome."""

    kind: WaitingKind
    call_id: str
    tool: str
    approvers: list[str] = Field(default_factory=list)
    """Who may decide an approval (empty: any approver)."""
    since: AwareDatetime | None = None
    text: str = ""
    """The question asked, or what is known of an unknown write (clipped in a memo)."""


class WaitingMemo(BaseModel):
    """What an indexed run waiting for a person keeps in its memo under `WAITING_MEMO`
    , so the inbox lists it from one visibility list. Display only:
     the run page and every decision read the run's own `status`."""

    run_id: str
    """The Temporal run that wrote it: a memo a starter set, or one carried over a
    continue-as-new, names another run (or none), and is not taken."""
    tenant: str
    task: str
    """The start of the task (`MAX_MEMO_TEXT_CHARS`)."""
    until: AwareDatetime | None = None
    """When the wait times out."""
    calls: list[WaitingCall] = Field(default_factory=list)
    left_out: int = 0
    """Calls waiting that the memo had no room for (`MAX_WAITING_MEMO_BYTES`): the inbox
    asks such a run's `status` instead."""
    seal: str = ""
    """The worker's vouching for the rest (`vouched`): an HMAC-SHA256 under its memo key, over
    the workflow id and every other field. Empty: written where no worker key was (a replay)."""


MAX_MEMO_TEXT_CHARS = 120
"""How much of the task, a question or what is known of a write a `WaitingMemo` holds."""
MAX_WAITING_MEMO_BYTES = 1_800
"""How large a `WaitingMemo` grows, as JSON: every waiting run's memo comes with each
visibility list, and Temporal logs a warning for each memo past 2 KB (`limit.memoSize.warn`)."""
SEAL_BYTES = len(',"seal":""') + 64
"""What the seal adds to a memo, as JSON (64 hex digits)."""


# Who wrote a memo. Anyone who may start a workflow may start an `AgentRun` with any memo and
# search attributes (on a task queue no worker polls, it never runs: nothing it claims is ever
# corrected). So the inbox lists a run only when its memo is sealed by a worker: the workflow
# seals what it upserts with a key derived from the worker's stream key (`memo_key`: a holder
# of it checks seals and makes memo seals, never stream seals), over the workflow id and the
# memo, which names its run id: a memo copied onto another run does not hold there.
def memo_key(worker_key: bytes | None) -> bytes | None:
    """The key a worker holding `worker_key` (`stream_seals.worker_key`) seals memos with
    (None: no key, none)."""
    if worker_key is None:
        return None
    return hmac.new(worker_key, b"agentloop waiting memo", hashlib.sha256).digest()


def _memo_seal(key: bytes, workflow_id: str, fields: dict[str, Any]) -> str:
    signed = json.dumps(
        [workflow_id, fields], sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()


def sealed_memo(key: bytes | None, workflow_id: str, memo: dict[str, Any]) -> dict[str, Any]:
    """`memo` (a `WaitingMemo` as JSON) as the workflow upserts it: sealed under `key`
    (None: unsealed, as a replay without the key writes it)."""
    fields = {name: value for name, value in memo.items() if name != "seal"}
    if key is None:
        return fields
    return {**fields, "seal": _memo_seal(key, workflow_id, fields)}


def vouched(key: bytes | None, workflow_id: str, memo: object) -> bool:
    """`memo` (as decoded from a run's memo) was sealed under `key` for `workflow_id`."""
    if key is None or not isinstance(memo, dict):
        return False
    seal = memo.get("seal")
    if not isinstance(seal, str):
        return False
    fields = {name: value for name, value in memo.items() if name != "seal"}
    return hmac.compare_digest(seal.encode(), _memo_seal(key, workflow_id, fields).encode())


# A run's page in the inbox, whatever its workflow id holds (the inbox's links and the
# notices' alike). The server routes on the path after percent-decoding it, and a browser
# resolves `.` and `..` segments before it asks: a percent-encoded id with `/` would reach
# another route, `..` the home page. So an id is written with an escape neither undoes: each
# byte of its UTF-8 outside letters, digits, `_`, `-` and `.` becomes `~XX` (hex, upper
# case), and so does a leading `.` (a segment is never `.` or `..`). Plain ids read as they are.
PLAIN_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
ENCODED_ID = re.compile(r"(?:[A-Za-z0-9_.\-]|~[0-9A-F]{2})+")


def encode_id(workflow_id: str) -> str:
    return "".join(
        chr(byte)
        if byte in PLAIN_ID_BYTES and not (i == 0 and byte == ord("."))
        else f"~{byte:02X}"
        for i, byte in enumerate(workflow_id.encode())
    )


def decode_id(segment: str) -> str | None:
    """The workflow id `segment` spells, or None when no `encode_id` wrote it."""
    if not ENCODED_ID.fullmatch(segment):
        return None
    raw = re.sub(r"~([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), segment)
    try:
        workflow_id = raw.encode("latin-1").decode()
    except UnicodeDecodeError:
        return None
    return workflow_id if encode_id(workflow_id) == segment else None


def run_path(workflow_id: str) -> str:
    """The run's page in the inbox."""
    return "/runs/" + encode_id(workflow_id)
