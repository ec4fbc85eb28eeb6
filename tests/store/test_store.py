"""The content-addressed store: one contract, run against SQLite and a real PostgreSQL.

The workflow computes node keys without reading the store, and the activity persists exactly
those nodes; artifacts are keyed by their bytes. Each test gets a fresh store: a temp SQLite
file, or a fresh PostgreSQL schema (`test_<random>`, dropped afterwards). PostgreSQL comes
from AGENTLOOP_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test); when it
does not answer, the PostgreSQL cases are SKIPPED with a reason saying so (set
AGENTLOOP_TEST_REQUIRE_POSTGRES=1 to fail instead). The `-sealed` cases run the same contract
through the encryption layer with codec keys (`agentloop.store.sealed`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from agentloop.context import Measured
from agentloop.events import ModelOutput, StateUpdate, ToolResult, UserInput
from agentloop.runtime.audit import mask_url
from agentloop.runtime.codec import KeyRing
from agentloop.store import (
    ROOT,
    SqliteStore,
    Store,
    StoreError,
    StoreUnavailable,
    artifact_key,
    load_artifact_text,
    load_transcript,
    open_store,
    read_artifact_text,
)
from agentloop.store import _walk_chain as walk_chain
from agentloop.store.base import StartNonces, node_rows
from agentloop.store.chains import TranscriptCache
from agentloop.store.memory import MemoryContents, MemoryStore
from agentloop.store.postgres import PostgresStore, with_search_path
from agentloop.store.sealed import Backend as SealingBackend
from agentloop.store.sealed import SealedStore
from agentloop.transcript import append, parse_node

POSTGRES_URL = os.environ.get(
    "AGENTLOOP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)

EVENTS = [
    UserInput(text="hello"),
    ModelOutput(text="hi", stop="final"),
    ToolResult(call_id="c1", content="x" * 100),
]


# --- fixtures: one fresh store per test, on each backend -------------------------------------


@dataclass
class Backend:
    name: str
    url: str
    """What `open_store` takes to reach this very store."""
    open: Callable[[], Store]
    """Another store instance on the same data (a second worker)."""
    keys: KeyRing | None = None
    """The codec keys its contents are sealed with, if any."""


@pytest.fixture(scope="session")
def postgres_url() -> str:
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            pass
    except psycopg.OperationalError as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        reason = (
            f"PostgreSQL at {mask_url(POSTGRES_URL)} is unreachable ({why}): the PostgreSQL "
            "store tests did NOT run. Start it, or point AGENTLOOP_TEST_POSTGRES_URL at one."
        )
        if os.environ.get("AGENTLOOP_TEST_REQUIRE_POSTGRES"):
            pytest.fail(reason)
        pytest.skip(reason)
    return POSTGRES_URL


SEALING_KEYS = KeyRing({"k1": b"\x01" * 32}, "k1")


@pytest.fixture(params=["sqlite", "postgres", "memory", "sqlite-sealed", "postgres-sealed"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    name, _, sealed = request.param.partition("-")
    with raw_backend(name, request, tmp_path) as plain:
        if not sealed:
            yield plain
            return
        open_plain = plain.open
        yield Backend(
            request.param,
            plain.url,
            lambda: SealedStore(open_plain(), SEALING_KEYS),
            SEALING_KEYS,
        )


@contextmanager
def raw_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if name == "memory":
        contents = MemoryContents()
        yield Backend("memory", "", lambda: MemoryStore(contents))
        return
    if name == "sqlite":
        path = tmp_path / "store.db"
        yield Backend("sqlite", f"sqlite:///{path}", lambda: SqliteStore(path))
        return
    url: str = request.getfixturevalue("postgres_url")
    schema = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield Backend(
            "postgres", with_search_path(url, schema), lambda: PostgresStore(url, schema=schema)
        )
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
async def open_backend(backend: Backend) -> AsyncIterator[Callable[[], Store]]:
    """Opens store instances on the test's backend; all are closed afterwards."""
    opened: list[Store] = []

    def open_one() -> Store:
        opened.append(backend.open())
        return opened[-1]

    yield open_one
    for store in opened:
        await store.close()


