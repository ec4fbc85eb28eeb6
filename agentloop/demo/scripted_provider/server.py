"""The scripted model provider: an aiohttp app that plays scripts over the OpenAI Chat API.

Run standalone with `python -m agentloop.demo.scripted_provider.server --port 8788`.

Routes:
- `POST /v1/chat/completions`  the model; `model` names the script to play.
- `PUT  /_scripts/{name}`      register or replace a script (JSON body = `Script`).
- `GET  /_violations`          `{"violations": [{"script", "turn", "message"}]}`.
- `GET  /_requests`            `[{"script", "turn", "stream", "body"}]`, every request received.
- `POST /_reset`               clear both logs (scripts stay registered).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from aiohttp import web
from pydantic import ValidationError
from yarl import URL

from agentloop.demo.scripted_provider import openai_chat
from agentloop.demo.scripted_provider.checks import check_chat_request, tool_results, turn_index
from agentloop.demo.scripted_provider.scripts import (
    Script,
    ScriptTurn,
    load_builtin_scripts,
    render_placeholders,
)

DEFAULT_PORT = 8788

# Seconds `stop()` waits for in-flight responses; tests must not hang on a stuck client.
_SHUTDOWN_TIMEOUT = 2.0


class Violation(TypedDict):
    script: str
    turn: int | None
    message: str


class RecordedRequest(TypedDict):
    script: Any  # the request's `model`, whatever the client sent
    turn: int | None
    stream: bool
    body: Any


class _Rejection(Exception):
    """A request answered with an OpenAI-shaped error instead of a completion."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = openai_chat.error_body(
            message, error_type="invalid_request_error", code=code, param=param
        )


