"""OpenTelemetry tracing (`AGENTLOOP_OTEL`): a traced run is one trace from the client's start
through the workflow to each model call and tool, in one process or across a worker process;
off adds nothing; tracing that cannot work stops start-up naming the variable and the fix."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor

from agentloop.client import connect
from agentloop.contract import AgentRunInput
from agentloop.runtime import tracing
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.config_checks import OTEL_MODULES, OtelMode
from agentloop.scripted_provider import ScriptedProvider
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop, assert_no_traceback
from tests.live import Live, Servers, agent_input, scripted
from tests.operations.test_config import clean_env, problems_of
from tests.support import result_of, start_run, waited_for, worker_env, worker_process

TRAIN_ARGS = {"train_number": "G1234", "date": "2026-12-01"}
WORKER_SPANS = {
    "RunWorkflow:AgentRun",
    "StartActivity:call_model",
    "RunActivity:call_model",
    "StartActivity:call_model_by_ref",
    "RunActivity:call_model_by_ref",
    "StartActivity:run_tool",
    "RunActivity:run_tool",
    "CompleteWorkflow:AgentRun",
}
"""What the worker side of a one-tool run records (the client records StartWorkflow): its
second model call names the tool specs by reference."""


class ProcessSpans:
    """The spans this test process finishes through its global TracerProvider: each one at
    once (`exported`), and a batched copy that waits for a flush (`buffered`)."""

    def __init__(self) -> None:
        self.exported = InMemorySpanExporter()
        self.buffered = InMemorySpanExporter()

    def of_run(self, workflow_id: str) -> list[ReadableSpan]:
        return [
            span
            for span in self.exported.get_finished_spans()
            if (span.attributes or {}).get("temporalWorkflowID") == workflow_id
        ]


@pytest.fixture(scope="module")
def spans() -> ProcessSpans:
    # What an application embedding agentloop does with AGENTLOOP_OTEL=global: set the
    # process's provider (once per process, OpenTelemetry allows no second one).
    recorded = ProcessSpans()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(recorded.exported))
    provider.add_span_processor(
        BatchSpanProcessor(recorded.buffered, schedule_delay_millis=3_600_000)
    )
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another test set the TracerProvider first"
    return recorded


def settings_for(
    client: Client, base: Settings, otel: OtelMode, *, own_queue: bool = True
) -> Settings:
    """`base` on `client`'s dev server with tracing `otel`, on a task queue of its own unless
    the session worker is to serve it."""
    update: dict[str, Any] = {
        "temporal_address": client.service_client.config.target_host,
        "otel": otel,
    }
    if own_queue:
        update["task_queue"] = f"agent-loop-traced-{uuid.uuid4().hex[:8]}"
    return base.model_copy(update=update)


def one_tool_run(scripted_provider: ScriptedProvider, run_id: str) -> AgentRunInput:
    """A run of two model calls around one `get_train_status` call."""
    scripted_provider.register(
        scripted(
            run_id,
            [scripted_call("get_train_status", "call_train", **TRAIN_ARGS)],
            "G1234 is {{call_train.status}}.",
        )
    )
    return agent_input(
        run_id, "openai-chat", "Is train G1234 late on 2026-12-01?", ["get_train_status"]
    )


def parent_names(spans: Sequence[ReadableSpan]) -> dict[str, set[str]]:
    """Span name -> the names of its parents (among `spans`; `-` for a root)."""
    by_id = {span.context.span_id: span for span in spans}
    parents: dict[str, set[str]] = {}
    for span in spans:
        parent = by_id[span.parent.span_id].name if span.parent else "-"
        parents.setdefault(span.name, set()).add(parent)
    return parents


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_traced_run_is_one_trace_from_start_to_each_tool(
    servers: Servers, worker_settings: Settings, spans: ProcessSpans, run_id: str
) -> None:
    settings = settings_for(servers.client, worker_settings, "global")
    traced = await connect(settings)
    assert [type(i) for i in traced.config()["interceptors"]] == [TracingInterceptor]

    run = one_tool_run(servers.provider, run_id)
    async with running_worker(traced, settings):  # inherits the client's interceptor
        result = await result_of(await start_run(traced, settings, run_id, run))
    assert result.status == "completed", result.stop_reason

    mine = spans.of_run(run_id)
    counts = Counter(span.name for span in mine)
    assert counts["StartWorkflow:AgentRun"] == 1
    assert counts["RunWorkflow:AgentRun"] == 1
    assert counts["CompleteWorkflow:AgentRun"] == 1
    assert counts["RunActivity:call_model"] == 1
    assert counts["RunActivity:call_model_by_ref"] == 1
    assert counts["RunActivity:run_tool"] == 1
    assert len({span.context.trace_id for span in mine}) == 1, "one trace"
    parents = parent_names(mine)
    assert parents["StartWorkflow:AgentRun"] == {"-"}  # the only root
    assert parents["RunWorkflow:AgentRun"] == {"StartWorkflow:AgentRun"}
    assert parents["StartActivity:call_model"] == {"StartWorkflow:AgentRun"}
    assert parents["RunActivity:call_model"] == {"StartActivity:call_model"}
    assert parents["StartActivity:call_model_by_ref"] == {"StartWorkflow:AgentRun"}
    assert parents["RunActivity:call_model_by_ref"] == {"StartActivity:call_model_by_ref"}
    assert parents["RunActivity:run_tool"] == {"StartActivity:run_tool"}
    (start,) = (span for span in mine if span.name == "StartWorkflow:AgentRun")
    (workflow,) = (span for span in mine if span.name == "RunWorkflow:AgentRun")
    (tool,) = (span for span in mine if span.name == "RunActivity:run_tool")
    assert (start.kind, workflow.kind, tool.kind) == (
        trace.SpanKind.CLIENT,
        trace.SpanKind.SERVER,
        trace.SpanKind.SERVER,
    )
    assert workflow.attributes is not None and tool.attributes is not None
    assert tool.attributes["temporalRunID"] == workflow.attributes["temporalRunID"]


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_with_tracing_off_no_interceptor_is_added_and_no_span_recorded(
    live: Live, spans: ProcessSpans, run_id: str
) -> None:
    settings = settings_for(live.client, live.worker, "off", own_queue=False)
    assert settings.otel == Settings().otel == "off"  # the default
    assert tracing.interceptors(settings) == []
    plain = await connect(settings)
    assert list(plain.config()["interceptors"]) == []

    # The process has a TracerProvider, yet nothing reaches it from an untraced run.
    run = one_tool_run(live.provider, run_id)
    result = await result_of(await start_run(plain, settings, run_id, run))
    assert result.status == "completed", result.stop_reason
    assert spans.of_run(run_id) == []


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_console_worker_process_prints_its_spans_in_the_starters_trace(
    servers: Servers, worker_settings: Settings, spans: ProcessSpans, run_id: str, tmp_path: Path
) -> None:
    settings = settings_for(servers.client, worker_settings, "global")
    env = {
        **worker_env(servers.client, settings, tmp_path / "store.db"),
        "AGENTLOOP_OTEL": "console",
    }
    starter = await connect(settings)
    run = one_tool_run(servers.provider, run_id)
    async with worker_process(env, drained=False) as worker:
        result = await result_of(await start_run(starter, settings, run_id, run))
        assert result.status == "completed", result.stop_reason
        printed = await printed_spans(worker, run_id, WORKER_SPANS)

    # The starter's span is here; everything after it was recorded by the worker process.
    (start,) = spans.of_run(run_id)
    assert start.name == "StartWorkflow:AgentRun"
    assert {int(span["context"]["trace_id"], 16) for span in printed} == {start.context.trace_id}
    (run_span,) = (span for span in printed if span["name"] == "RunWorkflow:AgentRun")
    assert int(run_span["parent_id"], 16) == start.context.span_id


async def printed_spans(
    worker: asyncio.subprocess.Process, workflow_id: str, names: set[str]
) -> list[dict[str, Any]]:
    """The spans of `workflow_id` the worker prints (one JSON object a line, among its log
    lines), read until every one of `names` has been seen (bounded)."""
    assert worker.stdout is not None
    found: list[dict[str, Any]] = []
    while not names <= {span["name"] for span in found}:
        line = await waited_for(worker.stdout.readline(), f"spans {names}; seen: {found}")
        if not line:
            raise AssertionError(f"the worker exited; spans seen: {found}")
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "context" in record and record["attributes"].get("temporalWorkflowID") == workflow_id:
            found.append(record)
    return found


def test_flush_exports_what_the_global_provider_buffers(spans: ProcessSpans) -> None:
    name = f"buffered-{uuid.uuid4().hex[:8]}"
    with trace.get_tracer(__name__).start_as_current_span(name):
        pass
    assert name not in {span.name for span in spans.buffered.get_finished_spans()}
    tracing.flush(Settings(otel="global"))
    assert name in {span.name for span in spans.buffered.get_finished_spans()}


def test_without_the_otel_packages_tracing_stops_start_up_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in OTEL_MODULES:
        monkeypatch.setitem(sys.modules, module, None)  # `import` of it now fails
    fix = "tracing needs the OpenTelemetry packages: pip install 'agentloop[otel]'"
    for mode in ("console", "global"):
        assert problems_of({"AGENTLOOP_OTEL": mode}) == [f"AGENTLOOP_OTEL={mode!r}: {fix}"]
        with pytest.raises(ConfigError, match=r"AGENTLOOP_OTEL=.*pip install 'agentloop\[otel\]'"):
            tracing.interceptors(Settings(otel=mode))
    # Off needs none of them.
    assert Settings.load({"AGENTLOOP_OTEL": "off"}).otel == "off"
    assert tracing.interceptors(Settings()) == []


@pytest.mark.integration
async def test_global_without_a_tracer_provider_stops_the_worker_naming_the_variable(
    tmp_path: Path,
) -> None:
    finished = await agentloop("worker", env=clean_env(AGENTLOOP_OTEL="global"), cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert "AGENTLOOP_OTEL='global': no OpenTelemetry TracerProvider" in finished.stderr
    assert "opentelemetry-instrument" in finished.stderr
    assert not (tmp_path / ".agentloop").exists()  # nothing was started
