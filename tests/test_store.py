"""The content-addressed transcript store (SQLite): the workflow computes node keys without
reading the store, and the activity persists exactly those nodes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop.events import ModelOutput, StateUpdate, ToolResult, UserInput
from agentloop.store import ROOT, SqliteStore, StoreError, load_transcript, open_store
from agentloop.store.transcript import append, parse_node

EVENTS = [
    UserInput(text="hello"),
    ModelOutput(text="hi", stop="final"),
    ToolResult(call_id="c1", content="x" * 100),
]


async def test_append_then_load_gives_the_events_back_in_order(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        head, nodes = append(ROOT, EVENTS)
        await store.put_nodes(nodes)
        assert await load_transcript(store, head) == EVENTS
        assert await load_transcript(store, ROOT) == []
    finally:
        await store.close()


async def test_writing_the_same_nodes_twice_is_harmless(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        head, nodes = append(ROOT, EVENTS)
        await store.put_nodes(nodes)
        await store.put_nodes(nodes)  # a retried activity does this
        assert await load_transcript(store, head) == EVENTS
    finally:
        await store.close()


async def test_chains_share_their_common_prefix(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        base, nodes = append(ROOT, EVENTS[:1])
        left, left_nodes = append(base, [StateUpdate(text="left")])
        right, right_nodes = append(base, [StateUpdate(text="right")])
        await store.put_nodes(nodes + left_nodes + right_nodes)
        assert left != right
        assert (await load_transcript(store, left))[-1] == StateUpdate(text="left")
        assert (await load_transcript(store, right))[-1] == StateUpdate(text="right")
    finally:
        await store.close()


async def test_a_missing_node_is_an_error_not_a_shorter_transcript(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        head, nodes = append(ROOT, EVENTS)
        await store.put_nodes(nodes[1:])  # the root node is lost
        with pytest.raises(StoreError, match="missing"):
            await load_transcript(store, head)
    finally:
        await store.close()


async def test_two_stores_on_one_file_see_each_others_nodes(tmp_path: Path) -> None:
    first, second = SqliteStore(tmp_path / "s.db"), SqliteStore(tmp_path / "s.db")
    try:
        head, nodes = append(ROOT, EVENTS)
        await asyncio.gather(first.put_nodes(nodes), second.put_nodes(nodes))
        assert await load_transcript(second, head) == EVENTS
    finally:
        await first.close()
        await second.close()


def test_unsupported_store_urls_are_named() -> None:
    with pytest.raises(StoreError, match="unsupported store URL"):
        open_store("redis://localhost")


@given(st.lists(st.text(max_size=30), min_size=1, max_size=5))
def test_node_keys_are_deterministic_and_nodes_parse_back(texts: list[str]) -> None:
    events = [UserInput(text=t) for t in texts]
    head, nodes = append(ROOT, events)
    again, _ = append(ROOT, [UserInput(text=t) for t in texts])
    assert head == again
    parent = ROOT
    for (key, body), event in zip(nodes, events, strict=True):
        parsed, parsed_parent = parse_node(body)
        assert (parsed, parsed_parent) == (event, parent)
        parent = key
