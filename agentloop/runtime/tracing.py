"""Optional OpenTelemetry tracing of runs, through Temporal's `TracingInterceptor`.

`AGENTLOOP_OTEL` (`Settings.otel`) picks where spans go:
- `off` (default): no interceptor; OpenTelemetry is not even imported.
- `console`: a TracerProvider of agentloop's own prints each span as one JSON line on stderr
  (stdout stays clean for the CLI's output).
- `global`: the TracerProvider the process set itself (`opentelemetry.trace.set_tracer_provider`
  in the embedding code, or `opentelemetry-instrument`, which exports over OTLP and more as the
  standard `OTEL_*` variables say).

The interceptor goes on the client (`agentloop.worker.connect`), so the client's calls and every
worker built on that client are traced. A run's workflow spans exist only when the client that
started it traced too (the SDK's default: without a parent span from the starter they could be
orphaned after a replay); its activity spans always do.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, assert_never

from agentloop.runtime.config import VARIABLES, ConfigError, Settings
from agentloop.runtime.config_checks import check_otel

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer
    from temporalio.client import Interceptor

FLUSH_TIMEOUT_MILLIS = 5_000
"""How long exiting waits for buffered spans: a collector that is down must not hold it up."""


def interceptors(settings: Settings) -> list[Interceptor]:
    """The client interceptors of `settings.otel`: none when off. Raises `ConfigError` naming
    AGENTLOOP_OTEL when tracing cannot work in this process (see `check_otel`)."""
    if settings.otel == "off":
        return []
    wrong = check_otel(settings.otel)
    if wrong:
        raise ConfigError([f"{VARIABLES['otel'].name}={settings.otel!r}: {wrong}"])
    from temporalio.contrib.opentelemetry import TracingInterceptor

    match settings.otel:
        case "console":
            return [TracingInterceptor(_console_tracer())]
        case "global":
            # None: the global tracer, which follows whatever provider the process has set.
            return [TracingInterceptor(None)]
        case _:
            assert_never(settings.otel)


def flush(settings: Settings) -> None:
    """Export the spans the global provider still buffers. Call it before the process exits:
    the CLI leaves with `os._exit`, which skips OpenTelemetry's own exit hook."""
    if settings.otel != "global":
        return  # console exports each span as it ends
    from opentelemetry import trace

    # The SDK's provider buffers (BatchSpanProcessor) and can flush; the API's cannot.
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush(FLUSH_TIMEOUT_MILLIS)


@functools.cache
def _console_tracer() -> Tracer:
    """One per process, however many clients connect: each provider registers an exit hook."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    def one_line(span: ReadableSpan) -> str:
        line: str = span.to_json(indent=None)  # the SDK leaves it untyped
        return line + os.linesep

    provider = TracerProvider()
    # Simple, not batched: each span is written as it ends, so none is lost at exit.
    provider.add_span_processor(
        SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr, formatter=one_line))
    )
    return provider.get_tracer("agentloop")
