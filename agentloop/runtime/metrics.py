"""Prometheus metrics: Temporal's own worker metrics and agentloop's, on one endpoint.

The Temporal SDK serves the endpoint (`metrics_runtime`: a `Runtime` whose telemetry exports
to Prometheus); agentloop's metrics are made with that runtime's meter, so both appear on the
same `/metrics`, with no dependency of our own. They are recorded by worker code only:

- `ActivityMetrics` reads what the activities were asked and answered (tool calls, lookups,
  model calls and tokens, approval decisions, notices);
- `RunMetrics` sees each run start and end, through the workflow's meter, which records
  nothing while a run is replayed (so a run moved to another worker is not counted twice);
- `watch_waiting` counts the runs waiting for people, by kind, from Temporal's visibility, so
  the figure is the namespace's whole and goes down when a wait is answered, on whichever
  worker that happens; and, from the same runs' waiting memos, how long the oldest wait of
  each kind has lasted.

`METRICS` names every metric we export: the reference page is generated from it and the
dashboard and alert rules in deploy/ are checked against it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.exceptions import FailureError
from temporalio.runtime import OpenTelemetryConfig, PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)
from temporalio.workflow import ContinueAsNewError

from agentloop import activity_io as io
from agentloop.contract import Limits
from agentloop.runtime.waiting_memos import memo_of, waiting_runs
from agentloop.search import AGENT_PHASE
from agentloop.waiting import WAITING_PHASES

log = logging.getLogger(__name__)

Kind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True)
class Metric:
    name: str
    """As Prometheus shows it (a counter with `_total` appended)."""
    kind: Kind
    labels: tuple[str, ...]
    help: str

    @property
    def exported(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name


METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric("agentloop_runs_started", "counter", ("tenant",), "Runs started (not continued)."),
        Metric(
            "agentloop_runs_ended",
            "counter",
            ("tenant", "outcome"),
            "Runs ended, by their status (`continued`: continued as new).",
        ),
        Metric(
            "agentloop_budget_refusals",
            "counter",
            ("tenant", "cap"),
            "Runs stopped because their next step would pass a cap of their limits "
            "(`max_model_calls`, `max_tool_calls`, `max_total_tokens`, `max_cost_usd`, "
            "`per_tool`) or their deadline (`deadline`).",
        ),
        Metric(
            "agentloop_runs_waiting",
            "gauge",
            ("kind",),
            "Runs now waiting for people, by kind (approval, question, unknown_write), "
            "in the namespace (every worker reports the same figure: take the max).",
        ),
        Metric(
            "agentloop_unknown_writes_open",
            "gauge",
            (),
            "Runs paused on a write whose outcome is unknown until an operator resolves it "
            "(the namespace's figure, as `agentloop_runs_waiting`).",
        ),
        Metric(
            "agentloop_oldest_wait_seconds",
            "gauge",
            ("kind",),
            "How long the run waiting longest for people, by kind, has waited (0: none waits), "
            "from the waiting runs' memos that a worker sealed (the namespace's figure, as "
            "`agentloop_runs_waiting`).",
        ),
        Metric(
            "agentloop_approval_latency_seconds",
            "histogram",
            ("outcome",),
            "From the run's wait for an approval to a decision that counts (or is refused).",
        ),
        Metric(
            "agentloop_tool_calls",
            "counter",
            ("tenant", "tool", "outcome"),
            "Tool executions (each attempt), by the result's status (succeeded, failed, unknown, "
            "...) or `error` when the attempt raised (retried by Temporal).",
        ),
        Metric(
            "agentloop_tool_lookups",
            "counter",
            ("tenant", "tool", "outcome"),
            "Lookups of a write's outcome (each attempt), by what the system of record said "
            "(applied, not_applied, unknown) or `failed` when it could not be asked.",
        ),
        Metric(
            "agentloop_model_calls",
            "counter",
            ("provider", "model", "outcome"),
            "Model calls answered (ok) or failed, by provider and model.",
        ),
        Metric(
            "agentloop_model_tokens",
            "counter",
            ("provider", "model", "direction"),
            "Tokens of model calls, input and output.",
        ),
        Metric(
            "agentloop_model_cost_usd",
            "counter",
            ("provider", "model"),
            "Cost of model calls in micro-dollars (1e-6 USD), by the worker's price table.",
        ),
        Metric(
            "agentloop_notices",
            "counter",
            ("kind", "outcome"),
            "Notices of waiting runs to the webhooks, sent or failed.",
        ),
    )
}

CAPS = frozenset({*Limits.model_fields, "per_tool", "deadline"})
"""What a run stopped by its limits names first in its `stop_reason` (`CAP: DETAIL`, the
field of `Limits`, `agentloop.policies.budgets.Cap`)."""

MAX_LABEL_VALUES = 50
"""Distinct values a label takes in one process before the rest count as `other`: tenants,
models and tool names come from run input, and Prometheus series must stay bounded."""


class BoundedLabels:
    """Each label's first `limit` values as they are, every later one as `other`."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self._limit = limit
        self._seen: dict[str, set[str]] = {}

    def value(self, label: str, value: object) -> str:
        text = str(value)[:64] if value not in (None, "") else "none"
        seen = self._seen.setdefault(label, set())
        if text in seen:
            return text
        if len(seen) >= self._limit:
            return "other"
        seen.add(text)
        return text


