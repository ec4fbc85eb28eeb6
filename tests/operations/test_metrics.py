"""The workers' Prometheus endpoint, scraped over HTTP after a real run: a write approved, its
answer lost, its lookup inconclusive, so it waits for an operator (the unknown-write gauge up)
until resolved (down again), with the Temporal SDK's own worker metrics on the same endpoint.

Temporal's runtime is per client: this test's worker has a client on a runtime of its own that
serves metrics, on a task queue of its own, beside the session's worker.
"""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.runtime import OpenTelemetryConfig

from agentloop.client import StartupError, connect
from agentloop.contract import Limits, Principal, ResolveRequest
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.metrics import (
    LABELS,
    MAX_LABEL_VALUES,
    METRICS,
    count_waiting,
    metrics_runtime,
    otlp_telemetry,
    record,
)
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import metrics_banner, running_worker, serving_metrics
from agentloop.workflows.steps import LOOKUP_RETRY
from tests.crash.test_exactly_once import (
    CALL_ID,
    LOOKUP_OUTAGE,
    REPLY,
    start_and_approve,
    write_script,
)
from tests.live import Servers, agent_input, scripted
from tests.operations.test_metrics_deploy import dashboard_temporal_metrics
from tests.people.test_inbox_notices import Webhook, webhooks
from tests.support import eventually, result_of, start_run, wait_for_phase

__all__ = ["webhooks"]  # the fixture, used here

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

