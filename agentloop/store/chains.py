"""Parsed transcripts kept in a worker between a run's model calls.

A run's next model call starts from the head its last one returned, so the worker that made
that call can keep the parsed chain and parse only what is new, instead of loading and parsing
the whole chain from the store on every turn (194 ms a turn at 1,000 turns). Keys are content
hashes: a kept chain can never be stale, and any worker without it simply loads it. A chain is
kept measured (`Measured`), so the context budget measures each event once, not every turn.
"""

from __future__ import annotations

from agentloop.context import Measured
from agentloop.store import Store, load_transcript
from agentloop.store.kept import Kept

KEPT_CHAINS = 64
"""Runs whose chain a worker keeps; beyond it the least recently used is dropped."""


class TranscriptCache:
    def __init__(self, size: int = KEPT_CHAINS) -> None:
        self._chains: Kept[Measured] = Kept(size)

    async def load(self, store: Store, head: str) -> Measured:
        """The chain ending at `head`: taken out of the cache (the run moves on to a new head)
        when it is there, else from the store."""
        kept = self._chains.pop(head)
        return kept if kept is not None else Measured.of(await load_transcript(store, head))

    def keep(self, head: str, chain: Measured) -> None:
        self._chains.keep(head, chain)