LABELS = BoundedLabels()


def record(meter: MetricMeter, name: str, value: float, **labels: object) -> None:
    """Add `value` to counter `name` or observe it on histogram `name` (its labels bounded).
    Nothing on a worker that exports no metrics: its values would take label slots (the
    first `MAX_LABEL_VALUES` of the process) from a worker beside it that does."""
    if meter is MetricMeter.noop:
        return
    metric = METRICS[name]
    attributes: Mapping[str, str | int | float | bool] = {
        label: LABELS.value(label, labels.get(label)) for label in metric.labels
    }
    if metric.kind == "counter":
        meter.create_counter(name, metric.help).add(int(value), attributes)
    elif metric.kind == "histogram":
        meter.create_histogram_float(name, metric.help, "s").record(value, attributes)
    else:
        meter.create_gauge_float(name, metric.help).set(value, attributes)


def metrics_runtime(port: int, host: str = "0.0.0.0") -> Runtime:
    """A Temporal runtime serving Prometheus metrics on `host:port` (`/metrics`): a client
    connected with it, and every worker on that client, report there."""
    config = PrometheusConfig(
        bind_address=f"{host}:{port}", counters_total_suffix=True, durations_as_seconds=True
    )
    return Runtime(telemetry=TelemetryConfig(metrics=config))


def otlp_telemetry(url: str) -> TelemetryConfig:
    """Telemetry pushing the same metrics to an OpenTelemetry collector over OTLP/gRPC at
    `url` (the SDK exports every minute, cumulative; durations in seconds, as on
    Prometheus)."""
    return TelemetryConfig(metrics=OpenTelemetryConfig(url=url, durations_as_seconds=True))


def _field(value: Any, *path: str) -> Any:
    """`value.a.b`, of a model or of the raw JSON a workflow is given (untrusted: None when
    anything on the way is missing)."""
    for name in path:
        value = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
    return value


