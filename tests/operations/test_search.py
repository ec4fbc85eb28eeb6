"""Visibility: runs are indexed by phase, status, provider and tenant; `agentloop list` finds
exactly the runs waiting for a human."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from agentloop import search
from agentloop.client import start_run as agentloop_start_run
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    Principal,
)
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import temporal_binary
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop, assert_no_traceback, process_env, run_process
from tests.live import Live, Servers, agent_input, scripted
from tests.support import (
    register_bare_namespace,
    result_of,
    scheduled_activity_types,
    signal_approval,
    start_run,
    wait_for_phase,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}


def test_list_queries() -> None:
    assert search.list_query() == "WorkflowType = 'AgentRun'"
    assert search.list_query(phase="awaiting_approval", tenant="acme") == (
        "WorkflowType = 'AgentRun' AND ExecutionStatus = 'Running' AND "
        "AgentPhase = 'awaiting_approval' AND AgentTenant = 'acme'"
    )
    with pytest.raises(search.Unsearchable, match=re.escape('status: "x\' OR 1=1" holds')):
        search.list_query(status="x' OR 1=1")


UNSEARCHABLE = ["x'", "x\\", "a\\'b", 'g"h', "'", "t\tb", "n\nl", "smile\U0001f642"]
"""Each one Temporal's dev server reads otherwise than written: a trailing '\\' is malformed
SQL, a quote was dropped (`stats "x'"` reported family `x`), and doubled at a value's end, a
quote, like '\\', '"' and control characters, finds nothing."""


@pytest.mark.parametrize("value", UNSEARCHABLE)
def test_a_value_a_query_cannot_say_as_written_is_refused_naming_the_field(value: str) -> None:
    rule = f"it may hold only {search.SEARCHABLE}"
    problem = search.unsearchable("tenant", value)
    assert problem is not None and problem.startswith(f"tenant: {value!r} holds ")
    assert problem.endswith(rule)
    with pytest.raises(search.Unsearchable) as caught:
        search.list_query(phase="finished", tenant=value)
    assert str(caught.value) == problem
    with pytest.raises(search.Unsearchable) as caught:
        search.family_query(value)
    assert str(caught.value).startswith(f"family: {value!r} holds ")
    base = {"task": "t", "provider": "openai-chat", "model": "m"}
    tenant = AgentRunInput.model_validate({**base, "principal": {"subject": "s", "tenant": value}})
    assert search.run_input_problem(tenant) == f"principal.{problem}"
    family = AgentRunInput.model_validate({**base, "task_family": value})
    assert search.run_input_problem(family) == problem.replace("tenant", "task_family", 1)


@pytest.mark.parametrize(
    "value", ["acme", "soci\u00e9t\u00e9", "Acme Corp", "x/y@z:w+v.u#", "T-1_2.3"]
)
def test_a_searchable_value_is_quoted_as_written(value: str) -> None:
    assert search.unsearchable("tenant", value) is None
    assert search.list_query(tenant=value).endswith(f"AgentTenant = '{value}'")
    assert f"AgentTaskFamily = '{value}' AND" in search.family_query(value)
    base = {"task": "t", "provider": "openai-chat", "model": "m", "task_family": value}
    run_input = AgentRunInput.model_validate(
        {**base, "principal": {"subject": "s", "tenant": value}}
    )
    assert search.run_input_problem(run_input) is None


async def test_list_awaiting_approval_finds_exactly_the_waiting_runs(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    reserve = scripted_call(
        "reserve_seat", "call_r", workshop_id="ws-101", participant_id="p-carol"
    )
    live.provider.register(scripted(f"{run_id}-w", [reserve]))
    live.provider.register(scripted(f"{run_id}-d", "done"))
    principal = Principal(subject="agent", tenant=run_id, scopes=["workshops:write"])

    def run_input(model: str) -> AgentRunInput:
        return agent_input(model, "anthropic", "book", ["reserve_seat"], principal=principal)

    waiting = await start_run(live.client, live.worker, f"{run_id}-w", run_input(f"{run_id}-w"))
    done = await start_run(live.client, live.worker, f"{run_id}-d", run_input(f"{run_id}-d"))
    await wait_for_phase(waiting, "awaiting_approval")
    assert (await result_of(done)).status == "completed"

    env = process_env(TEMPORAL_ADDRESS=live.client.service_client.config.target_host)

    async def listed(*flags: str) -> list[dict[str, str]]:
        finished = await agentloop(
            "list", "--tenant", run_id, "--json", *flags, env=env, cwd=tmp_path
        )
        assert finished.returncode == 0, finished.explain()
        return list(json.loads(finished.stdout))

    # Visibility is eventually consistent: wait until both runs are indexed as they are now.
    for _ in range(100):
        found = await listed("--awaiting-approval")
        statuses = {r["workflow_id"]: r["status"] for r in await listed()}
        waiting_ids = [r["workflow_id"] for r in found]
        if waiting_ids == [f"{run_id}-w"] and statuses.get(f"{run_id}-d") == "completed":
            break
    else:
        raise AssertionError(f"visibility never showed the runs as they are: {found}")
    [row] = found
    assert (row["phase"], row["status"], row["provider"], row["tenant"]) == (
        "awaiting_approval",
        "running",
        "anthropic",
        run_id,
    )
    await waiting.cancel()


async def test_a_run_is_indexed_in_the_phase_it_waits_in(live: Live, run_id: str) -> None:
    """Visibility sees a run's search attributes as each workflow task ends, which is when
    the run starts to wait: on its model (`calling_model`), on an ordinary tool
    (`executing_tools`)."""
    weather = scripted_call("get_weather", "call_w", **WEATHER)
    train = scripted_call("get_train_status", "call_t", **TRAIN)
    live.provider.register(
        scripted(
            run_id,
            [weather],
            [train],
            "done",
        )
    )
    run_input = agent_input(run_id, "openai-chat", "travel", ["get_weather", "get_train_status"])
    handle = await start_run(live.client, live.worker, run_id, run_input)
    assert (await result_of(handle)).status == "completed"

    indexed = "calling_model"  # what the run was started with
    upserted: list[str] = []
    waited_in: list[tuple[str, str]] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if "AgentPhase" in fields.indexed_fields:
                indexed = json.loads(fields.indexed_fields["AgentPhase"].data)
                upserted.append(indexed)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity = event.activity_task_scheduled_event_attributes.activity_type.name
            waited_in.append((activity, indexed))
    assert waited_in == [
        ("describe_run", "calling_model"),
        ("call_model", "calling_model"),
        ("run_tool", "executing_tools"),
        ("call_model_by_ref", "calling_model"),
        ("run_tool", "executing_tools"),
        ("call_model_by_ref", "calling_model"),
    ]
    assert upserted == [
        "executing_tools",
        "calling_model",
        "executing_tools",
        "calling_model",
        "finished",
    ]


async def listed_ids(client: Client, query: str) -> list[str]:
    return [execution.id async for execution in client.list_workflows(query)]


async def wait_until_listed(client: Client, query: str, workflow_id: str) -> None:
    """Visibility is eventually consistent: poll the query (bounded) until it finds the run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while workflow_id not in (found := await listed_ids(client, query)):
        if loop.time() > deadline:
            raise AssertionError(f"{query!r} never found {workflow_id}; it found {found}")
        await asyncio.sleep(0.1)


