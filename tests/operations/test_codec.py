"""Payload encryption: the AES-256-GCM codec with key rotation by key id, its setting
(`AGENTLOOP_CODEC_KEYS`), a real run whose history holds no plaintext, and
`agentloop codec-server` as a real process serving the Temporal UI's codec protocol."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from agentloop import search
from agentloop.cli.parser import build_parser
from agentloop.client import connect, data_converter
from agentloop.contract import AgentRunResult, RunStatusView
from agentloop.demo.services import ExampleService
from agentloop.runtime import converter as agentloop_converter
from agentloop.runtime.codec import (
    ENCODING,
    KEY_ID_METADATA,
    EncryptionCodec,
    KeyRing,
    KeyRingError,
    PayloadDecryptionError,
    UnknownKeyIdError,
    decode_in_place,
    encrypting_data_converter,
    mask_key_ring,
    new_key,
)
from agentloop.runtime.config import (
    CONFIG_FILE_VARIABLE,
    VARIABLES,
    ConfigError,
    Settings,
    load_config,
)
from agentloop.runtime.dev_server import FAST_DEV_SERVER, free_port, temporal_binary
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptTurn
from agentloop.testing.patience import SERVER_START
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from agentloop.workflows.agent_run import AgentRun
from tests.cli.test_cli import (
    AGENTLOOP,
    Finished,
    assert_no_traceback,
    process_env,
    run_process,
)
from tests.live import agent_input, scripted
from tests.replay_audit import replay_before_stop
from tests.support import banner_process, result_of, start_run

K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(100, 132))).decode()
K3 = base64.b64encode(b"\x07" * 32).decode()
RING_K1 = f"k1:{K1}"
RING_K2_K1 = f"k2:{K2},k1:{K1}"

# Canaries: strings that a history can only hold because this run put them there. A date, a
# real city or a common word is no probe: the history holds dates (event times), names and
# words for reasons of its own, and a probe that turns up by chance fails the test on the day
# it does (2026-12-01: every `eventTime` of that day). The travel service answers any train
# number and city, and its results echo them, so the canaries reach the tool output too.
CANARY_CITY = "Qorvexintal"
CANARY_TRAIN = "QZ73915"
TRIP_DATE = "2031-02-28"
TASK = f"Canary task {CANARY_TRAIN}: how late is it, and what is the weather in {CANARY_CITY}?"
TRAIN_ARGS = {"train_number": CANARY_TRAIN, "date": TRIP_DATE}
WEATHER_ARGS = {"city": CANARY_CITY, "date": TRIP_DATE}
PLAINTEXT = (CANARY_CITY, CANARY_TRAIN, TASK[:30])
"""What a travel run's history must not show to a reader without the keys: the canaries in the
task, the tool arguments and the tool output."""
CODEC_SERVER_READY = "Ctrl-C stops it."


def codec(text: str = RING_K2_K1) -> EncryptionCodec:
    return EncryptionCodec.from_text(text)


def json_payload(value: Any) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


# --- the codec ------------------------------------------------------------------------------


async def test_round_trip_keeps_metadata_and_data() -> None:
    originals = [
        json_payload({"city": "Shanghai", "date": "2026-12-01"}),
        Payload(metadata={"encoding": b"binary/null"}),
        Payload(
            metadata={"encoding": b"binary/plain", "x-extra": b"\x00\xff"}, data=b"\x00" * 5000
        ),
    ]
    ring = codec()
    encrypted = await ring.encode(originals)
    assert len(encrypted) == len(originals)
    for payload in encrypted:
        assert dict(payload.metadata) == {"encoding": ENCODING.encode(), KEY_ID_METADATA: b"k2"}
        assert b"Shanghai" not in payload.SerializeToString()
    assert await ring.decode(encrypted) == originals


async def test_a_fresh_nonce_each_time_so_equal_plaintexts_differ() -> None:
    payload = json_payload("Shanghai")
    ring = codec()
    first, second = await ring.encode([payload, payload])
    (third,) = await ring.encode([payload])
    datas = {first.data, second.data, third.data}
    assert len(datas) == 3
    assert len({d[:12] for d in datas}) == 3  # the nonces
    assert await ring.decode([first, second, third]) == [payload] * 3


@pytest.mark.parametrize(
    "tamper",
    [
        lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],  # ciphertext
        lambda data: bytes([data[0] ^ 1]) + data[1:],  # nonce
        lambda data: data[:-1] + bytes([data[-1] ^ 0x80]),  # tag
        lambda data: data[:-1],  # cut short
    ],
)
async def test_an_altered_payload_fails_authentication(tamper: Any) -> None:
    ring = codec()
    (payload,) = await ring.encode([json_payload({"city": "Shanghai"})])
    payload.data = tamper(payload.data)
    with pytest.raises(PayloadDecryptionError, match="failed authentication: it was altered"):
        await ring.decode([payload])


async def test_a_payload_too_short_for_nonce_and_tag_is_named() -> None:
    payload = Payload(metadata={"encoding": ENCODING.encode(), KEY_ID_METADATA: b"k1"}, data=b"x")
    with pytest.raises(PayloadDecryptionError, match="too short"):
        await codec().decode([payload])


async def test_a_payload_relabelled_to_another_key_fails_authentication() -> None:
    ring = codec()
    (payload,) = await ring.encode([json_payload("Shanghai")])
    payload.metadata[KEY_ID_METADATA] = b"k1"
    with pytest.raises(PayloadDecryptionError, match=r"'k1'.*failed authentication"):
        await ring.decode([payload])


async def test_rotation_old_payloads_still_decrypt_new_ones_use_the_active_key() -> None:
    old = codec(RING_K1)
    (written_before,) = await old.encode([json_payload({"train_number": "G1234"})])
    assert written_before.metadata[KEY_ID_METADATA] == b"k1"

    rotated = codec(RING_K2_K1)
    assert rotated.ring.active == "k2"
    assert await rotated.decode([written_before]) == [json_payload({"train_number": "G1234"})]
    (written_after,) = await rotated.encode([json_payload("new")])
    assert written_after.metadata[KEY_ID_METADATA] == b"k2"
    # The old ring cannot read what the new key wrote, and says which key it lacks.
    with pytest.raises(UnknownKeyIdError, match="key id 'k2'") as caught:
        await old.decode([written_after])
    assert caught.value.key_id == "k2"


async def test_an_unknown_key_id_is_named_with_the_ring_and_the_fix() -> None:
    (payload,) = await codec(f"retired:{K3}").encode([json_payload("x")])
    with pytest.raises(UnknownKeyIdError) as caught:
        await codec().decode([payload])
    message = str(caught.value)
    assert "key id 'retired'" in message
    assert "(k2, k1)" in message and "AGENTLOOP_CODEC_KEYS" in message
    assert K1 not in message and K2 not in message


async def test_an_encrypted_payload_without_a_key_id_is_named() -> None:
    payload = Payload(metadata={"encoding": ENCODING.encode()}, data=b"\x00" * 40)
    with pytest.raises(PayloadDecryptionError, match=KEY_ID_METADATA):
        await codec().decode([payload])


async def test_payloads_written_before_encryption_pass_through_unchanged() -> None:
    plain = [json_payload({"city": "Shanghai"}), Payload(metadata={"encoding": b"binary/null"})]
    ring = codec()
    encrypted = await ring.encode([json_payload("secret")])
    decoded = await ring.decode([plain[0], encrypted[0], plain[1]])
    assert decoded == [plain[0], json_payload("secret"), plain[1]]


def test_the_codec_takes_a_ring_of_ids_and_32_byte_keys() -> None:
    keys = {"k2": base64.b64decode(K2), "k1": base64.b64decode(K1)}
    assert EncryptionCodec(keys, "k1").ring.active == "k1"
    with pytest.raises(KeyRingError, match="'k9' is not in the ring"):
        EncryptionCodec(keys, "k9")
    with pytest.raises(KeyRingError, match="16 bytes"):
        EncryptionCodec({"k1": b"\x00" * 16}, "k1")


async def test_the_converter_encrypts_values_and_failure_messages() -> None:
    converter = encrypting_data_converter(codec())
    (payload,) = await converter.encode([{"city": "Shanghai"}])
    assert payload.metadata["encoding"] == ENCODING.encode()
    assert await converter.decode([payload], [dict[str, Any]]) == [{"city": "Shanghai"}]

    failure = Failure()
    await converter.encode_failure(ApplicationError("no weather for Shanghai"), failure)
    assert b"Shanghai" not in failure.SerializeToString()
    restored = await converter.decode_failure(failure)
    assert "no weather for Shanghai" in str(restored)


async def test_decode_in_place_reads_every_payload_of_a_history() -> None:
    ring = codec()
    converter = encrypting_data_converter(ring)
    history = History()
    event = history.events.add()
    attributes = event.workflow_execution_started_event_attributes
    attributes.input.payloads.extend(await converter.encode([{"city": "Shanghai"}]))
    attributes.memo.fields["note"].CopyFrom((await converter.encode(["G1234"]))[0])
    event.user_metadata.summary.CopyFrom((await converter.encode([TASK]))[0])
    assert b"Shanghai" not in history.SerializeToString()
    await decode_in_place(history, ring)
    raw = history.SerializeToString()
    assert b"Shanghai" in raw and b"G1234" in raw and TASK.encode() in raw


# --- the setting ----------------------------------------------------------------------------


def problems_of(env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        Settings.load(env)
    return caught.value.problems


SHORT = base64.b64encode(b"\x01" * 16).decode()


@pytest.mark.parametrize(
    ("value", "shown", "expected"),
    [
        (K1, "***", "entry 1 has no key id before ':'"),
        (f":{K1}", "***", "entry 1 has no key id"),
        (f"k1:{K1},", "k1:***,***", "entry 2 has no key id"),
        (f"k1:{SHORT}", "k1:***", "key 'k1' is 16 bytes, AES-256 needs exactly 32"),
        ("k1:not base64!", "k1:***", "key 'k1' is not valid base64"),
        (f"k1:{K1},k1:{K2}", "k1:***,k1:***", "key id 'k1' appears twice"),
        (f"bad id:{K1}", "bad id:***", "key id 'bad id' is not 1-64 letters"),
        (",", "***,***", "no keys"),
    ],
)
def test_bad_codec_keys_are_named_without_showing_a_key(
    value: str, shown: str, expected: str
) -> None:
    (problem,) = problems_of({"AGENTLOOP_CODEC_KEYS": value})
    assert problem.startswith(f"AGENTLOOP_CODEC_KEYS={shown!r}: "), problem
    assert expected in problem, problem
    assert "openssl rand -base64 32" in problem or "appears twice" in problem
    for key in (K1, K2, SHORT):
        assert key not in problem


def test_good_codec_keys_load_the_first_as_active(tmp_path: Path) -> None:
    settings = Settings.load({"AGENTLOOP_CODEC_KEYS": f" k2 : {K2} , k1:{K1} "})
    ring = settings.codec_key_ring()
    assert ring is not None
    assert (ring.active, ring.ids) == ("k2", ["k2", "k1"])
    assert ring.describe() == "k2 (active), k1"
    urlsafe = base64.urlsafe_b64encode(b"\xff" * 32).decode().rstrip("=")
    assert KeyRing.parse(f"u:{urlsafe}").keys["u"] == b"\xff" * 32
    config = tmp_path / "agentloop.toml"
    config.write_text(f'codec_keys = "{RING_K1}"\n')
    assert Settings.load({CONFIG_FILE_VARIABLE: str(config)}).codec_keys == RING_K1
    assert Settings.load({}).codec_key_ring() is None
    assert len(base64.b64decode(new_key())) == 32


def test_codec_keys_are_masked_in_the_printed_configuration() -> None:
    loaded = load_config({"AGENTLOOP_CODEC_KEYS": RING_K2_K1})
    assert "AGENTLOOP_CODEC_KEYS=k2:***,k1:*** (env)" in loaded.lines()
    assert loaded.as_json()["AGENTLOOP_CODEC_KEYS"] == {"value": "k2:***,k1:***", "source": "env"}
    ring = loaded.settings.codec_key_ring()
    text = "\n".join(loaded.lines()) + json.dumps(loaded.as_json())
    text += repr(loaded.settings) + repr(ring) + repr(codec())
    for key in (K1, K2):
        assert key not in text
        assert key[-4:] not in text
    assert VARIABLES["codec_keys"].secret
    assert mask_key_ring("garbage") == "***"


def test_the_data_converter_follows_the_setting() -> None:
    assert data_converter(Settings()) is agentloop_converter.data_converter
    converter = data_converter(Settings(codec_keys=RING_K2_K1))
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.payload_codec.ring.active == "k2"
    assert converter.payload_converter_class is agentloop_converter.PayloadConverter
    # A malformed value that skipped `load` (e.g. `Settings.from_env`) is named at connect.
    with pytest.raises(ConfigError, match=r"AGENTLOOP_CODEC_KEYS='k1:\*\*\*': key 'k1' is 16"):
        data_converter(Settings(codec_keys=f"k1:{SHORT}"))


def test_codec_server_arguments() -> None:
    args = build_parser().parse_args(["codec-server"])
    assert (args.port, args.host, args.origins) == (8081, "127.0.0.1", None)
    args = build_parser().parse_args(
        ["codec-server", "--port", "9000", "--origin", "https://ui.example", "--origin", "x"]
    )
    assert (args.port, args.origins) == (9000, ["https://ui.example", "x"])


# --- integration: a real run on a server that only ever sees ciphertext --------------------


@pytest.fixture(scope="module")
async def encrypted_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=FAST_DEV_SERVER,
        search_attributes=search.REGISTERED,
        data_converter=data_converter(Settings(codec_keys=RING_K2_K1)),
        dev_server_startup_timeout=SERVER_START,
    )
    async with env:
        yield env
        await replay_before_stop(env.client)


@pytest.fixture(scope="module")
async def encrypted_worker(
    encrypted_env: WorkflowEnvironment,
    worker_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Settings]:
    # A store of its own: what it writes is sealed with these keys (`agentloop.store.sealed`),
    # which workers without them, sharing the session's store, could not read.
    store = tmp_path_factory.mktemp("codec") / "store.db"
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"agent-loop-codec-{uuid.uuid4().hex[:8]}",
            "codec_keys": RING_K2_K1,
            "store_url": f"sqlite:///{store}",
            "temporal_address": encrypted_env.client.service_client.config.target_host,
        }
    )
    async with running_worker(encrypted_env.client, settings):
        yield settings


def travel_script(name: str) -> Script:
    return scripted(
        name,
        ScriptTurn(
            tool_calls=[
                scripted_call("get_train_status", "call_train", **TRAIN_ARGS),
                scripted_call("get_weather", "call_weather", **WEATHER_ARGS),
            ],
            expect_tool_results={
                "call_train": f'"train_number": "{CANARY_TRAIN}"',
                "call_weather": f'"city": "{CANARY_CITY}"',
            },
        ),
        "{{call_train.train_number}} / {{call_weather.city}}",
    )


def history_bytes(history: WorkflowHistory) -> bytes:
    """Every byte of the history as stored: string and bytes fields appear raw in it."""
    return History(events=history.events).SerializeToString()


@pytest.fixture(scope="module")
async def encrypted_run(
    encrypted_worker: Settings, scripted_provider: ScriptedProvider
) -> tuple[str, Client]:
    """A finished travel run, started through `connect` (so through the codec)."""
    run_id = f"codec-travel-{uuid.uuid4().hex[:8]}"
    scripted_provider.register(travel_script(run_id))
    client = await connect(encrypted_worker)
    run = agent_input(run_id, "openai-chat", TASK, ["get_train_status", "get_weather"])
    result = await result_of(await start_run(client, encrypted_worker, run_id, run))
    assert result.status == "completed", result.stop_reason
    return run_id, client


@pytest.mark.integration
async def test_history_without_the_keys_shows_no_plaintext(
    encrypted_env: WorkflowEnvironment,
    encrypted_run: tuple[str, Client],
    example_service: ExampleService,
) -> None:
    run_id, codec_client = encrypted_run
    target = encrypted_env.client.service_client.config.target_host
    plain_client = await Client.connect(target, data_converter=pydantic_data_converter)

    exported = await plain_client.get_workflow_handle(run_id).fetch_history()
    text, raw = exported.to_json(), history_bytes(exported)
    for secret in PLAINTEXT:
        assert secret not in text, secret
        assert secret.encode() not in raw, secret
    payloads = [
        json_format.MessageToDict(e)
        for e in exported.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert payloads and all("YmluYXJ5L2VuY3J5cHRlZA==" in json.dumps(p) for p in payloads)

    # The same history through the codec client, decrypted, reads.
    fetched = await codec_client.get_workflow_handle(run_id).fetch_history()
    assert fetched.events == exported.events  # stored once, encrypted
    history = History(events=fetched.events)
    await decode_in_place(history, codec())
    decoded = history.SerializeToString()
    for secret in PLAINTEXT:
        assert secret.encode() in decoded, secret

    # The result and the status query, through the codec client, read as usual.
    handle = codec_client.get_workflow_handle(run_id, result_type=AgentRunResult)
    result = await result_of(handle)
    assert result.output == f"{CANARY_TRAIN} / {CANARY_CITY}"
    assert {c.call_id: c.arguments for c in result.calls} == {
        "call_train": TRAIN_ARGS,
        "call_weather": WEATHER_ARGS,
    }
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "finished"
    assert {c.call_id: c.arguments for c in view.calls}["call_weather"] == WEATHER_ARGS

    # Without the keys, the result cannot be read at all.
    with pytest.raises(Exception, match=r"binary/encrypted|[Ee]ncod"):
        await plain_client.get_workflow_handle(run_id).result()

    # Replay reads it with the codec: the encrypted history replays against today's code.
    replayer = Replayer(
        workflows=[AgentRun], data_converter=data_converter(Settings(codec_keys=RING_K2_K1))
    )
    replayed = await replayer.replay_workflow(exported, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
    # ... and cannot without it.
    blind = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    replayed = await blind.replay_workflow(exported, raise_on_replay_failure=False)
    assert replayed.replay_failure is not None


# --- integration: agentloop codec-server as a real process ----------------------------------


def codec_env(**overrides: str) -> dict[str, str]:
    """This environment without any agentloop setting, plus `overrides`."""
    names = {CONFIG_FILE_VARIABLE, *(v.name for v in VARIABLES.values())}
    env = {k: v for k, v in process_env().items() if k not in names}
    return {**env, **overrides}


@contextlib.asynccontextmanager
async def codec_server_process(
    *args: str, env: dict[str, str], cwd: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`agentloop codec-server ARGS` running until its banner is complete; stopped on the way
    out if the test did not stop it."""
    command = [*AGENTLOOP, "codec-server", *args]
    async with banner_process(command, CODEC_SERVER_READY, env=env, cwd=cwd) as running:
        yield running