class _ActivityMetrics(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        kind = activity.info().activity_type
        request = input.args[0] if input.args else None
        try:
            result = await self.next.execute_activity(input)
        except Exception:
            _recorded(kind, request, None, failed=True)
            raise
        _recorded(kind, request, result, failed=False)
        return result


def _recorded(kind: str, request: Any, result: Any, *, failed: bool) -> None:
    try:
        _observe(activity.metric_meter(), kind, request, result, failed)
    except Exception:  # a metric is never worth an activity's failure
        log.exception("metrics of %s not recorded", kind)


def _observe(meter: MetricMeter, kind: str, request: Any, result: Any, failed: bool) -> None:
    """What one activity attempt says (`failed`: it raised, and `result` is None)."""
    call = {"tenant": _field(request, "principal", "tenant"), "tool": _field(request, "tool")}
    model = {"provider": _field(request, "provider"), "model": _field(request, "model")}
    if kind == io.RUN_TOOL:
        outcome = "error" if failed else _field(result, "status")
        record(meter, "agentloop_tool_calls", 1, outcome=outcome, **call)
    elif kind == io.LOOKUP_OUTCOME:
        outcome = "failed" if failed else _field(result, "state")
        record(meter, "agentloop_tool_lookups", 1, outcome=outcome, **call)
    elif kind in io.MODEL_CALLS:
        record(meter, "agentloop_model_calls", 1, outcome="failed" if failed else "ok", **model)
        usage = _field(result, "output", "usage")
        for direction in ("input", "output"):
            tokens = _field(usage, f"{direction}_tokens") or 0
            record(meter, "agentloop_model_tokens", tokens, direction=direction, **model)
        cost = _field(result, "cost_usd") or 0.0
        record(meter, "agentloop_model_cost_usd", round(cost * 1e6), **model)
    elif kind == io.CHECK_APPROVAL and not failed:
        since = _field(request, "waited_since")
        if isinstance(since, datetime):
            outcome = "refused" if _field(result, "problem") else "counted"
            waited = (datetime.now(UTC) - since).total_seconds()
            record(meter, "agentloop_approval_latency_seconds", max(waited, 0.0), outcome=outcome)
    elif kind == io.NOTIFY_WAITING:
        outcome = "failed" if failed else "sent"
        record(meter, "agentloop_notices", 1, kind=_field(request, "kind"), outcome=outcome)


class _RunMetrics(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        tenant = _field(input.args[0] if input.args else None, "principal", "tenant")
        meter = workflow.metric_meter()  # records nothing during replay
        if workflow.info().continued_run_id is None:
            record(meter, "agentloop_runs_started", 1, tenant=tenant)
        try:
            result = await self.next.execute_workflow(input)
        except ContinueAsNewError:
            record(meter, "agentloop_runs_ended", 1, tenant=tenant, outcome="continued")
            raise
        except FailureError:  # fails the workflow (any other exception fails only its task)
            record(meter, "agentloop_runs_ended", 1, tenant=tenant, outcome="failed")
            raise
        except asyncio.CancelledError:
            record(meter, "agentloop_runs_ended", 1, tenant=tenant, outcome="cancelled")
            raise
        record(meter, "agentloop_runs_ended", 1, tenant=tenant, outcome=_field(result, "status"))
        if _field(result, "stop_cause") in ("budget", "deadline"):
            cap = str(_field(result, "stop_reason") or "").split(":", 1)[0]
            cap = cap if cap in CAPS else "other"
            record(meter, "agentloop_budget_refusals", 1, tenant=tenant, cap=cap)
        return result


class MetricsInterceptor(Interceptor):
    """Records agentloop's metrics on the worker's runtime meter (`METRICS`)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityMetrics(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _RunMetrics


async def count_waiting(client: Client) -> dict[str, int]:
    """Running runs in each waiting phase, by kind, from visibility."""
    counts: dict[str, int] = {}
    for phase, kind in WAITING_PHASES.items():
        query = f"{AGENT_PHASE.name} = '{phase}' AND ExecutionStatus = 'Running'"
        counts[kind] = (await client.count_workflows(query)).count
    return counts


async def oldest_waits(client: Client, key: bytes | None, now: datetime) -> dict[str, float]:
    """Seconds since the oldest wait of each kind began, by the waiting runs' memos (0: no
    run waits of that kind). Only a memo a worker sealed under `key` counts (anyone may start
    a run with a memo claiming an old wait); one without room for all its calls
    (`WaitingMemo.left_out`) counts by those it holds."""
    ages: dict[str, float] = dict.fromkeys(WAITING_PHASES.values(), 0.0)
    async for info in waiting_runs(client, None):
        memo = await memo_of(client, key, info)
        for call in memo.calls if memo else []:
            if call.since is not None:
                ages[call.kind] = max(ages[call.kind], (now - call.since).total_seconds())
    return ages


async def watch_waiting(
    client: Client, meter: MetricMeter, every_seconds: float, memo_key: bytes | None
) -> None:
    """Keep `agentloop_runs_waiting`, `agentloop_unknown_writes_open` and
    `agentloop_oldest_wait_seconds` (by memos sealed under `memo_key`) current until
    cancelled (a failed poll keeps the last figures and is tried again)."""
    while True:
        try:
            counts = await count_waiting(client)
            ages = await oldest_waits(client, memo_key, datetime.now(UTC))
        except Exception as exc:  # visibility may be briefly unavailable
            log.warning("counting waiting runs failed: %s", exc)
        else:
            for kind, count in counts.items():
                record(meter, "agentloop_runs_waiting", count, kind=kind)
            record(meter, "agentloop_unknown_writes_open", counts.get("unknown_write", 0))
            for kind, age in ages.items():
                record(meter, "agentloop_oldest_wait_seconds", age, kind=kind)
        await asyncio.sleep(every_seconds)