@pytest.fixture
def store(open_backend: Callable[[], Store]) -> Store:
    return open_backend()


# --- transcript nodes ------------------------------------------------------------------------


async def test_append_then_load_gives_the_events_back_in_order(store: Store) -> None:
    head, nodes = append(ROOT, EVENTS)
    await store.put_nodes(nodes)
    assert await load_transcript(store, head) == EVENTS
    assert await load_transcript(store, ROOT) == []


async def test_get_node_returns_the_exact_json_or_none(store: Store) -> None:
    _, nodes = append(ROOT, EVENTS)
    await store.put_nodes(nodes)
    for key, body in nodes:
        assert await store.get_node(key) == body
    assert await store.get_node("sha256:" + "0" * 64) is None


async def test_writing_the_same_nodes_twice_is_harmless(store: Store) -> None:
    head, nodes = append(ROOT, EVENTS)
    await store.put_nodes(nodes)
    await store.put_nodes(nodes)  # a retried activity does this
    await store.put_nodes([*nodes, *nodes])  # even within one call
    await store.put_nodes([])
    assert await load_transcript(store, head) == EVENTS


async def test_chains_share_their_common_prefix(store: Store) -> None:
    base, nodes = append(ROOT, EVENTS[:1])
    left, left_nodes = append(base, [StateUpdate(text="left")])
    right, right_nodes = append(base, [StateUpdate(text="right")])
    await store.put_nodes(nodes + left_nodes + right_nodes)
    assert left != right
    assert await load_transcript(store, left) == [EVENTS[0], StateUpdate(text="left")]
    assert await load_transcript(store, right) == [EVENTS[0], StateUpdate(text="right")]
    assert await load_transcript(store, base) == EVENTS[:1]


async def test_load_chain_is_one_query_for_what_a_node_by_node_walk_gives(store: Store) -> None:
    events = [UserInput(text=f"turn {i}") for i in range(50)]
    head, nodes = append(ROOT, events)
    await store.put_nodes(nodes)
    chain = await store.load_chain(head)
    assert chain == nodes
    assert await walk_chain(store, head) == nodes
    assert await store.load_chain(ROOT) == []
    middle = nodes[24][0]
    assert await store.load_chain(middle) == nodes[:25]


@pytest.mark.parametrize("lost", [0, 1, 2], ids=["root", "middle", "head"])
async def test_a_missing_node_is_an_error_not_a_shorter_transcript(store: Store, lost: int) -> None:
    head, nodes = append(ROOT, EVENTS)
    await store.put_nodes([node for i, node in enumerate(nodes) if i != lost])
    lost_key = nodes[lost][0]
    with pytest.raises(StoreError, match=f"{lost_key} is missing"):
        await load_transcript(store, head)
    with pytest.raises(StoreError, match=f"{lost_key} is missing"):
        await store.load_chain(head)
    with pytest.raises(StoreError, match=f"{lost_key} is missing"):
        await walk_chain(store, head)


async def test_two_stores_see_each_others_nodes(open_backend: Callable[[], Store]) -> None:
    first, second = open_backend(), open_backend()
    head, nodes = append(ROOT, EVENTS)
    await asyncio.gather(first.put_nodes(nodes), second.put_nodes(nodes))
    assert await load_transcript(second, head) == EVENTS
    assert await load_transcript(first, head) == EVENTS


async def test_concurrent_writers_of_overlapping_nodes_leave_the_chain_intact(
    open_backend: Callable[[], Store],
) -> None:
    # Two workers (fresh stores: their first calls also race to create the tables), 20 writes
    # at once of overlapping slices of one chain, each slice in its own shuffled order.
    first, second = open_backend(), open_backend()
    events = [UserInput(text=f"turn {i}") for i in range(60)]
    head, nodes = append(ROOT, events)
    rng = random.Random(20)
    batches = [list(nodes)]
    for _ in range(19):
        start = rng.randrange(0, 50)
        batches.append(nodes[start : start + rng.randrange(5, 20)])
    for batch in batches:
        rng.shuffle(batch)
    await asyncio.gather(
        *((first if i % 2 else second).put_nodes(batch) for i, batch in enumerate(batches))
    )
    assert await first.load_chain(head) == nodes
    assert await load_transcript(first, head) == events
    assert await load_transcript(second, head) == events


