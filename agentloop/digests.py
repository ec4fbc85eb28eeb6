"""Canonical JSON and the digests built on it.

Pure and deterministic, so the workflow and the activities compute the same hashes without
talking to each other: the workflow derives transcript node keys and argument digests itself.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, non-ASCII kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def args_digest(tool: str, arguments: dict[str, Any]) -> str:
    """The digest an approval or a stall check is bound to: tool name plus exact arguments."""
    return "sha256:" + sha256_hex(canonical_json({"tool": tool, "arguments": arguments}))
