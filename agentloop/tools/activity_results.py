"""What a team's activity (an activity tool, its lookup activity) answers, read by agentloop's
worker; and `ActivityToolResults`, the interceptor a team's Python worker installs so that a
large answer travels through agentloop's store instead of the run's history.

Temporal records an activity's result in the run's history before any code of agentloop's
sees it: 40 parallel calls answering 1.5 MB each put 60 MB there, past the 50 MB at which
Temporal terminates the run. Only the worker that runs the activity can keep the value out:
the interceptor puts an answer over `INLINE_ANSWER_BYTES` in the store (the one agentloop's
worker uses) and answers a small reference instead, marked in the payload's metadata.

The run receives the answer undecoded and hands it to
agentloop's worker, where `read_answer` turns any payload into a value a tool result can be
made of, never raising: JSON (plain or a protobuf message's), bytes, null, a stored answer;
anything else (an encoding no one here reads, JSON no parser reads, a stored answer the store
lost) becomes `UnreadableJSON` naming why.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from agentloop.activity_io import UnreadableJSON
from agentloop.runtime.converter import PayloadConverter
from agentloop.store.base import Store

INLINE_ANSWER_BYTES = 32_000
"""An answer this large or smaller stays in the activity's result (in history); a larger one
goes to the store. 40 parallel calls then add at most 1.3 MB to history."""

STORED_ANSWER = "agentloop-stored-answer"
"""Payload metadata: the store key of the answer's data (set by `ActivityToolResults`)."""
STORED_ENCODING = "agentloop-stored-encoding"
"""Payload metadata: the encoding of the stored answer's data."""
MESSAGE_TYPE = "messageType"
"""Payload metadata: a protobuf message's type (Temporal's converters set it)."""
RUN_WORKFLOW_TYPE = "AgentRun"

_JSON_ENCODINGS = (b"json/plain", b"json/protobuf")
_converter = PayloadConverter()


async def read_answer(payload: Payload, store: Store) -> Any:
    """The value of a team activity's answer; `UnreadableJSON` when it has none here."""
    key = payload.metadata.get(STORED_ANSWER)
    if key is None:
        return _decoded(payload)
    named = key.decode("utf-8", errors="replace")
    found = await store.get_artifact(named)
    if found is None:
        return UnreadableJSON(f"it was put in the store as {named[:100]!r}, which lacks it")
    metadata = {
        name: value
        for name, value in payload.metadata.items()
        if name not in (STORED_ANSWER, STORED_ENCODING)
    }
    metadata["encoding"] = payload.metadata.get(STORED_ENCODING, b"binary/plain")
    return _decoded(Payload(metadata=metadata, data=found[0]))


def _decoded(payload: Payload) -> Any:
    encoding = payload.metadata.get("encoding", b"")
    if encoding == b"binary/null":
        return None
    if encoding == b"binary/plain":
        return payload.data
    if encoding == b"binary/protobuf":
        # Its message type may be one this worker does not have: kept as it came.
        kind = payload.metadata.get(MESSAGE_TYPE, b"").decode("utf-8", errors="replace")
        return {"protobuf": kind, "data": payload.data}
    if encoding not in _JSON_ENCODINGS:
        shown = encoding.decode("utf-8", errors="replace")[:100]
        return UnreadableJSON(f"its encoding {shown!r} is not one agentloop reads")
    try:
        # A protobuf message's JSON is read as JSON: its type need not exist here.
        plain = Payload(metadata={"encoding": b"json/plain"}, data=payload.data)
        return _converter.from_payload(plain)
    except Exception as exc:
        return UnreadableJSON(f"{type(exc).__name__}: {exc}"[:500])


class ActivityToolResults(Interceptor):
    """For a team's worker hosting activity tools (`agentloop.activity_tool`): an answer to an
    agentloop run over `inline_bytes` (as the worker's converter writes it) goes to `store`,
    the store agentloop's worker uses, and the run's history holds a reference to it.

        store = agentloop.open_store(os.environ["AGENTLOOP_STORE_URL"])
        Worker(client, task_queue="team", activities=[...],
               interceptors=[agentloop.ActivityToolResults(store)])

    Activities called by other workflows are left alone."""

    def __init__(self, store: Store, inline_bytes: int = INLINE_ANSWER_BYTES) -> None:
        self._store = store
        self._inline_bytes = inline_bytes

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StoringInbound(next, self._store, self._inline_bytes)


class _StoringInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, store: Store, inline_bytes: int) -> None:
        super().__init__(next)
        self._store = store
        self._inline_bytes = inline_bytes

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        value = await self.next.execute_activity(input)
        if activity.info().workflow_type != RUN_WORKFLOW_TYPE:
            return value
        payload = (
            value.payload
            if isinstance(value, RawValue)
            else activity.payload_converter().to_payload(value)
        )
        if len(payload.data) <= self._inline_bytes:
            return RawValue(payload)
        encoding = payload.metadata.get("encoding", b"binary/plain")
        media = "application/json" if encoding in _JSON_ENCODINGS else "application/octet-stream"
        key = await self._store.put_artifact(payload.data, media)
        reference = {"stored_answer": key, "bytes": len(payload.data)}
        metadata = {**payload.metadata, "encoding": b"json/plain"}
        metadata[STORED_ANSWER] = key.encode()
        metadata[STORED_ENCODING] = encoding
        return RawValue(Payload(metadata=metadata, data=json.dumps(reference).encode()))