async def test_open_store_reaches_the_same_store(backend: Backend, store: Store) -> None:
    if backend.name == "memory":
        pytest.skip("a memory store has no URL: it lives in one process")
    head, nodes = append(ROOT, EVENTS)
    await store.put_nodes(nodes)
    other = open_store(backend.url, backend.keys)
    try:
        assert type(other.backend) is type(getattr(store, "backend", store))
        assert await load_transcript(other, head) == EVENTS
    finally:
        await other.close()


# --- the nonces of signed starts ------------------------------------------------------------


def nonce_ledger(store: Store) -> StartNonces:
    return cast(StartNonces, store)


async def test_a_nonce_is_claimed_by_one_run_chain_which_may_claim_it_again(
    open_backend: Callable[[], Store],
) -> None:
    # Two workers sharing the store: whichever claims first holds it for every worker.
    first, second = nonce_ledger(open_backend()), nonce_ledger(open_backend())
    until = datetime.now(UTC) + timedelta(hours=1)
    assert await first.claim_nonce("n-1", "run-a", until)
    assert await first.claim_nonce("n-1", "run-a", until)  # a retried activity of that run
    assert await second.claim_nonce("n-1", "run-a", until)
    assert not await second.claim_nonce("n-1", "run-b", until)
    assert not await first.claim_nonce("n-1", "run-b", until + timedelta(days=1))
    assert await second.claim_nonce("n-2", "run-b", until)  # another nonce is another's


async def test_of_runs_claiming_one_nonce_at_once_exactly_one_wins(
    open_backend: Callable[[], Store],
) -> None:
    stores = [nonce_ledger(open_backend()) for _ in range(2)]
    until = datetime.now(UTC) + timedelta(hours=1)
    claims = await asyncio.gather(
        *(stores[i % 2].claim_nonce("n-race", f"run-{i}", until) for i in range(10))
    )
    assert claims.count(True) == 1, claims


async def test_a_nonce_is_forgotten_once_its_keep_until_passed_and_not_before(
    store: Store,
) -> None:
    ledger = nonce_ledger(store)
    now = datetime.now(UTC)
    assert await ledger.claim_nonce("n-old", "run-a", now - timedelta(seconds=1))
    assert await ledger.claim_nonce("n-kept", "run-a", now + timedelta(hours=1))
    # Any claim forgets what has passed: the old nonce is free again, the kept one is not.
    assert await ledger.claim_nonce("n-old", "run-b", now + timedelta(hours=1))
    assert not await ledger.claim_nonce("n-kept", "run-b", now + timedelta(hours=1))


# --- artifacts -------------------------------------------------------------------------------


async def test_artifacts_round_trip_under_their_content_key(store: Store) -> None:
    data = "résumé: 日本語 ✓\n".encode() * 1000
    key = await store.put_artifact(data, "text/plain; charset=utf-8")
    assert key == "sha256:" + hashlib.sha256(data).hexdigest() == artifact_key(data)
    assert await store.get_artifact(key) == (data, "text/plain; charset=utf-8")
    assert await store.get_artifact(artifact_key(b"never stored")) is None


async def test_storing_the_same_artifact_twice_is_harmless(
    open_backend: Callable[[], Store],
) -> None:
    first, second = open_backend(), open_backend()
    data = os.urandom(4096)
    keys = await asyncio.gather(
        *(
            (first if i % 2 else second).put_artifact(data, "application/octet-stream")
            for i in range(10)
        )
    )
    assert set(keys) == {artifact_key(data)}
    # The bytes decide the key; a later media type does not replace the first.
    assert await first.put_artifact(data, "text/plain") == keys[0]
    assert await second.get_artifact(keys[0]) == (data, "application/octet-stream")


