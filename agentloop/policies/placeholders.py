"""Redaction placeholders in what the model proposes: a call whose arguments carry one would
send a hidden value's stand-in (`[redacted:card_number]`) to a system as if it were the value.
Refused in the workflow, before anything runs, with words the model can act on."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentloop.redaction import PLACEHOLDER_PREFIX


def placeholder_problem(arguments: Mapping[str, Any]) -> str | None:
    """Why a call with `arguments` must not run (None: it carries no placeholder). Linear in
    the arguments, whose size the runner bounds before this runs."""
    text = json.dumps(arguments, ensure_ascii=False)
    at = text.find(PLACEHOLDER_PREFIX)
    if at < 0:
        return None
    end = text.find("]", at)
    shown = text[at : end + 1] if 0 <= end - at < 60 else PLACEHOLDER_PREFIX + "...]"
    return (
        f"the arguments carry {shown}, a stand-in for a value that was hidden from you, not "
        "the value: it cannot be sent. Ask the user for the value, or use a reference to it "
        "(an id the tool takes) instead."
    )