@pytest.mark.integration
async def test_codec_server_decrypts_for_the_ui_and_the_temporal_cli(
    encrypted_env: WorkflowEnvironment, encrypted_run: tuple[str, Client], tmp_path: Path
) -> None:
    run_id, _ = encrypted_run
    target = encrypted_env.client.service_client.config.target_host
    plain_client = await Client.connect(target, data_converter=pydantic_data_converter)
    history = await plain_client.get_workflow_handle(run_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    encrypted_input = started.input.payloads[0]
    assert encrypted_input.metadata["encoding"] == ENCODING.encode()
    (unknown,) = await codec(f"retired:{K3}").encode([json_payload("x")])

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ui = "http://localhost:8233"
    env = codec_env(AGENTLOOP_CODEC_KEYS=RING_K2_K1)
    async with (
        codec_server_process("--port", str(port), env=env, cwd=tmp_path) as (process, banner),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
    ):
        assert url in banner and "k2 (active), k1" in banner
        assert K1 not in banner and K2 not in banner

        # The UI's request: protobuf JSON, X-Namespace, from its origin.
        body = {"payloads": [json_format.MessageToDict(encrypted_input)]}
        headers = {"X-Namespace": "default", "Origin": ui, "Content-Type": "application/json"}
        async with http.post(f"{url}/decode", json=body, headers=headers) as response:
            assert response.status == 200, await response.text()
            assert response.headers["Access-Control-Allow-Origin"] == ui
            assert response.headers["Access-Control-Allow-Credentials"] == "true"
            document = await response.json()
        (decoded,) = document["payloads"]
        assert base64.b64decode(decoded["metadata"]["encoding"]) == b"json/plain"
        assert json.loads(base64.b64decode(decoded["data"]))["task"] == TASK

        # Encode answers a payload the workers can read; a namespace segment works too.
        plain = {"payloads": [json_format.MessageToDict(json_payload({"city": "Shanghai"}))]}
        async with http.post(f"{url}/default/encode", json=plain, headers=headers) as response:
            assert response.status == 200, await response.text()
            (sealed,) = (await response.json())["payloads"]
        sealed_payload = json_format.ParseDict(sealed, Payload())
        assert sealed_payload.metadata[KEY_ID_METADATA] == b"k2"
        assert await codec().decode([sealed_payload]) == [json_payload({"city": "Shanghai"})]

        # The preflight the browser sends first.
        preflight = {
            "Origin": ui,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace",
        }
        async with http.options(f"{url}/decode", headers=preflight) as response:
            assert response.status in (200, 204)
            assert response.headers["Access-Control-Allow-Origin"] == ui
            assert "POST" in response.headers["Access-Control-Allow-Methods"]
            allowed = response.headers["Access-Control-Allow-Headers"].lower()
            assert "content-type" in allowed and "x-namespace" in allowed
        async with http.options(
            f"{url}/decode", headers={**preflight, "Origin": "https://evil.example"}
        ) as response:
            assert response.status == 403
            assert "Access-Control-Allow-Origin" not in response.headers

        # A payload of a key not in the ring, and a body that is not the protocol's.
        bad = {"payloads": [json_format.MessageToDict(unknown)]}
        async with http.post(f"{url}/decode", json=bad, headers=headers) as response:
            assert response.status == 400
            assert "key id 'retired'" in (await response.json())["error"]
        async with http.post(f"{url}/decode", data="nope", headers=headers) as response:
            assert response.status == 400
            assert "payloads" in (await response.json())["error"]

        # The Temporal CLI reads the history decrypted through it (and not without it).
        show = [temporal_binary(), "workflow", "show", "-w", run_id, "--output", "json"]
        show += ["--address", target]
        without = await run_process(*show, env=codec_env(), cwd=tmp_path)
        assert without.returncode == 0, without.explain()
        through = await run_process(*show, "--codec-endpoint", url, env=codec_env(), cwd=tmp_path)
        assert through.returncode == 0, through.explain()
        shown_without = history_bytes(WorkflowHistory.from_json(run_id, without.stdout))
        shown_through = history_bytes(WorkflowHistory.from_json(run_id, through.stdout))
        for secret in PLAINTEXT:
            assert secret.encode() not in shown_without, secret
            assert secret.encode() in shown_through, secret

        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 10) == 0
        assert process.stdout is not None
        rest = (await process.stdout.read()).decode()
        assert "agentloop codec-server stopped" in rest
        assert "Traceback" not in banner + rest


@pytest.mark.integration
@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (None, "AGENTLOOP_CODEC_KEYS is not set"),
        (f"k1:{SHORT}", "AGENTLOOP_CODEC_KEYS='k1:***': key 'k1' is 16 bytes"),
    ],
)
async def test_codec_server_without_good_keys_exits_2(
    keys: str | None, expected: str, tmp_path: Path
) -> None:
    env = codec_env(**({"AGENTLOOP_CODEC_KEYS": keys} if keys else {}))
    finished: Finished = await run_process(
        *AGENTLOOP, "codec-server", "--port", str(free_port()), env=env, cwd=tmp_path
    )
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert expected in finished.stderr, finished.explain()
    assert SHORT not in finished.stderr


@pytest.mark.integration
async def test_codec_server_on_a_taken_port_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = await run_process(
            *AGENTLOOP,
            "codec-server",
            "--port",
            str(port),
            env=codec_env(AGENTLOOP_CODEC_KEYS=RING_K1),
            cwd=tmp_path,
        )
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert f"cannot listen on 127.0.0.1:{port}" in finished.stderr, finished.explain()