Samples = dict[str, dict[frozenset[tuple[str, str]], float]]
SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> Samples:
    samples: Samples = {}
    for line in text.splitlines():
        found = SAMPLE.match(line)
        if found:
            name, labels, value = found.groups()
            key = frozenset(LABEL.findall(labels or ""))
            samples.setdefault(name, {})[key] = float(value)
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name` over the series carrying `labels`."""
    wanted = set(labels.items())
    return sum(v for key, v in samples.get(name, {}).items() if wanted <= key)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
async def metered(
    client: Client, worker_settings: Settings, webhooks: tuple[Webhook, Webhook]
) -> AsyncIterator[Settings]:
    port = free_port()
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"metrics-{uuid.uuid4().hex[:8]}",
            "temporal_address": client.service_client.config.target_host,
            "metrics_port": port,
            "metrics_poll_seconds": 0.2,
            "notify_webhooks": webhooks[0].url,
            "notify_secret": "metrics-test",
        }
    )
    metered_client = await connect(settings, metrics_runtime(port, host="127.0.0.1"))
    async with running_worker(metered_client, settings):
        yield settings


async def scrape(settings: Settings) -> Samples:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{settings.metrics_port}/metrics") as response,
    ):
        assert response.status == 200
        return parse(await response.text())


async def test_a_run_shows_on_the_workers_metrics_endpoint(
    servers: Servers, webhooks: tuple[Webhook, Webhook], metered: Settings, run_id: str
) -> None:
    case = REPLY
    servers.provider.register(write_script(run_id, case, "ops says applied"))
    servers.service.inject_fault(case.write_endpoint, "commit_then_drop")
    servers.service.inject_fault(case.lookup_endpoint, "unavailable", count=LOOKUP_OUTAGE)

    # The gauges count the namespace's waiting runs: what other tests left waiting too.
    left = await count_waiting(servers.client)
    handle = await start_and_approve(servers.client, metered, servers.service, run_id, case)
    await wait_for_phase(handle, "awaiting_reconciliation")

    async def unknown_open(count: float) -> bool:
        return value(await scrape(metered), "agentloop_unknown_writes_open") == count

    await eventually(lambda: unknown_open(left["unknown_write"] + 1), "the write in its gauge")
    samples = await scrape(metered)
    assert value(samples, "agentloop_runs_waiting", kind="unknown_write") == (
        left["unknown_write"] + 1
    )
    assert value(samples, "agentloop_runs_waiting", kind="approval") == left["approval"]
    # How long it has waited, from its sealed memo.
    assert value(samples, "agentloop_oldest_wait_seconds", kind="unknown_write") > 0
    if not left["approval"]:
        assert value(samples, "agentloop_oldest_wait_seconds", kind="approval") == 0

    await handle.signal(
        "resolve", ResolveRequest(call_id=CALL_ID, outcome="applied", operator="ops")
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    await eventually(lambda: unknown_open(left["unknown_write"]), "the resolved write out")

    samples = await scrape(metered)
    if not left["unknown_write"]:
        assert value(samples, "agentloop_oldest_wait_seconds", kind="unknown_write") == 0
    tenant = {"tenant": "default"}
    assert value(samples, "agentloop_runs_started_total", **tenant) == 1
    assert value(samples, "agentloop_runs_ended_total", outcome="completed", **tenant) == 1
    assert value(samples, "agentloop_runs_ended_total", outcome="failed") == 0
    assert value(samples, "agentloop_approval_latency_seconds_count", outcome="counted") == 1
    assert value(samples, "agentloop_approval_latency_seconds_sum") > 0
    tool = {"tool": case.tool, **tenant}
    assert value(samples, "agentloop_tool_calls_total", outcome="unknown", **tool) == 1
    assert value(samples, "agentloop_tool_calls_total", outcome="succeeded", **tool) == 0
    # Every attempt of the lookup failed (the service was unavailable).
    attempts = LOOKUP_RETRY.maximum_attempts
    assert value(samples, "agentloop_tool_lookups_total", outcome="failed", **tool) == attempts
    model = {"provider": "openai-chat", "model": run_id}
    assert value(samples, "agentloop_model_calls_total", outcome="ok", **model) == 2
    usage = result.usage
    assert value(samples, "agentloop_model_tokens_total", direction="input", **model) == (
        usage.input_tokens
    )
    assert value(samples, "agentloop_model_tokens_total", direction="output", **model) == (
        usage.output_tokens
    )
    assert usage.input_tokens > 0
    # One notice, when the call began waiting for its approval (a call is noticed once: not
    # again when its write turned unknown), and the webhook got it.
    assert value(samples, "agentloop_notices_total", kind="approval", outcome="sent") == 1
    assert value(samples, "agentloop_notices_total", outcome="sent") == len(webhooks[0].received)
    assert value(samples, "agentloop_notices_total", outcome="failed") == 0
    # Temporal's own worker metrics, on the same endpoint.
    assert value(samples, "temporal_worker_task_slots_available", task_queue=metered.task_queue)
    assert any(name.startswith("temporal_activity_execution_latency") for name in samples)
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for name in samples}
    assert dashboard_temporal_metrics() <= shown  # what the dashboard shows of Temporal's
    # Every metric of ours the run touched is one `METRICS` names.
    ours = {name for name in samples if name.startswith("agentloop_")}
    exported = {m.exported for m in METRICS.values()}
    assert {re.sub(r"_(bucket|sum|count)$", "", name) for name in ours} <= exported


async def test_runs_stopped_by_a_cap_or_failed_count_by_outcome(
    servers: Servers, metered: Settings, run_id: str
) -> None:
    weather = scripted_call("get_weather", "c_weather", city="Paris", date="2026-12-01")
    servers.provider.register(scripted(run_id, [weather], "Sunny."))
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Weather in Paris?",
        ["get_weather"],
        limits=Limits(max_model_calls=1),
        principal=Principal(subject="p-alice", tenant="acme"),
    )
    result = await result_of(await start_run(servers.client, metered, run_id, run_input))
    assert (result.status, result.stop_cause) == ("limit_reached", "budget"), result.stop_reason

    # A model the provider does not know: the run fails (its workflow too, by default).
    unknown = agent_input(f"{run_id}-unscripted", "openai-chat", "Hello?", [])
    failed = await result_of(await start_run(servers.client, metered, f"{run_id}-failed", unknown))
    assert failed.status == "failed", failed.stop_reason

    samples = await scrape(metered)
    assert value(samples, "agentloop_runs_ended_total", outcome="failed", tenant="default") == 1
    assert value(samples, "agentloop_model_calls_total", outcome="failed") >= 1
    acme = {"tenant": "acme"}
    assert value(samples, "agentloop_budget_refusals_total", cap="max_model_calls", **acme) == 1
    assert value(samples, "agentloop_runs_ended_total", outcome="limit_reached", **acme) == 1
    assert (
        value(samples, "agentloop_tool_calls_total", tool="get_weather", outcome="succeeded") == 1
    )


def test_a_metrics_port_in_use_stops_the_worker_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError) as caught:
            serving_metrics(Settings(metrics_port=port))
    assert f"AGENTLOOP_METRICS_PORT={port}" in str(caught.value)
    assert "in use" in str(caught.value)
    assert serving_metrics(Settings()) is None


def test_metrics_go_to_prometheus_or_to_an_otlp_collector_never_both() -> None:
    """The configuration only: no OTLP collector runs here, so delivery is not tested."""
    url = "http://127.0.0.1:4317"
    telemetry = otlp_telemetry(url)
    assert isinstance(telemetry.metrics, OpenTelemetryConfig)
    assert (telemetry.metrics.url, telemetry.metrics.durations_as_seconds) == (url, True)
    otlp = Settings(metrics_otlp_url=url)
    assert serving_metrics(otlp) is not None  # the SDK takes it (it exports in the background)
    assert metrics_banner(otlp) == f"; metrics pushed to {url}"
    with pytest.raises(ConfigError) as caught:
        serving_metrics(Settings(metrics_port=free_port(), metrics_otlp_url=url))
    assert "AGENTLOOP_METRICS_PORT and AGENTLOOP_METRICS_OTLP_URL are both set" in str(caught.value)
    with pytest.raises(ConfigError, match="AGENTLOOP_METRICS_OTLP_URL='collector:4317'"):
        Settings.load({"AGENTLOOP_METRICS_OTLP_URL": "collector:4317"})


def test_a_worker_that_exports_no_metrics_takes_no_label_slots() -> None:
    """Workers without an exporter (the suite's own, say) record nothing: a metrics worker
    beside them in the process still names its models rather than `other`."""
    for n in range(MAX_LABEL_VALUES + 1):
        record(MetricMeter.noop, "agentloop_model_calls", 1, outcome="ok", provider="p", model=n)
    assert LABELS.value("model", "a-model-named-late") == "a-model-named-late"
