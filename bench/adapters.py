"""[7] Adapter CPU: `build_request` of each adapter on a 20-turn transcript (recorded from
real scripted runs), against the official client's own per-request walk of the same body; and
the CPU of one streamed call of that request through each official client, over the transport
the worker gives it (aiohttp) against the client's default (httpx), with the scripted provider
in its own process."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

import aiohttp
import anthropic
import openai
from temporalio.client import Client

from agentloop.adapters import (
    AdapterFactory,
    adapter_for,
    anthropic_messages,
    openai_chat,
    openai_responses,
)
from agentloop.adapters.base import ModelRequest, ProviderAdapter
from agentloop.contract import ModelSettings, Provider
from agentloop.demo.tools.travel import get_weather
from agentloop.events import Event, ModelOutput
from agentloop.runtime.config import ProviderEndpoints, Settings
from agentloop.runtime.dev_server import free_port
from agentloop.scripted_provider import Script
from agentloop.scripted_provider.server import ScriptedProvider
from agentloop.store import open_store
from agentloop.tools.builtins import read_artifact
from bench.longrun import play, transcript
from bench.processes import child_process
from bench.report import Figure, Section, ratio
from bench.scripts import long_input, weather_script

PROVIDERS: tuple[Provider, ...] = ("openai-chat", "openai-responses", "anthropic")
BUILD: dict[Provider, Callable[[ModelRequest], dict[str, Any]]] = {
    "openai-chat": openai_chat.build_request,
    "openai-responses": openai_responses.build_request,
    "anthropic": anthropic_messages.build_request,
}
REPEATS = 5
Transform = Callable[[dict[str, Any]], Awaitable[object]]


@dataclass
class Recorded:
    """Each protocol's request of the final model call of a run, and the script it plays."""

    requests: dict[Provider, ModelRequest]
    scripts: list[Script]


async def record_requests(
    client: Client, settings: Settings, provider: ScriptedProvider, turns: int
) -> Recorded:
    """For each protocol, the request of the final model call of a `turns`-turn run."""
    requests: dict[Provider, ModelRequest] = {}
    scripts: list[Script] = []
    store = open_store(settings.store_url)
    try:
        for name in PROVIDERS:
            script = weather_script(f"bench-adapter-{name}-{uuid.uuid4().hex[:8]}", turns)
            provider.register(script)
            scripts.append(script)
            run_input = long_input(script, ["get_weather"], provider=name)
            result, _ = await play(client, settings.task_queue, script.name, run_input)
            events = await transcript(store, result)
            requests[name] = request_before_last_output(name, script.name, events)
    finally:
        await store.close()
    violations = len(provider.violations)
    provider.reset()
    if violations:
        raise RuntimeError(f"the scripted provider saw {violations} protocol violation(s)")
    return Recorded(requests, scripts)


def request_before_last_output(name: Provider, model: str, events: list[Event]) -> ModelRequest:
    last = max(i for i, event in enumerate(events) if isinstance(event, ModelOutput))
    return ModelRequest(
        provider=name,
        model=model,
        events=events[:last],
        tools=[get_weather.spec, read_artifact.spec],
        settings=ModelSettings(stream=True),
    )


def sdk_transforms() -> tuple[dict[Provider, tuple[str, Transform]], list[str]]:
    """Each client's own request-body walk, where it can be called offline."""
    found: dict[Provider, tuple[str, Transform]] = {}
    skipped: list[str] = []
    try:
        from openai._utils import async_maybe_transform
        from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
        from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
    except ImportError as exc:
        skipped.append(f"openai transform: not importable from this openai version ({exc})")
    else:
        found["openai-chat"] = (
            "openai async_maybe_transform(CompletionCreateParamsStreaming)",
            lambda body: async_maybe_transform(body, CompletionCreateParamsStreaming),
        )
        found["openai-responses"] = (
            "openai async_maybe_transform(ResponseCreateParamsStreaming)",
            lambda body: async_maybe_transform(body, ResponseCreateParamsStreaming),
        )
    try:
        from anthropic._utils._prepare import async_prepare_request_data
    except ImportError as exc:
        skipped.append(f"anthropic body walk: not importable from this version ({exc})")
    else:
        found["anthropic"] = (
            "anthropic async_prepare_request_data(location=body)",
            lambda body: async_prepare_request_data(body, location="body"),
        )
    return found, skipped


@dataclass
class Timing:
    build_us: float
    sdk_us: float | None


