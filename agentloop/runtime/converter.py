"""The payload converter agentloop's clients and workers use: Temporal's pydantic converter,
except that JSON holding a lone surrogate escape (`"\\ud800"`) is still read.

pydantic's JSON parser refuses such a string, so a run started by any client with one in its
input would fail every workflow task ("Failed decoding arguments") before agentloop's code
could say why. Read with Python's parser instead, the input reaches `startup.parse_input`,
which fails the run at once naming the problem. Only JSON pydantic refuses takes that path.

JSON neither parser reads (nested past their limits, a number of thousands of digits) decodes,
where the caller asked for no type, to `UnreadableJSON`: the workflow's start input and an
activity tool's result are untyped, and the workflow code taking them refuses it, naming why.
Asked for a type, such JSON still raises.

Failures: a run's own failures (bad input, a run that ended `failed`) are said to people in
their message alone; the Python stack trace of the workflow code that raised them tells a user
nothing and reads like a crash (`PlainFailureConverter`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)
from temporalio.converter import PayloadConverter as TemporalPayloadConverter
from temporalio.exceptions import ApplicationError

from agentloop.activity_io import UnreadableJSON
from agentloop.contract import RUN_FAILED


class _JSONConverter(PydanticJSONPlainPayloadConverter):
    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        try:
            return super().from_payload(payload, type_hint)
        except ValidationError as exc:
            invalid = _json_invalid(exc)
            if invalid is None:
                raise
            if b"\\u" in payload.data:
                try:
                    # Python's parser recurses: too deep a value raises RecursionError,
                    # refused like any JSON pydantic refuses.
                    value = json.loads(payload.data.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError):
                    pass
                else:
                    hint = type_hint if type_hint is not None else Any
                    return TypeAdapter(hint).validate_python(value)
            if type_hint is None or type_hint is Any:
                return UnreadableJSON(invalid)  # pydantic's own short message
            raise exc from None


def _json_invalid(exc: ValidationError) -> str | None:
    """Why pydantic's parser refused the JSON, when that is what failed."""
    return next((e["msg"] for e in exc.errors() if e["type"] == "json_invalid"), None)


class PayloadConverter(CompositePayloadConverter):
    """Temporal's default converters with the JSON one above in place of plain JSON."""

    def __init__(self) -> None:
        json_converter = _JSONConverter()
        super().__init__(
            *(
                json_converter if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


PLAIN_FAILURES = frozenset({"InvalidInput", RUN_FAILED})
"""The failure types that are the user's news, not a bug: shown without a stack trace."""


class PlainFailureConverter(DefaultFailureConverter):
    """Temporal's failure converter, except that an `ApplicationError` of a type in
    `PLAIN_FAILURES` goes out without its stack trace."""

    def to_failure(
        self,
        exception: BaseException,
        payload_converter: TemporalPayloadConverter,
        failure: Failure,
    ) -> None:
        if isinstance(exception, ApplicationError) and exception.type in PLAIN_FAILURES:
            exception = exception.with_traceback(None)
        super().to_failure(exception, payload_converter, failure)


class PlainFailureConverterWithEncodedAttributes(PlainFailureConverter):
    """`PlainFailureConverter` with message and stack trace in an encoded (so encrypted)
    payload, as `DefaultFailureConverterWithEncodedAttributes`."""

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)


class UncopiedDataConverter(DataConverter):
    """Temporal's data converter, except that payloads a worker's activation brings are left
    where they are when decoding changes none of them.

    The SDK decodes an activation's payloads in three passes (external-storage references,
    external storage, the codec), and each pass puts back every payload of a sequence it
    visited, copying it, whether it changed or not: a signal of 1.9 MB cost 2.3 ms of worker
    CPU before the workflow saw it, and a replay of a flooded history (15 such signals) 34 ms,
    ten times that on a loaded machine, all inside the workflow task the flood races
    (docs/concepts/limits.md, "A flood of signals"). A pass that returns the very sequence it
    was given is not put back (`temporalio.bridge.worker._Visitor`)."""

    async def _decode_reference_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        return _same_if_unchanged(
            payloads, await super()._decode_reference_payload_sequence(payloads)
        )

    async def _external_retrieve_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        return _same_if_unchanged(
            payloads, await super()._external_retrieve_payload_sequence(payloads)
        )

    async def _decode_payload_sequence(self, payloads: Sequence[Payload]) -> list[Payload]:
        return _same_if_unchanged(payloads, await super()._decode_payload_sequence(payloads))


def _same_if_unchanged(given: Sequence[Payload], decoded: list[Payload]) -> list[Payload]:
    """`given` itself when each decoded payload is the one given (nothing to put back)."""
    if len(decoded) == len(given) and all(d is g for d, g in zip(decoded, given, strict=True)):
        return given  # type: ignore[return-value]  # read only by its callers
    return decoded


data_converter = UncopiedDataConverter(
    payload_converter_class=PayloadConverter, failure_converter_class=PlainFailureConverter
)
"""agentloop's data converter (without encryption; see `agentloop.client.data_converter`)."""
