"""What a run waiting for a person says of it in its memo, so the inbox lists it from one
visibility list without asking each run (feature `inbox-memo`). Display only: the run page
and every decision read the run's own `status`."""

from __future__ import annotations

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
    (feature `inbox-memo`), so the inbox lists it from one visibility list. Display only:
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
