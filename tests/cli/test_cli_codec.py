"""`agentloop` with payload encryption: the history it exports holds no plaintext tool
arguments or results, while `status` and `transcript`, given the keys, still read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from agentloop.runtime.codec import decode_in_place
from agentloop.runtime.config import Settings
from tests.cli.test_cli import agentloop, assert_no_traceback, process_env
from tests.operations.test_codec import (  # the encrypted server, worker and finished travel run
    CANARY_CITY,
    CANARY_TRAIN,
    RING_K2_K1,
    TRAIN_ARGS,
    WEATHER_ARGS,
    codec,
    encrypted_env,  # noqa: F401
    encrypted_run,  # noqa: F401
    encrypted_worker,  # noqa: F401
    history_bytes,
)

pytestmark = pytest.mark.integration


def string_values(value: Any) -> set[str]:
    """Every string inside a JSON value, keys and values."""
    if isinstance(value, dict):
        return set(value) | {s for v in value.values() for s in string_values(v)}
    if isinstance(value, list):
        return {s for v in value for s in string_values(v)}
    return {value} if isinstance(value, str) else set()


async def test_history_is_ciphertext_while_status_and_transcript_read_the_calls(
    encrypted_env: WorkflowEnvironment,  # noqa: F811
    encrypted_worker: Settings,  # noqa: F811
    encrypted_run: tuple[str, Client],  # noqa: F811
    tmp_path: Path,
) -> None:
    run_id, _ = encrypted_run
    without_keys = process_env(
        TEMPORAL_ADDRESS=encrypted_env.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=encrypted_worker.task_queue,
        AGENTLOOP_STORE_URL=encrypted_worker.store_url,
    )
    env = {**without_keys, "AGENTLOOP_CODEC_KEYS": RING_K2_K1}

    transcript = await agentloop("transcript", run_id, "--json", env=env, cwd=tmp_path)
    assert transcript.returncode == 0, transcript.explain()
    events = json.loads(transcript.stdout)
    calls = {
        call["call_id"]: call["arguments"]
        for event in events
        if event["type"] == "model_output"
        for call in event["tool_calls"]
    }
    assert calls == {"call_train": TRAIN_ARGS, "call_weather": WEATHER_ARGS}
    results = {e["call_id"]: json.loads(e["content"]) for e in events if e["type"] == "tool_result"}
    assert set(results) == set(calls)
    assert results["call_weather"]["city"] == CANARY_CITY
    assert results["call_train"]["train_number"] == CANARY_TRAIN

    status = await agentloop("status", run_id, "--json", env=env, cwd=tmp_path)
    assert status.returncode == 0, status.explain()
    result = json.loads(status.stdout)["result"]
    assert {c["call_id"]: c["arguments"] for c in result["calls"]} == calls
    assert result["output"] == f"{CANARY_TRAIN} / {CANARY_CITY}"

    exported = tmp_path / "history.json"
    written = await agentloop("history", run_id, "-o", str(exported), env=env, cwd=tmp_path)
    assert written.returncode == 0, written.explain()
    history = WorkflowHistory.from_json(run_id, exported.read_text())
    # Every argument and result value that holds a canary (the train number and city this
    # run made up, which nothing else in a history can hold), searched in the raw bytes the
    # history holds. Other values (the date, "on_time", a station) are no probe: a history
    # holds dates and words for reasons of its own.
    values = {s for value in (*calls.values(), *results.values()) for s in string_values(value)}
    secrets = {s for s in values if CANARY_CITY in s or CANARY_TRAIN in s}
    assert {CANARY_CITY, CANARY_TRAIN} <= secrets
    raw = history_bytes(history)
    assert [s for s in secrets if s.encode() in raw] == []
    # ... where decrypting shows them: the search would have found plaintext.
    decrypted = History(events=history.events)
    await decode_in_place(decrypted, codec())
    assert all(s.encode() in decrypted.SerializeToString() for s in secrets)

    # Without the keys the result cannot be read: a message, not a traceback.
    blind = await agentloop("status", run_id, env=without_keys, cwd=tmp_path)
    assert blind.returncode == 2, blind.explain()  # a configuration problem
    assert_no_traceback(blind)
    assert "AGENTLOOP_CODEC_KEYS" in blind.stderr, blind.explain()
