"""A local model provider that plays scenario scripts over real provider wire protocols.

Used by the tests and `make demo` instead of a real model: the official `openai` (Chat
Completions, Responses) and `anthropic` (Messages) clients talk to it unmodified, and it
checks every request it receives (`checks` for what all protocols share, `*_parse` for each
protocol's own rules). Scripts are protocol-neutral: one `Script` plays over any protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop.demo.scripted_provider.playback import RecordedRequest
from agentloop.demo.scripted_provider.scripts import (
    Script,
    ScriptedError,
    ScriptedToolCall,
    ScriptTurn,
    ScriptUsage,
)

if TYPE_CHECKING:
    from agentloop.demo.scripted_provider.server import ScriptedProvider

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
    # Imported lazily so `python -m agentloop.demo.scripted_provider.server` does not import
    # `server` twice (once via this package, once as __main__), which runpy warns about.
    if name == "ScriptedProvider":
        from agentloop.demo.scripted_provider.server import ScriptedProvider

        return ScriptedProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
