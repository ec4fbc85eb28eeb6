"""A stopped run is continued by a new run on its transcript, with a budget granted
explicitly: nothing already done runs again, and the model sees what the old run could not
send it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agentloop.activities.runs import RunActivities
from agentloop.client import start_run as agentloop_start_run
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    Limits,
    PreviousRun,
    Principal,
    Provider,
    RunStatusView,
)
from agentloop.policies.checks import continue_from_problem
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from tests.cli.test_cli import agentloop, process_env
from tests.live import Live, agent_input, scripted
from tests.support import result_of, start_run

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


def weather_script(name: str) -> Script:
    return scripted(
        name,
        [scripted_call("get_weather", "call_w", city="Oslo", date="2026-12-01")],
        "Oslo: {{call_w.condition}}",
    )


async def test_continue_from_a_run_that_ran_out_of_model_calls(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    live.provider.register(weather_script(run_id))
    first_input = agent_input(
        run_id, "anthropic", "Weather in Oslo?", ["get_weather"], limits=Limits(max_model_calls=1)
    )
    first = await result_of(await start_run(live.client, live.worker, run_id, first_input))
    assert first.status == "limit_reached"
    assert [e.call_id for e in first.unsent] == ["call_w"]  # type: ignore[union-attr]
    assert live.service.stats()["counts"]["weather"] == 1

    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    continued_id = f"{run_id}-2"
    started = await agentloop(
        "continue",
        run_id,
        "--max-model-calls",
        "2",
        "--id",
        continued_id,
        "--follow",
        env=env,
        cwd=tmp_path,
    )
    assert started.returncode == 0, started.explain()
    result = await live.client.get_workflow_handle(
        continued_id, result_type=AgentRunResult
    ).result()
    assert result.status == "completed", result.stop_reason
    assert isinstance(result.output, str) and result.output.startswith("Oslo: ")
    assert result.usage.model_calls == 1
    # The weather was read once, by the first run; the second run only told the model.
    assert live.service.stats()["counts"]["weather"] == 1
    last = live.provider.requests[-1]["body"]["messages"]
    assert last[-1]["role"] == "user"
    blocks = last[-1]["content"]
    assert blocks[0]["type"] == "tool_result" and blocks[0]["tool_use_id"] == "call_w"
    texts = [b.get("text", "") for b in blocks[1:]]
    assert any(f"continues run {run_id}" in t for t in texts)
    assert "Continue where you stopped." in texts


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses", "anthropic"])
async def test_continue_from_a_run_stopped_on_repeated_call_ids(
    live: Live, run_id: str, provider: Provider
) -> None:
    """The first run stops on its model's two calls under one id (nothing runs); the run that
    continues it sends that turn back without them, and a note for each: a conversation every
    protocol takes. Before, its every model call failed: one call id, two results."""
    checking = "Checking the train and the weather."
    weather = {"city": "Oslo", "date": "2026-12-01"}
    train = {"train_number": "G1234", "date": "2026-12-01"}
    twice = ScriptTurn(
        text=checking,
        tool_calls=[
            ScriptedToolCall(id="call_dup", name="get_train_status", arguments=train),
            ScriptedToolCall(id="call_dup", name="get_weather", arguments=weather),
        ],
    )
    # Repeated ids on purpose: registered without the script's own check.
    live.provider.register(Script.model_construct(name=run_id, turns=[twice]))
    first_input = AgentRunInput(
        task="My train and the weather?",
        provider=provider,
        model=run_id,
        tools=["get_weather", "get_train_status"],
        # Not streamed: the scripted provider names a streamed Responses item by its call id,
        # and two items under one name make a stream its final response disagrees with.
        stream=False,
    )
    first = await result_of(await start_run(live.client, live.worker, run_id, first_input))
    assert first.status == "failed", first.stop_reason
    assert "protocol: tool calls without unique call ids" in first.stop_reason
    # The provider plays a script by model: the continuing run's starts with the first run's
    # turn as it is sent back, its text alone.
    continued_id = f"{run_id}-2"
    live.provider.register(scripted(continued_id, ScriptTurn(text=checking), "Asking again."))
    second_input = agent_input(
        continued_id,
        provider,
        "Go on.",
        ["get_weather", "get_train_status"],
        stream=False,
        continue_from=run_id,
        limits=Limits(max_model_calls=1),
    )
    second = await result_of(await start_run(live.client, live.worker, continued_id, second_input))
    assert second.status == "completed", second.stop_reason
    assert second.output == "Asking again."
    assert not any(live.service.stats()["counts"].values())  # nothing ran, in either run
    [sent] = [r["body"] for r in live.provider.requests if r["script"] == continued_id]
    for tool in ("get_train_status", "get_weather"):
        assert f"Your call call_dup ({tool}) never ran" in json.dumps(sent)


async def test_continuing_an_unknown_run_is_refused_naming_the_field(
    live: Live, run_id: str
) -> None:
    run_input = AgentRunInput(
        task="x", provider="openai-chat", model="m", continue_from="no-such-run"
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    with pytest.raises(WorkflowFailureError) as failure:
        await result_of(handle)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "continue_from" in cause.message and "no-such-run" in cause.message


async def test_a_continuation_is_given_its_budget_and_shows_the_whole_chains_usage(
    live: Live, run_id: str
) -> None:
    live.provider.register(weather_script(run_id))
    first_input = agent_input(
        run_id, "openai-chat", "Weather in Oslo?", ["get_weather"], limits=Limits(max_model_calls=1)
    )
    first = await result_of(await start_run(live.client, live.worker, run_id, first_input))
    assert first.status == "limit_reached" and first.chain_usage is None
    following = AgentRunInput(
        task="Go on.", provider="openai-chat", model=run_id, continue_from=run_id
    )
    # From Python: the helper refuses a continuation without its limits, before starting.
    with pytest.raises(ValueError, match="limits: a run with continue_from must be given"):
        await agentloop_start_run(
            live.client, following, id=f"{run_id}-2", task_queue=live.worker.task_queue
        )
    # Started any other way (here as JSON without `limits`), the run fails at once.
    raw = following.model_dump(mode="json", exclude_unset=True)
    refused = await start_run(live.client, live.worker, f"{run_id}-raw", raw)
    with pytest.raises(WorkflowFailureError) as failure:
        await result_of(refused)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "limits: a run with continue_from must be given" in cause.message

    granted = following.model_copy(update={"limits": Limits(max_model_calls=2)})
    handle = await agentloop_start_run(
        live.client, granted, id=f"{run_id}-2", task_queue=live.worker.task_queue
    )
    second = await result_of(handle)
    assert second.status == "completed", second.stop_reason
    assert second.usage.model_calls == 1 and second.usage.tool_calls == 0
    chain = second.chain_usage
    assert chain is not None
    assert chain.model_calls == first.usage.model_calls + second.usage.model_calls == 2
    assert chain.tool_calls == first.usage.tool_calls == 1
    assert chain.input_tokens == first.usage.input_tokens + second.usage.input_tokens
    assert chain.cost_usd == pytest.approx(first.usage.cost_usd + second.usage.cost_usd)
    view = await handle.query("status", result_type=RunStatusView)
    assert view.chain_usage == chain
    assert "With the runs it continued: 2 model calls, 1 tool calls" in second.report
    # The model calls the script saw are the chain's: one each.
    assert len([r for r in live.provider.requests if r["script"] == run_id]) == 2


@workflow.defn(name="NotAnAgentRun")
class NotAnAgentRun:
    @workflow.run
    async def run(self) -> str:
        return "hello"


async def test_continuing_a_workflow_that_is_not_an_agentloop_run_is_refused_at_once(
    live: Live, run_id: str
) -> None:
    """Before, its result failed to decode in the activity, which was retried for ever: the
    run sat in startup, with no deadline running yet."""
    other_queue = f"not-agentloop-{run_id[-8:]}"
    async with Worker(
        live.client,
        task_queue=other_queue,
        workflows=[NotAnAgentRun],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        other = await live.client.execute_workflow(
            NotAnAgentRun.run, id=f"{run_id}-other", task_queue=other_queue
        )
    assert other == "hello"
    run_input = AgentRunInput(
        task="x", provider="openai-chat", model="m", continue_from=f"{run_id}-other"
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    with pytest.raises(WorkflowFailureError) as failure:
        await result_of(handle)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "is not an agentloop run" in cause.message, cause.message


async def test_a_run_started_under_the_same_id_between_reads_cannot_cross_tenants(
    live: Live, run_id: str
) -> None:
    """The loader's reads (describe, result, start event) each went to whatever run then had
    the id: a run of the asking tenant started under it between them made the tenant check
    see that run's principal while the continuation took the other tenant's transcript. The
    first read pins the run; the test starts the other run right after it."""
    live.provider.register(scripted(run_id, "Globex plans."))
    live.provider.register(scripted(f"{run_id}-b", "Mine."))

    def started(model: str, tenant: str) -> AgentRunInput:
        principal = Principal(subject="p-alice", tenant=tenant)
        return AgentRunInput(
            task=f"{tenant}'s task", provider="openai-chat", model=model, principal=principal
        )

    victim = await start_run(live.client, live.worker, run_id, started(run_id, "globex"))
    theirs = await result_of(victim)
    interleaved: list[AgentRunResult] = []

    class Interleaved(RunActivities):
        async def read_run(self, handle: WorkflowHandle[Any, AgentRunResult]) -> PreviousRun:
            other = await start_run(
                live.client, live.worker, run_id, started(f"{run_id}-b", "default")
            )
            interleaved.append(await result_of(other))
            return await super().read_run(handle)

    previous = await Interleaved(live.client).load_previous_run(run_id)
    [mine] = interleaved
    latest = await live.client.get_workflow_handle(run_id).describe()
    assert latest.run_id != victim.result_run_id  # the id now names the other run
    assert previous.principal is not None and previous.principal.tenant == "globex"
    assert previous.head == theirs.transcript_head != mine.transcript_head
    asking = started("m", "default").model_copy(update={"continue_from": run_id})
    refused = continue_from_problem(asking, previous)
    assert refused == f"run {run_id!r} belongs to tenant 'globex', not 'default'"
