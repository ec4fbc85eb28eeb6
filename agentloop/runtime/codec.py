"""Payload encryption for Temporal history, and the remote codec endpoint the Temporal UI reads
it through (`agentloop codec-server`).

Every payload the worker, the CLI and any client built by `agentloop.worker.connect` write
(workflow input and result, activity arguments and results, signals, queries, memos, the UI
summaries) is encrypted whole with AES-256-GCM: the `Payload` protobuf (its metadata and data)
is serialised and sealed under a fresh 12-byte nonce, and the result is a payload with

    metadata: encoding = binary/encrypted, encryption-key-id = <id>
    data:     nonce (12 bytes) || ciphertext || tag (16 bytes)

(the layout of Temporal's encryption samples). Failure messages and stack traces are moved
into an encoded payload too (`PlainFailureConverterWithEncodedAttributes`), so they are
encrypted as well. What stays readable in history: workflow and activity type names, ids,
task queues, timestamps, search attributes.

Keys rotate by id: the codec holds a key ring `{key_id: 32-byte key}` and an active id. It
encrypts with the active key and decrypts any payload whose id is in the ring; a payload
written before encryption was turned on (no `binary/encrypted` encoding) passes through
decode unchanged. `AGENTLOOP_CODEC_KEYS=k2:BASE64,k1:BASE64` configures it; the first is
active.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aiohttp import hdrs, web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    PayloadCodec,
)

from agentloop.runtime.converter import PlainFailureConverterWithEncodedAttributes

__all__ = [
    "CODEC_KEYS_VARIABLE",
    "DEFAULT_UI_ORIGINS",
    "ENCODING",
    "KEY_ID_METADATA",
    "EncryptionCodec",
    "KeyRing",
    "KeyRingError",
    "PayloadDecryptionError",
    "UnknownKeyIdError",
    "codec_server_app",
    "decode_in_place",
    "encrypting_data_converter",
    "mask_key_ring",
    "new_key",
    "serve_codec_server",
]

ENCODING = "binary/encrypted"
"""The `encoding` metadata of an encrypted payload."""
KEY_ID_METADATA = "encryption-key-id"
"""The metadata naming the key a payload was encrypted with."""
CODEC_KEYS_VARIABLE = "AGENTLOOP_CODEC_KEYS"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
DEFAULT_UI_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
"""The local dev server's UI, by either name a browser may have typed."""

_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEY_RING_SHAPE = (
    "expected ID:KEY[,ID:KEY...], the first one active, each KEY 32 random bytes in base64"
    " (e.g. from `openssl rand -base64 32`)"
)


# --- the key ring -------------------------------------------------------------------------


class KeyRingError(ValueError):
    """A key ring that cannot be used; the message names the entry (never the key) and the
    expected shape."""


@dataclass(frozen=True)
class KeyRing:
    keys: Mapping[str, bytes] = field(repr=False)
    """Key id -> 32-byte AES-256 key (never in the repr)."""
    active: str
    """The id new payloads are encrypted with."""

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeyRingError(f"no keys: {_KEY_RING_SHAPE}")
        for key_id, key in self.keys.items():
            if not _KEY_ID.fullmatch(key_id):
                raise KeyRingError(_bad_id(key_id))
            if len(key) != KEY_BYTES:
                raise KeyRingError(_bad_length(key_id, len(key)))
        if self.active not in self.keys:
            raise KeyRingError(f"the active key id {self.active!r} is not in the ring")

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        """`k2:BASE64,k1:BASE64` (the first active). Raises `KeyRingError` naming the first
        entry that is wrong."""
        keys: dict[str, bytes] = {}
        entries = [e.strip() for e in text.split(",")]
        if not any(entries):
            raise KeyRingError(f"no keys: {_KEY_RING_SHAPE}")
        for number, entry in enumerate(entries, start=1):
            key_id, sep, encoded = (part.strip() for part in entry.partition(":"))
            if not sep or not key_id:
                raise KeyRingError(f"entry {number} has no key id before ':': {_KEY_RING_SHAPE}")
            if not _KEY_ID.fullmatch(key_id):
                raise KeyRingError(_bad_id(key_id))
            if key_id in keys:
                raise KeyRingError(f"key id {key_id!r} appears twice: each id names one key")
            key = _b64decode(encoded)
            if key is None:
                raise KeyRingError(f"key {key_id!r} is not valid base64: {_KEY_RING_SHAPE}")
            if len(key) != KEY_BYTES:
                raise KeyRingError(_bad_length(key_id, len(key)))
            keys[key_id] = key
        return cls(keys=keys, active=next(iter(keys)))

    @property
    def ids(self) -> list[str]:
        """The key ids, the active one first."""
        return [self.active, *(k for k in self.keys if k != self.active)]

    def describe(self) -> str:
        """`k2 (active), k1`: the ids only."""
        return ", ".join(f"{k} (active)" if k == self.active else k for k in self.ids)


