"""The worker decodes an activation's payloads without copying the ones decoding leaves as they
are (`agentloop.runtime.converter.UncopiedDataConverter`): a flood of signals near the payload
limit must cost the workflow task that takes it as little as it can (issue 45)."""

from __future__ import annotations

import base64
import json

import pytest
import temporalio.bridge.worker
from temporalio.api.common.v1 import Payload
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.converter import DataConverter

from agentloop.client import data_converter
from agentloop.runtime import converter as agentloop_converter
from agentloop.runtime.codec import EncryptionCodec
from agentloop.runtime.config import Settings

RING = "k1:" + base64.b64encode(bytes(range(32))).decode()
NEAR_THE_LIMIT = 1_900_000


def flooded(*payloads: Payload) -> WorkflowActivation:
    """An activation bringing one signal per payload, as the worker's core hands it over."""
    activation = WorkflowActivation(run_id="flooded")
    for payload in payloads:
        job = activation.jobs.add()
        job.signal_workflow.signal_name = "noise"
        job.signal_workflow.input.append(payload)
    return activation


def plain(n: int) -> Payload:
    data = json.dumps({"n": n, "padding": "x" * NEAR_THE_LIMIT}).encode()
    return Payload(metadata={"encoding": b"json/plain"}, data=data)


async def decode(activation: WorkflowActivation, converter: DataConverter) -> None:
    await temporalio.bridge.worker.decode_activation(
        activation, converter, decode_headers=True, storage_concurrency_limit=1
    )


def converters() -> list[DataConverter]:
    return [data_converter(Settings()), data_converter(Settings(codec_keys=RING))]


@pytest.mark.parametrize("converter", converters(), ids=["plain", "encrypting"])
async def test_payloads_decoding_leaves_as_they_are_stay_where_they_were(
    converter: DataConverter,
) -> None:
    activation = flooded(plain(0), plain(1))
    held = [job.signal_workflow.input[0] for job in activation.jobs]
    await decode(activation, converter)
    # A payload put back would be a copy: the message held before would no longer be the
    # one in the activation, and marking it would not show there.
    for payload in held:
        payload.metadata["marked"] = b"yes"
    assert [job.signal_workflow.input[0].metadata["marked"] for job in activation.jobs] == [
        b"yes",
        b"yes",
    ]
    assert [len(job.signal_workflow.input[0].data) for job in activation.jobs] == [
        len(plain(0).data),
        len(plain(1).data),
    ]


async def test_encrypted_payloads_are_still_decrypted_beside_plain_ones() -> None:
    converter = data_converter(Settings(codec_keys=RING))
    assert isinstance(converter.payload_codec, EncryptionCodec)
    [sealed] = await converter.payload_codec.encode([plain(7)])
    activation = flooded(plain(6), sealed)
    await decode(activation, converter)
    assert [job.signal_workflow.input[0] for job in activation.jobs] == [plain(6), plain(7)]


def test_the_uncopied_converter_is_what_workers_and_clients_get() -> None:
    for converter in converters():
        assert isinstance(converter, agentloop_converter.UncopiedDataConverter)
