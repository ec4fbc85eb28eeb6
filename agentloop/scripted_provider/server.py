"""The scripted model provider: an aiohttp app that plays scripts over three wire protocols.

Run standalone with `python -m agentloop.scripted_provider.server --port 8788`.

Routes (`model` names the script to play; the same script plays over every protocol):
- `POST /v1/chat/completions`  OpenAI Chat Completions (openai `base_url` = root + `/v1`).
- `POST /v1/responses`         OpenAI Responses (same `base_url`).
- `POST /v1/messages`          Anthropic Messages (anthropic `base_url` = root).
- `POST /v1/messages/count_tokens`, `POST /v1/responses/input_tokens`: the token counters
                               (Anthropic's, OpenAI's), counting as the turn's usage reports.
- `PUT  /_scripts/{name}`      register or replace a script (JSON body = `Script`); with
                               `--scripts DIR`, its files too (read again when changed).
- `GET  /_violations`          `{"violations": [{"script", "turn", "message", "protocol"}]}`.
- `GET  /_requests`            every request: `[{"script", "turn", "stream", "body",
                               "protocol", "received_at"}]`.
- `GET  /_token_counts`        every request to a counter: `[{"script", "protocol",
                               "input_tokens"}]`.
- `POST /_reset`               clear both logs and the fault counters (scripts stay).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError
from yarl import URL

from agentloop.scripted_provider import openai_errors
from agentloop.scripted_provider.playback import (
    Playback,
    RecordedRequest,
    TokenCount,
    Violation,
)
from agentloop.scripted_provider.protocols import (
    ANTHROPIC,
    OPENAI_RESPONSES,
    PROTOCOLS,
    WireProtocol,
)
from agentloop.scripted_provider.rendering import Rejection, Reply
from agentloop.scripted_provider.scripts import Script, ScriptFolder, load_builtin_scripts

__all__ = ["DEFAULT_PORT", "RecordedRequest", "ScriptedProvider", "TokenCount", "Violation", "main"]

DEFAULT_PORT = 8788

# Seconds `stop()` waits for in-flight responses; tests must not hang on a stuck client.
_SHUTDOWN_TIMEOUT = 2.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ScriptedProvider:
    """Plays scripts to the official OpenAI and Anthropic clients; stateless per request,
    except for the count of scripted errors already answered per (script, turn)."""

    def __init__(
        self,
        scripts: Iterable[Script] = (),
        *,
        builtin: bool = True,
        scripts_dir: Path | None = None,
    ) -> None:
        """`scripts_dir`: a folder of script files (`*.json`, `*.toml`, one script each,
        named after the file unless it says `name`), read again whenever one changes."""
        folder = ScriptFolder(scripts_dir) if scripts_dir is not None else None
        self._playback = Playback(load_builtin_scripts().values() if builtin else (), folder)
        for script in scripts:
            self.register(script)
        self._runner: web.AppRunner | None = None
        self._root: URL | None = None
        self.streaming = 0
        """Streamed answers being sent right now."""
        self.frame_sent: Callable[[bytes], None] | None = None
        """Called with each streamed frame as it is written (a benchmark times delivery)."""
        self._ends_held: dict[tuple[str, int], asyncio.Event] = {}

    # --- in-process API ---------------------------------------------------------------

    def register(self, script: Script) -> None:
        """Add or replace a script (its fault counters start over); the next request naming
        it as `model` plays it."""
        self._playback.register(script)

    def hold_stream_ends(self, script: str, turn: int) -> Callable[[], None]:
        """Streamed answers of `script`'s turn `turn` (from 0) send every frame but the last,
        then wait there until the returned function is called: a test sees text arrive while
        the answer is still open, however slow the machine (call it in a `finally`: nothing
        else lets them end)."""
        key = (script, turn)
        gate = self._ends_held[key] = asyncio.Event()

        def release() -> None:
            gate.set()
            if self._ends_held.get(key) is gate:
                del self._ends_held[key]

        return release

    @property
    def scripts(self) -> dict[str, Script]:
        return self._playback.scripts

    @property
    def scripts_dir(self) -> Path | None:
        return self._playback.folder.path if self._playback.folder else None

    @property
    def script_problems(self) -> list[str]:
        """The files of `scripts_dir` that are not a script, each with why."""
        return list(self._playback.folder.problems) if self._playback.folder else []

    @property
    def violations(self) -> list[Violation]:
        return self._playback.violations

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._playback.requests

    @property
    def token_counts(self) -> list[TokenCount]:
        return self._playback.token_counts

    def reset(self) -> None:
        """Clear the request and violation logs and the fault counters."""
        self._playback.reset()

    @property
    def base_url(self) -> str:
        """The openai client's `base_url` (`http://HOST:PORT/v1`)."""
        return str(self._started() / "v1")

    @property
    def anthropic_base_url(self) -> str:
        """The anthropic client's `base_url` (`http://HOST:PORT`; it appends `/v1/messages`)."""
        return str(self._started()).rstrip("/")

    def make_app(self) -> web.Application:
        app = web.Application()
        for protocol in PROTOCOLS:
            app.router.add_post(protocol.path, self._model_handler(protocol))
        app.router.add_post("/v1/messages/count_tokens", self._count_handler(ANTHROPIC))
        app.router.add_post("/v1/responses/input_tokens", self._count_handler(OPENAI_RESPONSES))
        app.router.add_put("/_scripts/{name}", self._put_script)
        app.router.add_get("/_violations", self._get_violations)
        app.router.add_get("/_requests", self._get_requests)
        app.router.add_get("/_token_counts", self._get_token_counts)
        app.router.add_post("/_reset", self._post_reset)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 picks a free port); returns the OpenAI `base_url` (…/v1)."""
        if self._runner is not None:
            raise RuntimeError("ScriptedProvider is already started")
        runner = web.AppRunner(self.make_app(), shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        self._runner = runner
        # yarl brackets IPv6 hosts, which an f-string would not.
        self._root = URL.build(scheme="http", host=host, port=runner.addresses[0][1])
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._root = None

    def _started(self) -> URL:
        if self._root is None:
            raise RuntimeError("ScriptedProvider is not started")
        return self._root

    # --- the model endpoints ----------------------------------------------------------

    def _model_handler(self, protocol: WireProtocol) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            received_at = time.monotonic()
            body = _parse_json(await request.text())
            answer = self._playback.answer(protocol, body, received_at=received_at)
            headers = {protocol.request_id_header: f"req_{uuid.uuid4().hex}"}
            if answer.delay_ms:
                await asyncio.sleep(answer.delay_ms / 1000)
            if isinstance(answer, Rejection):
                payload = protocol.render_error(answer)
                headers.update(answer.headers())
                return web.json_response(payload, status=answer.status, headers=headers)
            if not answer.stream:
                return web.json_response(protocol.render_body(answer), headers=headers)
            end_held = self._ends_held.get((answer.output.script, answer.output.index))
            self.streaming += 1
            try:
                return await _send_stream(
                    request, protocol, answer, headers, self.frame_sent, end_held
                )
            finally:
                self.streaming -= 1

        return handle

    def _count_handler(self, protocol: WireProtocol) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            counted = self._playback.count(protocol, _parse_json(await request.text()))
            headers = {protocol.request_id_header: f"req_{uuid.uuid4().hex}"}
            if isinstance(counted, Rejection):
                body = protocol.render_error(counted)
                return web.json_response(body, status=counted.status, headers=headers)
            answer: dict[str, Any] = {"input_tokens": counted}
            if protocol is OPENAI_RESPONSES:
                answer["object"] = "response.input_tokens"
            return web.json_response(answer, headers=headers)

        return handle

    # --- control endpoints ------------------------------------------------------------

    async def _put_script(self, request: web.Request) -> web.Response:
        try:
            script = _script_from(request.match_info["name"], await request.text())
        except _InvalidScript as invalid:
            body = openai_errors.error_body(invalid.rejection)
            return web.json_response(body, status=invalid.rejection.status)
        self.register(script)
        return web.json_response(script.model_dump(mode="json"))

    async def _get_violations(self, _: web.Request) -> web.Response:
        return web.json_response({"violations": self.violations})

    async def _get_requests(self, _: web.Request) -> web.Response:
        return web.json_response(self.requests)

    async def _get_token_counts(self, _: web.Request) -> web.Response:
        return web.json_response(self.token_counts)

    async def _post_reset(self, _: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"reset": True})


class _InvalidScript(Exception):
    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.rejection = Rejection(400, message, code="invalid_script", param=param)


def _script_from(name: str, text: str) -> Script:
    try:
        script = Script.model_validate_json(text)
    except ValidationError as error:
        raise _InvalidScript(str(error)) from error
    if script.name != name:
        message = f"the script is named {script.name!r} but was PUT at /_scripts/{name}"
        raise _InvalidScript(message, param="name")
    return script


def _parse_json(text: str) -> Any:
    # Unparseable bodies are kept as text so the request log still shows what came in.
    try:
        return json.loads(text)
    except ValueError:
        return text


async def _send_stream(
    request: web.Request,
    protocol: WireProtocol,
    reply: Reply,
    headers: dict[str, str],
    frame_sent: Callable[[bytes], None] | None = None,
    end_held: asyncio.Event | None = None,
) -> web.StreamResponse:
    stream = protocol.render_stream(reply)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers}
    )
    await response.prepare(request)
    pause = reply.turn.event_delay_ms / 1000
    frames = list(stream.frames(reply.turn.cut_stream_after_events))
    for n, frame in enumerate(frames):
        if n == reply.drop_after and request.transport is not None:
            request.transport.abort()  # the connection lost mid-answer
            return response
        if pause and n:
            await asyncio.sleep(pause)
        if end_held is not None and n == len(frames) - 1:
            await end_held.wait()
        await response.write(frame)
        if frame_sent is not None:
            frame_sent(frame)
    await response.write_eof()
    return response


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the scripted model provider.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--scripts", type=Path, help="a folder of script files (JSON or TOML)")
    args = parser.parse_args(argv)
    provider = ScriptedProvider(scripts_dir=args.scripts)
    root = URL.build(scheme="http", host=args.host, port=args.port)
    ready = (
        f"scripted provider: openai base_url {root / 'v1'}, anthropic base_url {root}, "
        f"scripts {sorted(provider.scripts)}"
    )
    web.run_app(  # until SIGINT
        provider.make_app(),
        host=args.host,
        port=args.port,
        shutdown_timeout=_SHUTDOWN_TIMEOUT,
        # Once it listens, and flushed: a process that waits for the line can connect then.
        print=lambda _: print(ready, flush=True),
    )


if __name__ == "__main__":
    main()