def _bad_id(key_id: str) -> str:
    return (
        f"key id {key_id!r} is not 1-64 letters, digits, '.', '_' or '-'"
        f" (starting with a letter or digit): {_KEY_RING_SHAPE}"
    )


def _bad_length(key_id: str, length: int) -> str:
    return f"key {key_id!r} is {length} bytes, AES-256 needs exactly {KEY_BYTES}: {_KEY_RING_SHAPE}"


def _b64decode(text: str) -> bytes | None:
    """Standard or URL-safe base64, padding optional; None if it is not base64."""
    cleaned = text.replace("-", "+").replace("_", "/")
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        return None


def mask_key_ring(value: str) -> str:
    """The ring as it may be printed: `k2:***,k1:***` (ids only, no key material)."""
    shown = []
    for entry in value.split(","):
        key_id, sep, _ = entry.strip().partition(":")
        shown.append(f"{key_id.strip()}:***" if sep and key_id.strip() else "***")
    return ",".join(shown)


def new_key() -> str:
    """A fresh random AES-256 key in base64, as `AGENTLOOP_CODEC_KEYS` takes it."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode()


# --- the codec ------------------------------------------------------------------------------


class PayloadDecryptionError(ValueError):
    """An encrypted payload that cannot be decrypted."""


class UnknownKeyIdError(PayloadDecryptionError):
    """An encrypted payload whose key id is not in the ring."""

    def __init__(self, key_id: str, ring: Sequence[str]) -> None:
        self.key_id = key_id
        super().__init__(
            f"payload encrypted with key id {key_id!r}, which is not in the key ring"
            f" ({', '.join(ring)}): add {key_id}:KEY to {CODEC_KEYS_VARIABLE}"
            " (after the active key) to read it"
        )


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole payloads, keys by id (see the module docstring)."""

    def __init__(self, keys: Mapping[str, bytes], active_key_id: str) -> None:
        self.ring = KeyRing(dict(keys), active_key_id)
        self._ciphers = {key_id: AESGCM(key) for key_id, key in self.ring.keys.items()}
        self._active = self._ciphers[active_key_id]
        self._active_id = active_key_id.encode()

    @classmethod
    def from_ring(cls, ring: KeyRing) -> EncryptionCodec:
        return cls(ring.keys, ring.active)

    @classmethod
    def from_text(cls, text: str) -> EncryptionCodec:
        """From `AGENTLOOP_CODEC_KEYS`'s format; raises `KeyRingError`."""
        return cls.from_ring(KeyRing.parse(text))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._active.encrypt(nonce, payload.SerializeToString(deterministic=True), None)
        return Payload(
            metadata={"encoding": ENCODING.encode(), KEY_ID_METADATA: self._active_id},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        """The original payload; one that is not encrypted is returned as it is."""
        if payload.metadata.get("encoding") != ENCODING.encode():
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA)
        if raw_id is None:
            raise PayloadDecryptionError(
                f"encrypted payload without {KEY_ID_METADATA!r} metadata: cannot tell its key"
            )
        key_id = raw_id.decode("utf-8", errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownKeyIdError(key_id, self.ring.ids)
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise PayloadDecryptionError(
                f"encrypted payload (key id {key_id!r}) is {len(data)} bytes: too short to be"
                " a nonce and a tag, it was cut or altered"
            )
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], None)
        except InvalidTag:
            raise PayloadDecryptionError(
                f"encrypted payload (key id {key_id!r}) failed authentication: it was altered,"
                f" or the key named {key_id!r} in {CODEC_KEYS_VARIABLE} is not the one it was"
                " encrypted with"
            ) from None
        original = Payload()
        try:
            original.ParseFromString(plain)
        except DecodeError:
            raise PayloadDecryptionError(
                f"encrypted payload (key id {key_id!r}) does not hold a Temporal payload"
            ) from None
        return original


def encrypting_data_converter(
    codec: PayloadCodec, base: DataConverter = pydantic_data_converter
) -> DataConverter:
    """`base` with `codec` over every payload, and failure messages and stack traces moved
    into an encoded (so encrypted) payload."""
    return dataclasses.replace(
        base,
        payload_codec=codec,
        failure_converter_class=PlainFailureConverterWithEncodedAttributes,
    )


