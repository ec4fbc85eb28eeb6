"""The outputs kept as they were before redaction (`agentloop.redaction`), read only by the
readers each one names: its tool's approvers."""

from __future__ import annotations

import json

from agentloop.redaction import ORIGINAL_MEDIA_TYPE
from agentloop.store.base import Store


class NotAReader(PermissionError):
    """Someone not among an original's readers asked for it (or it is not kept)."""


async def read_original(store: Store, ref: str, reader: str) -> str:
    """The output `ref` keeps as it was before redaction, for `reader` if the tool's approvers
    include them; `NotAReader` otherwise (and for an artifact that is not such an original:
    `read_artifact` and this never read each other's)."""
    found = await store.get_artifact(ref)
    if found is None or found[1] != ORIGINAL_MEDIA_TYPE:
        raise NotAReader(f"{ref} is not a kept original")
    record = json.loads(found[0])
    if reader not in record["readers"]:
        raise NotAReader(
            f"{reader!r} may not read the original of {record['tool']} call "
            f"{record['call_id']}: only its approvers may ({', '.join(record['readers'])})"
        )
    return str(record["text"])
