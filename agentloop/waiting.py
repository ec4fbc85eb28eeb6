"""What a run waiting for a person says of it in its memo, so the inbox lists it from one
visibility list without asking each run. Display only: the run page
and every decision read the run's own `status`."""

from __future__ import annotations

import re
from typing import Literal

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


MAX_MEMO_TEXT_CHARS = 120
"""How much of the task, a question or what is known of a write a `WaitingMemo` holds."""
MAX_WAITING_MEMO_BYTES = 1_800
"""How large a `WaitingMemo` grows, as JSON: every waiting run's memo comes with each
visibility list, and Temporal logs a warning for each memo past 2 KB (`limit.memoSize.warn`)."""


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