async def test_artifacts_keep_every_byte(store: Store) -> None:
    for data in [b"", bytes(range(256)) * 3, b"\x00\xff\xfe not utf-8", os.urandom(3_000_000)]:
        key = await store.put_artifact(data, "application/octet-stream")
        assert await store.get_artifact(key) == (data, "application/octet-stream")


async def test_artifact_text_pages_through_the_store(store: Store) -> None:
    text = "".join(f"line {i}: ünïcödé ✓\n" for i in range(500))
    key = await store.put_artifact(text.encode(), "text/plain")
    pages, offset = [], 0
    while True:
        page, total = await load_artifact_text(store, key, offset, 1000)
        assert total == len(text)
        if not page:
            break
        pages.append(page)
        offset += len(page)
    assert "".join(pages) == text
    with pytest.raises(StoreError, match="missing"):
        await load_artifact_text(store, artifact_key(b"nope"), 0, 10)


@given(st.one_of(st.text().map(str.encode), st.binary()), st.integers(min_value=1, max_value=50))
def test_read_artifact_text_pages_by_characters(data: bytes, limit: int) -> None:
    expected = data.decode("utf-8", errors="replace")
    pages, offset = [], 0
    while offset < len(expected):
        page, total = read_artifact_text(data, offset, limit)
        assert total == len(expected)
        assert 0 < len(page) <= limit
        pages.append(page)
        offset += len(page)
    assert "".join(pages) == expected
    assert read_artifact_text(data, offset + 5, limit) == ("", len(expected))


def test_read_artifact_text_edges() -> None:
    assert read_artifact_text("日本語".encode(), 1, 1) == ("本", 3)
    assert read_artifact_text("日本語".encode()) == ("日本語", 3)
    assert read_artifact_text(b"ok\xffok", 0, 10) == ("ok\ufffdok", 5)
    with pytest.raises(ValueError, match="offset"):
        read_artifact_text(b"x", -1, 1)
    with pytest.raises(ValueError, match="limit"):
        read_artifact_text(b"x", 0, -1)


# --- backend specifics -----------------------------------------------------------------------