async def decode_in_place(message: Message, codec: PayloadCodec) -> None:
    """Decode every `Payload` inside a protobuf `message` (e.g. each event of a fetched
    history) in place. A client's `fetch_history()` returns payloads as stored; this is how
    to read an encrypted one."""
    for descriptor, value in message.ListFields():
        kind = descriptor.message_type
        if kind is None:
            continue
        if kind.GetOptions().map_entry:
            value_kind = kind.fields_by_name["value"].message_type
            if value_kind is None:
                continue
            if value_kind.full_name == _PAYLOAD:
                keys = list(value)
                decoded = await codec.decode([value[k] for k in keys])
                for key, payload in zip(keys, decoded, strict=True):
                    _replace(value[key], payload)
            else:
                for item in value.values():
                    await decode_in_place(item, codec)
        elif _is_repeated(descriptor):
            if kind.full_name == _PAYLOAD:
                decoded = await codec.decode(list(value))
                for item, payload in zip(value, decoded, strict=True):
                    _replace(item, payload)
            else:
                for item in value:
                    await decode_in_place(item, codec)
        elif kind.full_name == _PAYLOAD:
            _replace(value, (await codec.decode([value]))[0])
        else:
            await decode_in_place(value, codec)


_PAYLOAD = Payload.DESCRIPTOR.full_name


def _replace(target: Payload, payload: Payload) -> None:
    if payload is not target:
        target.CopyFrom(payload)


def _is_repeated(descriptor: FieldDescriptor) -> bool:
    is_repeated = getattr(descriptor, "is_repeated", None)  # protobuf >= 5.29; `label` before
    if is_repeated is not None:
        return bool(is_repeated)
    return bool(getattr(descriptor, "label", None) == FieldDescriptor.LABEL_REPEATED)


# --- the remote codec endpoint of the Temporal UI -----------------------------------------

MAX_REQUEST_BYTES = 64 * 1024 * 1024
_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"


def codec_server_app(codec: PayloadCodec, origins: Sequence[str]) -> web.Application:
    """The Temporal codec server protocol: `POST /encode` and `POST /decode` (also under a
    namespace segment, `/{namespace}/decode`, as the Temporal CLI's `--codec-endpoint`
    template sends), each taking and answering `{"payloads": [...]}` in protobuf JSON
    (metadata values and data base64). The `X-Namespace` header is accepted (one ring serves
    every namespace). A browser may call it from `origins` only (CORS, with credentials); an
    `OPTIONS` preflight answers the allowed methods and headers.

    A payload that cannot be decoded (unknown key id, altered) answers 400 with
    `{"error": ...}` naming why; payload contents are never logged."""
    allowed = {o.rstrip("/") for o in origins}

    def allows(origin: str | None) -> bool:
        return origin is not None and origin.rstrip("/") in allowed

    @web.middleware
    async def cors(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        origin = request.headers.get(hdrs.ORIGIN)
        headers = {hdrs.VARY: "Origin"}
        if origin is not None and allows(origin):
            headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
            headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # 404, 405, 413: the browser may read them too
            exc.headers.update(headers)
            raise
        response.headers.update(headers)
        return response

    async def preflight(request: web.Request) -> web.Response:
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and not allows(origin):
            return web.json_response(
                {"error": f"origin {origin} is not allowed: start with --origin {origin}"},
                status=403,
            )
        return web.Response(
            status=204,
            headers={
                hdrs.ACCESS_CONTROL_ALLOW_METHODS: "POST, OPTIONS",
                hdrs.ACCESS_CONTROL_ALLOW_HEADERS: _ALLOWED_HEADERS,
                hdrs.ACCESS_CONTROL_MAX_AGE: "600",
            },
        )

    def endpoint(
        transform: Callable[[Sequence[Payload]], Awaitable[list[Payload]]],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = await request.text()
                payloads = json_format.Parse(body, Payloads(), ignore_unknown_fields=True)
            except (json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
                return web.json_response(
                    {"error": f'expected {{"payloads": [...]}} in protobuf JSON: {exc}'},
                    status=400,
                )
            try:
                result = await transform(payloads.payloads)
            except PayloadDecryptionError as exc:
                return web.json_response({"error": str(exc)}, status=400)
            document = {"payloads": [json_format.MessageToDict(p) for p in result]}
            return web.Response(text=json.dumps(document), content_type="application/json")

        return handle

    app = web.Application(middlewares=[cors], client_max_size=MAX_REQUEST_BYTES)
    for prefix in ("", "/{namespace}"):
        app.router.add_post(f"{prefix}/encode", endpoint(codec.encode))
        app.router.add_post(f"{prefix}/decode", endpoint(codec.decode))
        app.router.add_route("OPTIONS", f"{prefix}/encode", preflight)
        app.router.add_route("OPTIONS", f"{prefix}/decode", preflight)
    return app


async def serve_codec_server(
    codec: PayloadCodec,
    *,
    host: str,
    port: int,
    origins: Sequence[str],
    stop: asyncio.Event,
    ready: Callable[[], None] | None = None,
) -> None:
    """Serve `codec_server_app` on host:port until `stop` is set. Raises OSError when the
    port cannot be bound."""
    runner = web.AppRunner(codec_server_app(codec, origins), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        await runner.cleanup()