class ScriptedProvider:
    """Plays scripts to any OpenAI Chat Completions client; stateless per request."""

    def __init__(self, scripts: Iterable[Script] = (), *, builtin: bool = True) -> None:
        self._scripts: dict[str, Script] = load_builtin_scripts() if builtin else {}
        for script in scripts:
            self.register(script)
        self._violations: list[Violation] = []
        self._requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    # --- in-process API ---------------------------------------------------------------

    def register(self, script: Script) -> None:
        """Add or replace a script; the next request naming it as `model` plays it."""
        self._scripts[script.name] = script

    @property
    def scripts(self) -> dict[str, Script]:
        return dict(self._scripts)

    @property
    def violations(self) -> list[Violation]:
        return list(self._violations)

    @property
    def requests(self) -> list[RecordedRequest]:
        return list(self._requests)

    def reset(self) -> None:
        self._violations.clear()
        self._requests.clear()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("ScriptedProvider is not started")
        return self._base_url

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_put("/_scripts/{name}", self._put_script)
        app.router.add_get("/_violations", self._get_violations)
        app.router.add_get("/_requests", self._get_requests)
        app.router.add_post("/_reset", self._post_reset)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 picks a free port); returns the OpenAI `base_url` (…/v1)."""
        if self._runner is not None:
            raise RuntimeError("ScriptedProvider is already started")
        runner = web.AppRunner(self.make_app(), shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        bound_port = runner.addresses[0][1]
        self._runner = runner
        # yarl brackets IPv6 hosts, which an f-string would not.
        self._base_url = str(URL.build(scheme="http", host=host, port=bound_port, path="/v1"))
        return self._base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._base_url = None

    # --- the model endpoint -----------------------------------------------------------

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = _parse_json(await request.text())
        stream = isinstance(body, dict) and body.get("stream") is True
        self._requests.append(_recorded(body, stream))
        try:
            script, turn = self._select_turn(body)
            played = self._render_turn(script, turn, body["messages"])
        except _Rejection as rejection:
            return _error_response(rejection)
        envelope = openai_chat.Envelope(
            id=openai_chat.completion_id(script.name, turn),
            model=script.name,
            created=int(time.time()),
        )
        usage = played.usage_for(prompt_chars=len(json.dumps(body["messages"])))
        if not stream:
            payload = openai_chat.completion_body(played, envelope, usage)
            return web.json_response(payload, headers=_request_id())
        include_usage = _include_usage(body)
        chunks = openai_chat.stream_chunks(played, envelope, usage, include_usage=include_usage)
        return await _send_sse(request, openai_chat.sse_frames(chunks))

    def _select_turn(self, body: Any) -> tuple[Script, int]:
        """The script and turn a valid request asks for; raises `_Rejection` otherwise."""
        if not isinstance(body, dict):
            raise _Rejection(400, "The request body must be a JSON object.", code="invalid_json")
        script = self._script_for(body.get("model"))
        violations = check_chat_request(body, script)
        turn = turn_index(body["messages"]) if isinstance(body.get("messages"), list) else None
        if violations:
            self._record(script.name, turn, violations)
            raise _Rejection(
                400, "Protocol violation: " + "; ".join(violations), code="protocol_violation"
            )
        assert turn is not None  # the checks reject a request without a message list
        if turn >= len(script.turns):
            count = len(script.turns)
            message = f"script {script.name!r} has {count} turn(s); turn {turn} was requested"
            # Recorded too: a loop that asks past the end of its script is misbehaving.
            self._record(script.name, turn, [message])
            raise _Rejection(400, message, code="script_exhausted", param="messages")
        return script, turn

    def _script_for(self, model: Any) -> Script:
        script = self._scripts.get(model) if isinstance(model, str) else None
        if script is None:
            known = sorted(self._scripts)
            message = f"The model `{model}` does not exist (no such script; known: {known})."
            raise _Rejection(404, message, code="model_not_found", param="model")
        return script

    def _render_turn(self, script: Script, turn: int, messages: list[Any]) -> ScriptTurn:
        scripted = script.turns[turn]
        if scripted.text is None:
            return scripted
        text, missing = render_placeholders(scripted.text, tool_results(messages))
        # A missing value still answers (the marker is visible in the text) but is recorded.
        self._record(script.name, turn, [f"placeholder {{{{{m}}}}} has no value" for m in missing])
        return scripted.model_copy(update={"text": text})

    def _record(self, script: str, turn: int | None, messages: list[str]) -> None:
        self._violations += [Violation(script=script, turn=turn, message=m) for m in messages]

    # --- control endpoints ------------------------------------------------------------

    async def _put_script(self, request: web.Request) -> web.Response:
        try:
            script = _script_from(request.match_info["name"], await request.text())
        except _Rejection as rejection:
            return _error_response(rejection)
        self.register(script)
        return web.json_response(script.model_dump(mode="json"))

    async def _get_violations(self, _: web.Request) -> web.Response:
        return web.json_response({"violations": self._violations})

    async def _get_requests(self, _: web.Request) -> web.Response:
        return web.json_response(self._requests)

    async def _post_reset(self, _: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"reset": True})


def _script_from(name: str, text: str) -> Script:
    try:
        script = Script.model_validate_json(text)
    except ValidationError as error:
        raise _Rejection(400, str(error), code="invalid_script") from error
    if script.name != name:
        message = f"the script is named {script.name!r} but was PUT at /_scripts/{name}"
        raise _Rejection(400, message, code="invalid_script", param="name")
    return script


def _error_response(rejection: _Rejection) -> web.Response:
    return web.json_response(rejection.body, status=rejection.status, headers=_request_id())


def _parse_json(text: str) -> Any:
    # Unparseable bodies are kept as text so the request log still shows what came in.
    try:
        return json.loads(text)
    except ValueError:
        return text


def _recorded(body: Any, stream: bool) -> RecordedRequest:
    fields = body if isinstance(body, dict) else {}
    messages = fields.get("messages")
    turn = turn_index(messages) if isinstance(messages, list) else None
    return RecordedRequest(script=fields.get("model"), turn=turn, stream=stream, body=body)


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _request_id() -> dict[str, str]:
    # The openai client exposes this header as `_request_id` on every parsed response.
    return {"x-request-id": f"req_{uuid.uuid4().hex}"}


async def _send_sse(request: web.Request, frames: list[bytes]) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **_request_id()}
    )
    await response.prepare(request)
    for frame in frames:
        await response.write(frame)
    await response.write_eof()
    return response


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the scripted model provider.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    provider = ScriptedProvider()
    scripts = sorted(provider.scripts)
    print(f"scripted provider: base_url http://{args.host}:{args.port}/v1, scripts {scripts}")
    web.run_app(  # until SIGINT
        provider.make_app(), host=args.host, port=args.port, shutdown_timeout=_SHUTDOWN_TIMEOUT
    )


if __name__ == "__main__":
    main()