async def test_a_sqlite_file_from_before_the_parent_column_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    head, nodes = append(ROOT, EVENTS)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE nodes (key TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID")
        conn.executemany("INSERT INTO nodes (key, body) VALUES (?, ?)", nodes)
    conn.close()
    first, second = SqliteStore(path), SqliteStore(path)  # the second finds it migrated
    try:
        assert await first.load_chain(head) == nodes
        more, more_nodes = append(head, [StateUpdate(text="after the upgrade")])
        await second.put_nodes(more_nodes)
        assert await load_transcript(first, more) == [
            *EVENTS,
            StateUpdate(text="after the upgrade"),
        ]
    finally:
        await first.close()
        await second.close()


async def test_an_unreachable_postgres_is_retryable_and_hides_the_password() -> None:
    store = PostgresStore("postgresql://agent:s3cret@127.0.0.1:1/nowhere", connect_timeout=2)
    try:
        with pytest.raises(StoreUnavailable, match="unreachable") as caught:
            await store.get_node("sha256:" + "0" * 64)
        assert "s3cret" not in str(caught.value)
        assert "agent:***@127.0.0.1:1" in str(caught.value)
        # call_model turns StoreError into a non-retryable failure; this must stay retryable.
        assert not isinstance(caught.value, StoreError)
    finally:
        await store.close()


# --- open_store ------------------------------------------------------------------------------


async def test_open_store_picks_sqlite_for_sqlite_urls_and_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cases = {
        "sqlite:///rel/s.db": Path("rel/s.db"),
        f"sqlite:///{tmp_path / 'abs.db'}": tmp_path / "abs.db",
        "plain/s.db": Path("plain/s.db"),
    }
    for url, path in cases.items():
        store = open_store(url)
        try:
            assert isinstance(store.backend, SqliteStore)
            assert store.backend.path == path
            assert (tmp_path / path).exists()
        finally:
            await store.close()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://agent:s3cret@db.example:5432/agentloop",
        "postgres://agent@db.example/agentloop?sslmode=require",
    ],
)
async def test_open_store_picks_postgres_for_postgres_urls_without_connecting(url: str) -> None:
    store = open_store(url)
    assert isinstance(store.backend, PostgresStore)
    assert "s3cret" not in repr(store)
    await store.close()  # nothing was opened, nothing to wait for


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:s3cret@localhost:6379/0", "redis://user:***@localhost:6379/0"),
        ("mysql://root@localhost/db", "mysql://root@localhost/db"),
        ("sqlite://relative.db", "sqlite://relative.db"),
        ("POSTGRESQL://db.example/db", "POSTGRESQL://db.example/db"),  # libpq: lower case
        ("", ""),
    ],
)
def test_unsupported_store_urls_are_named_with_the_password_masked(url: str, shown: str) -> None:
    with pytest.raises(StoreError, match="unsupported store URL") as caught:
        open_store(url)
    assert repr(shown) in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_a_malformed_postgres_url_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError, match="invalid PostgreSQL URL") as caught:
        open_store("postgresql://agent:s3cret@[broken/db")
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:p@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://:p@h/db", "postgresql://:***@h/db"),
        ("postgresql://u:p/w#x@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h/db?user=u&password=p", "postgresql://h/db?user=u&password=***"),
        ("postgresql://u@h/db?application_name=a@b", "postgresql://u@h/db?application_name=a@b"),
        ("sqlite:///x.db", "sqlite:///x.db"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


# --- the chain itself (pure) -----------------------------------------------------------------


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


def test_a_field_added_later_with_its_default_does_not_change_node_keys() -> None:
    from pydantic import Field

    from agentloop.events import ToolResult
    from agentloop.transcript import append as chain

    class ToolResultV2(ToolResult):
        priority: int = Field(default=0)

    old, _ = chain(ROOT, [ToolResult(call_id="c1", content="x")])
    new, _ = chain(ROOT, [ToolResultV2(call_id="c1", content="x")])  # type: ignore[list-item]
    assert old == new


async def test_a_workers_transcript_cache_parses_only_what_is_new(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'chains.db'}")
    try:
        first = [UserInput(text="q"), ModelOutput(stop="final", text="a")]
        head, nodes = append(ROOT, first)
        await store.put_nodes(nodes)
        cache = TranscriptCache(size=1)
        loaded = await cache.load(store, head)  # not kept yet: from the store, measured
        assert loaded == Measured.of(first)
        cache.keep(head, loaded)
        assert await cache.load(store, head) is loaded  # kept: not parsed again
        # Taken out on load (the run moves on); the least recently kept goes first.
        cache.keep("sha256:a", Measured.of([]))
        cache.keep("sha256:b", Measured.of([UserInput(text="b")]))
        with pytest.raises(StoreError):
            await cache.load(store, "sha256:a")
        assert (await cache.load(store, "sha256:b")).events == [UserInput(text="b")]
    finally:
        await store.close()


@pytest.mark.parametrize("name", ["sqlite", "postgres", "memory"])
async def test_a_backend_lists_the_rows_not_sealed_in_key_order_a_page_at_a_time(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """What `agentloop store seal` reads below the sealing layer, on every backend."""
    with raw_backend(name, request, tmp_path) as backend:
        store = cast(SealingBackend, backend.open())
        try:
            _, nodes = append(ROOT, [UserInput(text=f"turn {i}") for i in range(5)])
            await store.put_nodes(nodes)
            await store.put_node_rows([("sha256:0", None, "SEALED:k1:...")])
            plain = [await store.put_artifact(f"a{i}".encode(), "text/plain") for i in range(3)]
            await store.put_artifact_row("sha256:1", b"...", "SEALED; key=k1")

            listed, after = [], ""
            while page := await store.unsealed_nodes("SEALED", after, 2):
                assert len(page) <= 2
                listed += page
                after = page[-1][0]
            assert listed == sorted(node_rows(nodes))
            artifacts = await store.unsealed_artifacts("SEALED", "", 10)
            assert [key for key, _, _ in artifacts] == sorted(plain)
            assert await store.unsealed_artifacts("SEALED", max(plain), 10) == []
        finally:
            await store.close()