async def test_a_run_started_without_search_attributes_is_found_in_its_phase_and_finished(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    """A plain `start_workflow`, as the getting-started page says one may: no search attributes.
    The worker finds them registered on the namespace and the run indexes itself as it
    starts, before its first model call, so `agentloop list` finds it waiting for approval,
    then finished; and not one workflow task failed for it."""
    reserve = scripted_call(
        "reserve_seat", "call_r", workshop_id="ws-101", participant_id="p-carol"
    )
    live.provider.register(scripted(run_id, [reserve], "booked"))
    run_input = agent_input(
        run_id,
        "anthropic",
        "book",
        ["reserve_seat"],
        principal=Principal(subject="agent", tenant=run_id, scopes=["workshops:write"]),
    )
    handle = await live.client.start_workflow(
        WORKFLOW_NAME,
        run_input,
        id=run_id,
        task_queue=live.worker.task_queue,
        result_type=AgentRunResult,
    )
    view = await wait_for_phase(handle, "awaiting_approval")

    awaiting = search.list_query(phase="awaiting_approval", tenant=run_id)
    await wait_until_listed(live.client, awaiting, run_id)
    env = process_env(TEMPORAL_ADDRESS=live.client.service_client.config.target_host)
    finished = await agentloop(
        "list", "--awaiting-approval", "--tenant", run_id, "--json", env=env, cwd=tmp_path
    )
    assert finished.returncode == 0, finished.explain()
    [row] = json.loads(finished.stdout)
    assert (row["workflow_id"], row["phase"], row["status"], row["provider"], row["tenant"]) == (
        run_id,
        "awaiting_approval",
        "running",
        "anthropic",
        run_id,
    )

    [pending] = view.pending_approvals
    await signal_approval(handle, "call_r", pending.args_digest, "workshop-lead")
    assert (await result_of(handle)).status == "completed"
    await wait_until_listed(
        live.client, search.list_query(phase="finished", status="completed", tenant=run_id), run_id
    )
    assert run_id not in await listed_ids(live.client, awaiting)

    events = [e async for e in handle.fetch_history_events()]
    kinds = [EventType.Name(e.event_type) for e in events]
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in kinds, kinds
    assert "EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT" not in kinds, kinds
    # It indexed itself as it started (once the worker said it may), before it waited on its
    # model.
    scheduled = scheduled_activity_types(events)
    assert scheduled[:2] == ["describe_run", "call_model"] and "check_approval" in scheduled
    first_wait = [i for i, k in enumerate(kinds) if k == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"][1]
    upserted = [agent_attributes(e) for e in events if agent_attributes(e)]
    assert upserted[0] == {
        "AgentPhase": "calling_model",
        "AgentStatus": "running",
        "AgentProvider": "anthropic",
        "AgentTenant": run_id,
    }
    assert events.index(next(e for e in events if agent_attributes(e))) < first_wait
    assert upserted[-1] == {"AgentPhase": "finished", "AgentStatus": "completed"}


def agent_attributes(event: HistoryEvent) -> dict[str, str]:
    """The agentloop search attributes an upsert event sets (empty: none, or no upsert)."""
    if event.event_type != EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
        return {}
    fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
    names = {key.name for key in search.ALL}
    return {k: json.loads(v.data) for k, v in fields.indexed_fields.items() if k in names}


async def test_a_run_that_indexed_itself_stays_indexed_across_continue_as_new(
    live: Live, run_id: str
) -> None:
    """The next run of a chain starts with the attributes its predecessor had (Temporal
    carries them over), so it is found in the phase it waits in after the boundary."""
    train = scripted_call("get_train_status", "c1", **TRAIN)
    again = scripted_call("get_train_status", "c2", **TRAIN)
    reserve = scripted_call("reserve_seat", "c3", workshop_id="ws-101", participant_id="p-carol")
    live.provider.register(
        scripted(
            run_id,
            [train],
            [again],
            [reserve],
        )
    )
    handle = await live.client.start_workflow(
        WORKFLOW_NAME,
        agent_input(
            run_id,
            "openai-chat",
            "book",
            ["get_train_status", "reserve_seat"],
            principal=Principal(subject="agent", tenant=run_id, scopes=["workshops:write"]),
            continue_as_new_after_events=20,
        ),
        id=run_id,
        task_queue=live.worker.task_queue,
        result_type=AgentRunResult,
    )
    view = await wait_for_phase(handle, "awaiting_approval")
    assert len(view.run_chain) >= 2, "no continue-as-new before the approval"
    await wait_until_listed(
        live.client, search.list_query(phase="awaiting_approval", tenant=run_id), run_id
    )
    await handle.cancel()


@pytest.fixture
async def bare_namespace(client: Client, run_id: str) -> str:
    """A namespace of the test server without agentloop's search attributes."""
    return await register_bare_namespace(client, run_id)


async def test_on_a_namespace_without_the_attributes_a_run_is_left_unindexed_and_runs(
    servers: Servers, worker_settings: Settings, bare_namespace: str, run_id: str
) -> None:
    """The worker finds the attributes missing, so the run started without them never
    upserts them (which would fail every workflow task): it runs to its end unindexed."""
    servers.provider.register(scripted(run_id, "done"))
    bare = await Client.connect(
        servers.client.service_client.config.target_host,
        namespace=bare_namespace,
        data_converter=pydantic_data_converter,
    )
    settings = worker_settings.model_copy(
        update={"temporal_namespace": bare_namespace, "task_queue": f"bare-{run_id}"}
    )
    async with running_worker(bare, settings):
        handle = await bare.start_workflow(
            WORKFLOW_NAME,
            agent_input(run_id, "openai-chat", "hi", []),
            id=run_id,
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        )
        result = await result_of(handle)
    assert result.status == "completed"
    events = [e async for e in handle.fetch_history_events()]
    kinds = [EventType.Name(e.event_type) for e in events]
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in kinds, kinds
    assert "describe_run" in scheduled_activity_types(events)
    assert [agent_attributes(e) for e in events if agent_attributes(e)] == []


async def test_agentloop_list_on_a_namespace_without_the_attributes_says_what_to_register(
    client: Client, bare_namespace: str, tmp_path: Path
) -> None:
    """Not an empty list (nothing could be found there) and not a traceback: one line naming
    the missing attributes and the command registering them, which does register them."""
    address = client.service_client.config.target_host
    env = process_env(TEMPORAL_ADDRESS=address, TEMPORAL_NAMESPACE=bare_namespace)
    for flags in ([], ["--awaiting-approval"], ["--status", "completed", "--json"]):
        finished = await agentloop("list", *flags, env=env, cwd=tmp_path)
        assert finished.returncode == 2, finished.explain()
        assert finished.stdout == "", finished.explain()
        assert_no_traceback(finished)
        [line] = finished.stderr.splitlines()
        assert line.startswith(
            f"agentloop list: namespace '{bare_namespace}' on {address} lacks the search "
            "attributes AgentPhase, AgentStatus, AgentProvider, AgentTenant (type Keyword)"
        )
        command = line.split("register them once: ")[1]
        assert command.startswith(
            f"temporal operator search-attribute create --namespace {bare_namespace} "
            "--name AgentPhase --type Keyword && "
        )

    # The command as printed (the Temporal CLI reads TEMPORAL_ADDRESS too).
    path = f"{Path(temporal_binary()).parent}:{env['PATH']}"
    registered = await run_process("sh", "-c", command, env={**env, "PATH": path})
    assert registered.returncode == 0, registered.explain()
    finished = await agentloop("list", "--awaiting-approval", "--json", env=env, cwd=tmp_path)
    assert finished.returncode == 0, finished.explain()
    assert json.loads(finished.stdout) == []


async def test_stats_and_list_on_a_value_with_a_quote_or_backslash_refuse_it_cleanly(
    client: Client, tmp_path: Path
) -> None:
    """Before, a value ending in '\\' printed Temporal's "invalid query: malformed SQL", and a
    quote was dropped: `stats "x'"` reported the runs of family `x`."""
    env = process_env(TEMPORAL_ADDRESS=client.service_client.config.target_host)
    for value in ("x'", "x\\"):
        for argv, field in (
            (["stats", value], "family"),
            (["list", "--tenant", value], "tenant"),
            (["run", "Hi", "--model", "travel", "--tenant", value], "principal.tenant"),
            (["run", "Hi", "--model", "travel", "--family", value], "task_family"),
        ):
            finished = await agentloop(*argv, env=env, cwd=tmp_path)
            assert finished.returncode == 2, finished.explain()
            assert_no_traceback(finished)
            assert f"{field}: {value!r} holds " in finished.stderr, finished.explain()
            assert "malformed" not in finished.stderr + finished.stdout, finished.explain()
    # A value with spaces, a letter of another script and the punctuation allowed is found.
    finished = await agentloop("list", "--tenant", "Société x/y@z:w+v.u#", env=env, cwd=tmp_path)
    assert finished.returncode == 0, finished.explain()
    assert "AgentTenant = 'Société x/y@z:w+v.u#'" in finished.stderr, finished.explain()


@pytest.mark.parametrize(
    ("principal", "family", "said"),
    [
        ({"subject": "s", "tenant": "acme\\"}, None, "principal.tenant: 'acme\\\\' holds '\\\\'"),
        ({"subject": "s"}, "fam'", 'task_family: "fam\'" holds "\'"'),
    ],
)
async def test_a_run_whose_tenant_or_family_could_never_be_searched_fails_at_start(
    principal: dict[str, str], family: str | None, said: str, live: Live, run_id: str
) -> None:
    """Started by a plain `start_workflow` (the client refuses it before): before feature
    `searchable-names` it ran, and no `list` or `stats` could find it by that value."""
    live.provider.register(scripted(run_id, "done"))
    raw = {"task": "x", "provider": "openai-chat", "model": run_id, "principal": principal}
    if family is not None:
        raw["task_family"] = family
    with pytest.raises(ValueError, match=re.escape(said)):
        await agentloop_start_run(live.client, AgentRunInput.model_validate(raw), id=run_id)
    handle = await start_run(live.client, live.worker, run_id, raw)
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert f"invalid AgentRunInput: {said}" in cause.message, cause.message
    assert f"it may hold only {search.SEARCHABLE}" in cause.message
    assert [r for r in live.provider.requests if r["script"] == run_id] == []  # no model call
