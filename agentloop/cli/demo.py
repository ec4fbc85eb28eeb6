"""`make demo`: the travel case of seed 000, end to end, on a throw-away dev stack.

Is my train late, and what is the weather at the destination? The model asks for both reads at
once; the train service is slowed down so the first-requested call finishes last, and each
result still reaches the model under its own call id.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import uuid
from pathlib import Path

from agentloop import search
from agentloop.cli.commands import exit_now
from agentloop.cli.dev import DevStack, DevStackPorts
from agentloop.cli.progress import format_result
from agentloop.cli.starting import REAL_MODELS
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    Principal,
    Provider,
)
from agentloop.run_results import read_result
from agentloop.runtime.config import Settings

TASK = (
    "My train is G1234 on 2026-12-01 and I am going to Shanghai. "
    "Is the train late, and what will the weather be like when I arrive?"
)
TRAIN_DELAY_MS = 400


async def run_demo(provider: Provider, keep_running: bool) -> int:
    key_field, default_model = REAL_MODELS[provider]
    # The key may be in the environment or in AGENTLOOP_CONFIG's file, as for `agentloop dev`.
    settings = Settings.from_env()
    real_model = bool(getattr(settings, key_field))
    model = os.environ.get("AGENTLOOP_DEMO_MODEL", default_model) if real_model else "travel"
    with tempfile.TemporaryDirectory(prefix="agentloop-demo-") as state_dir:
        ports = DevStackPorts.free()
        async with DevStack(
            ports, state_dir=Path(state_dir), quiet=True, settings=settings
        ) as stack:
            assert stack.client is not None and stack.example_service is not None
            stack.example_service.set_delay("trains", TRAIN_DELAY_MS)
            workflow_id = f"demo-travel-{uuid.uuid4().hex[:8]}"
            source = "the real API" if real_model else "the scripted provider (offline)"
            print(f"model: {provider} {model}, from {source}")
            print(f"task:  {TASK}")
            run_input = AgentRunInput(
                task=TASK,
                instructions="You are a travel assistant. Use the tools; answer briefly.",
                provider=provider,
                model=model,
                tools=["get_train_status", "get_weather"],
                principal=Principal(subject="demo-user"),
            )
            handle = await stack.client.start_workflow(
                WORKFLOW_NAME,
                run_input,
                id=workflow_id,
                task_queue=stack.settings.task_queue,
                result_type=AgentRunResult,
                static_summary=run_input.summary(),
                search_attributes=search.initial(run_input),
            )
            print(f"run:   {stack.settings.run_url(workflow_id)}", flush=True)
            result = await read_result(handle)
            print(format_result(result))
            print("completion order at the example service:")
            finished = sorted(
                stack.example_service.stats()["requests"], key=lambda r: r["finished_seq"] or 0
            )
            for request in finished:
                print(
                    f"  {request['endpoint']:8} started #{request['started_seq']}, "
                    f"finished #{request['finished_seq']}"
                )
            if keep_running:
                print(f"Temporal UI: {stack.settings.ui_url} (Ctrl-C to stop)", flush=True)
                await asyncio.Event().wait()
    return 0 if result.status == "completed" else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the dev stack up to look at the run in the UI",
    )
    parser.add_argument("--provider", choices=list(REAL_MODELS), default="openai-chat")
    args = parser.parse_args()
    try:
        code = asyncio.run(run_demo(args.provider, args.keep_running))
    except KeyboardInterrupt:
        code = 0
    exit_now(code)  # not sys.exit: see exit_now


if __name__ == "__main__":
    main()
