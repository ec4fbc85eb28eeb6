"""The payload converter agentloop's clients and workers use: Temporal's pydantic converter,
except that JSON holding a lone surrogate escape (`"\\ud800"`) is still read.

pydantic's JSON parser refuses such a string, so a run started by any client with one in its
input would fail every workflow task ("Failed decoding arguments") before agentloop's code
could say why. Read with Python's parser instead, the input reaches `startup.parse_input`,
which fails the run at once naming the problem. Only JSON pydantic refuses takes that path.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)


class _JSONConverter(PydanticJSONPlainPayloadConverter):
    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        try:
            return super().from_payload(payload, type_hint)
        except ValidationError as exc:
            if b"\\u" not in payload.data or not _json_invalid(exc):
                raise
            try:
                # Python's parser recurses: too deep a value raises RecursionError, refused
                # like any JSON pydantic refuses (the payload is within Temporal's size limit).
                value = json.loads(payload.data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise exc from None
            return TypeAdapter(type_hint if type_hint is not None else Any).validate_python(value)


def _json_invalid(exc: ValidationError) -> bool:
    return any(error["type"] == "json_invalid" for error in exc.errors())


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


data_converter = DataConverter(payload_converter_class=PayloadConverter)
"""agentloop's data converter (without encryption; see `agentloop.client.data_converter`)."""
