"""A local model provider that plays scenario scripts over real provider wire protocols.

Used instead of a real model by the tests, a team's tests (`agentloop.testing`), `agentloop
dev` and `make demo`: the official `openai` (Chat Completions, Responses) and `anthropic`
(Messages) clients talk to it unmodified, and it checks every request it receives (`checks`
for what all protocols share, `*_parse` for each protocol's own rules). Scripts are
protocol-neutral: one `Script` plays over any protocol. Unless told `builtin=False` it also
plays the demo's scripts (`agentloop/demo/scripts/*.json`, the demo's package data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop.scripted_provider.playback import RecordedRequest
from agentloop.scripted_provider.scripts import (
    Script,
    ScriptedError,
    ScriptedToolCall,
    ScriptTurn,
    ScriptUsage,
)

if TYPE_CHECKING:
    from agentloop.scripted_provider.server import ScriptedProvider

__all__ = [
    "RecordedRequest",
    "Script",
    "ScriptTurn",
    "ScriptUsage",
    "ScriptedError",
    "ScriptedProvider",
    "ScriptedToolCall",
]


def __getattr__(name: str) -> Any:
    # Imported lazily so `python -m agentloop.scripted_provider.server` does not import
    # `server` twice (once via this package, once as __main__), which runpy warns about.
    if name == "ScriptedProvider":
        from agentloop.scripted_provider.server import ScriptedProvider

        return ScriptedProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