async def per_call_us(call: Callable[[], Awaitable[object]], budget_seconds: float) -> float:
    """Best of `REPEATS` batches, each about `budget_seconds / REPEATS` long, in µs per call."""
    started, number = time.perf_counter(), 0
    # At least a few calls a batch, not 10: the clients' own walk of a 20-turn Responses body
    # takes ~70 ms, so 10 made this figure alone 15 s whatever the budget.
    while time.perf_counter() - started < budget_seconds / REPEATS / 4 or number < 3:
        await call()
        number += 1
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(number * 4):
            await call()
        best = min(best, (time.perf_counter() - started) / (number * 4))
    return best * 1e6


async def time_adapter(
    request: ModelRequest, transform: Transform | None, budget_seconds: float
) -> Timing:
    build = BUILD[request.provider]

    async def build_once() -> object:
        return build(request)

    body = build(request)
    build_us = await per_call_us(build_once, budget_seconds)
    if transform is None:
        return Timing(build_us, None)

    def sdk_once() -> Awaitable[object]:
        return transform(body)

    return Timing(build_us, await per_call_us(sdk_once, budget_seconds))


async def measure(
    recorded: Recorded, turns: int, budget_seconds: float, calls: int, work_dir: Path
) -> Section:
    transforms, skipped = sdk_transforms()
    result = Section(
        key="adapters",
        title=f"adapter CPU: build_request on a {turns}-turn transcript, µs per call; one "
        "streamed call of it through the official client, per transport",
        baseline=(
            "build_request: the official client's own walk of the same request body (what "
            "docs/concepts/design.md §6 found at 46% of worker CPU), timed here offline, "
            "best of 5; "
            "streamed call: the client over its default transport (httpx), this process's "
            f"CPU, median of {REPEATS} x {calls} calls, the scripted provider in its own process"
        ),
        skipped=skipped,
    )
    for name, request in recorded.requests.items():
        label, transform = transforms.get(name, ("", None))
        timing = await time_adapter(request, transform, budget_seconds)
        result.add(
            Figure(
                f"{name} build_request (µs)",
                timing.build_us,
                timing.sdk_us,
                None if timing.sdk_us is None else ratio(timing.build_us, timing.sdk_us),
                f"baseline: {label}" if label else "no client walk to compare",
            )
        )
    async with provider_process(work_dir, recorded.scripts) as base:
        for name, request in recorded.requests.items():
            ours, default = await time_transports(name, request, base, calls)
            result.add(
                Figure(
                    f"{name} streamed call, client CPU (µs)",
                    ours,
                    default,
                    ratio(ours, default),
                    "the worker's client (aiohttp transport); baseline: the client's default",
                )
            )
    return result


async def time_transports(
    name: Provider, request: ModelRequest, root: str, calls: int
) -> tuple[float, float]:
    """CPU µs of one `complete(request)`: the worker's adapter, then one whose client keeps
    its default transport; alternating batches, medians."""
    endpoints = ProviderEndpoints("bench", f"{root}/v1", "bench", root)
    factory = AdapterFactory(endpoints)
    ours = factory.get(name)
    default_client: openai.AsyncOpenAI | anthropic.AsyncAnthropic
    match name:
        case "anthropic":
            default_client = anthropic.AsyncAnthropic(api_key="bench", base_url=root, max_retries=0)
        case "openai-chat" | "openai-responses":
            default_client = openai.AsyncOpenAI(
                api_key="bench", base_url=f"{root}/v1", max_retries=0
            )
        case _:
            assert_never(name)
    default = adapter_for(name, default_client)
    try:
        timings: dict[str, list[float]] = {"ours": [], "default": []}
        for _ in range(REPEATS):
            for key, each in (("ours", ours), ("default", default)):
                timings[key].append(await cpu_us_per_call(each, request, calls))
        return statistics.median(timings["ours"]), statistics.median(timings["default"])
    finally:
        await factory.close()
        await default_client.close()


async def cpu_us_per_call(adapter: ProviderAdapter, request: ModelRequest, calls: int) -> float:
    await adapter.complete(request)  # a connection in the pool, as in a running worker
    started = time.process_time()
    for _ in range(calls):
        await adapter.complete(request)
    return (time.process_time() - started) / calls * 1e6


@asynccontextmanager
async def provider_process(work_dir: Path, scripts: list[Script]) -> AsyncIterator[str]:
    """The scripted provider as its own process, playing `scripts`; yields its root URL."""
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    args = ["-m", "agentloop.scripted_provider.server", "--port", str(port)]
    log = work_dir / "transport-provider.log"
    async with child_process(args, {}, "scripted provider:", log), aiohttp.ClientSession() as http:
        for script in scripts:
            put = http.put(f"{root}/_scripts/{script.name}", data=script.model_dump_json())
            async with put as answer:
                answer.raise_for_status()
        yield root
        async with http.get(f"{root}/_violations") as answer:
            violations = (await answer.json())["violations"]
        if violations:
            raise RuntimeError(f"the scripted provider saw protocol violations: {violations[:3]}")
