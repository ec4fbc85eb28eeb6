"""Runs on a schedule (issue #48 item 2), on the session's real dev server: a schedule firing
every second starts normal runs, one per firing (distinct ids, none started twice across a
worker restart), found by the schedule's name and its task family; paused, it starts none."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, ScheduleHandle, ScheduleOverlapPolicy

from agentloop.contract import AgentRunInput, Principal
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.operations import schedules
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings
from agentloop.runtime.signing import public_key_text
from agentloop.search import family_query
from agentloop.worker import running_worker
from tests.cli.test_cli import Finished, process_env
from tests.cli.test_cli import agentloop as agentloop_cli
from tests.live import Live, Servers, agent_input, scripted
from tests.support import eventually


async def ids_of(client: Client, query: str) -> list[str]:
    return [execution.id async for execution in client.list_workflows(query)]


async def completed_runs(client: Client, name: str) -> list[str]:
    query = f"{schedules.runs_query(name)} AND ExecutionStatus = 'Completed'"
    return await ids_of(client, query)


async def every_second(servers: Servers, name: str, settings: Settings) -> ScheduleHandle:
    """A schedule `name` firing every second, its runs playing the script `name` once."""
    servers.provider.register(scripted(name, "Reconciled."))
    run_input = agent_input(
        name,
        "openai-chat",
        "Reconcile yesterday's refunds.",
        [],
        principal=Principal(subject="ops"),
    )
    return await schedules.create_schedule(
        servers.client,
        name,
        run_input,
        every=timedelta(seconds=1),
        task_queue=settings.task_queue,
        overlap="allow_all",  # the runs a stopped worker leaves waiting do not skip firings
    )


async def runs_page_rows(client: Client, schedule: str) -> list[str]:
    """The runs the inbox's runs page lists for `schedule` (a viewer of tenant default)."""
    options = InboxOptions(auth_header="X-User", tenants={"ops": ["default"]})
    async with (
        InboxServer(client, options, "127.0.0.1", 0) as inbox,
        aiohttp.ClientSession() as http,
    ):
        headers = {"X-User": "ops"}
        async with http.get(
            f"{inbox.url}/runs", params={"schedule": "it's"}, headers=headers
        ) as bad:
            assert bad.status == 400
        async with http.get(
            f"{inbox.url}/runs", params={"schedule": schedule}, headers=headers
        ) as page:
            assert page.status == 200
            return re.findall(r'<tr><td><a href="[^"]*">([^<]*)</a>', await page.text())


async def firings(handle: ScheduleHandle) -> int:
    return (await handle.describe()).info.num_actions


async def test_a_schedule_starts_one_run_per_firing_across_a_worker_restart_and_pause_stops_it(
    servers: Servers, worker_settings: Settings
) -> None:
    name = f"nightly-{uuid.uuid4().hex[:8]}"
    settings = worker_settings.model_copy(update={"task_queue": f"scheduled-{name}"})
    handle = await every_second(servers, name, settings)
    witness: ScheduleHandle | None = None
    try:
        async with running_worker(servers.client, settings):
            await eventually(lambda: _completed(servers.client, name, 2), "two scheduled runs")
        # No worker: the server still fires; the runs wait for one.
        fired_while_down = await firings(handle) + 1
        await eventually(
            lambda: _firings_reach(handle, fired_while_down), "a firing while no worker polls"
        )
        async with running_worker(servers.client, settings):
            await schedules.pause_schedule(servers.client, name, note="test: stop firing")
            paused_at = await firings(handle)
            # Three firings of another schedule: three seconds of the server's time passed.
            witness = await every_second(servers, f"{name}-witness", settings)
            await eventually(lambda: _firings_reach(witness, 3), "three firings of the witness")
            await schedules.pause_schedule(servers.client, f"{name}-witness")
            witnessed = await firings(witness)
            await eventually(
                lambda: _completed(servers.client, f"{name}-witness", witnessed),
                "the witness's runs to complete",
            )
            await eventually(
                lambda: _completed(servers.client, name, paused_at),
                "every run fired before the pause to complete",
            )
        description = await handle.describe()
        assert description.schedule.state.paused
        assert await firings(handle) == paused_at
        runs = await completed_runs(servers.client, name)
        assert len(runs) == paused_at == len(set(runs)), runs  # one run per firing, no twice
        assert all(run.startswith(f"{name}-") for run in runs)  # NAME-<scheduled time>
        # Each run's one model call recorded once (a call cut by the worker's stop is retried,
        # not recorded twice), and the scripted model asked by no other run of the schedule.
        results = [await RunClient(servers.client, r).result() for r in runs]
        assert [(r.status, r.usage.model_calls) for r in results] == [("completed", 1)] * len(runs)
        family = await ids_of(servers.client, family_query(name))
        assert sorted(family) == sorted(runs)  # the schedule's family: `agentloop stats NAME`
        started: AgentRunInput | None = await RunClient(servers.client, runs[0]).start_input()
        assert started is not None and started.task_family == name
    finally:
        await handle.delete()
        if witness is not None:
            await witness.delete()
    assert name not in [s.name for s in await schedules.list_schedules(servers.client)]


async def _completed(client: Client, name: str, count: int) -> bool:
    return len(await completed_runs(client, name)) >= count


async def _firings_reach(handle: ScheduleHandle, count: int) -> bool:
    return await firings(handle) >= count


def test_a_signed_input_or_an_unsearchable_name_is_refused() -> None:
    signed = AgentRunInput(task="t", model="m", provider="openai-chat", principal_signature="v2.x")
    with pytest.raises(ValueError, match="cannot be signed"):
        schedules.scheduled_input("ok", signed)
    plain = AgentRunInput(task="t", model="m", provider="openai-chat")
    with pytest.raises(ValueError, match="schedule name"):
        schedules.scheduled_input("it's", plain)
    fired = schedules.scheduled_input("nightly", plain)
    assert fired.task_family == "nightly"


async def test_the_cli_creates_lists_triggers_pauses_and_deletes_a_schedule(
    live: Live, tmp_path: Path
) -> None:
    name = f"morning-{uuid.uuid4().hex[:8]}"
    live.provider.register(scripted(name, "Reconciled."))
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )

    async def cli(*args: str, **extra: str) -> Finished:
        return await agentloop_cli("schedule", *args, env={**env, **extra}, cwd=tmp_path)

    created = await cli(
        "create", name, "Reconcile yesterday's refunds.", "--model", name,
        "--cron", "0 7 * * *", "--overlap", "buffer_one", "--catchup-window", "10m", "--json",
    )  # fmt: skip
    assert created.returncode == 0, created.explain()
    assert json.loads(created.stdout)["when"] == ["0 7 * * *"]
    try:
        public = f"front={public_key_text(Ed25519PrivateKey.generate())}"
        triggered, signed_only = await asyncio.gather(
            cli("trigger", name),
            cli("create", "signed", "T", "--model", name, "--every", "1h",
                AGENTLOOP_STARTER_KEYS=public),
        )  # fmt: skip
        assert triggered.returncode == 0, triggered.explain()
        assert signed_only.returncode == 2 and "cannot be signed" in signed_only.stderr
        await eventually(lambda: _completed(live.client, name, 1), "the triggered run")
        (run,) = await completed_runs(live.client, name)
        started = await RunClient(live.client, run).start_input()
        assert started is not None and started.task_family == name and started.model == name
        assert await runs_page_rows(live.client, name) == [run]  # the inbox filters by it
        policies = (await live.client.get_schedule_handle(name).describe()).schedule.policy
        assert policies.catchup_window == timedelta(minutes=10)
        assert policies.overlap == ScheduleOverlapPolicy.BUFFER_ONE
        paused = await cli("pause", name, "--note", "holiday", "--json")
        assert json.loads(paused.stdout) == {"schedule": name, "done": "paused"}

        async def listed_paused() -> bool:  # the list is read from visibility: it may lag
            listed = json.loads((await cli("list", "--json")).stdout)
            mine = [(s["paused"], s["note"], s["recent_runs"]) for s in listed if s["name"] == name]
            return mine == [(True, "holiday", [run])]

        await eventually(listed_paused, "the schedule listed paused, with its run")
        resumed, taken = await asyncio.gather(
            cli("resume", name), cli("create", name, "Again.", "--model", name, "--every", "1h")
        )
        assert resumed.returncode == 0, resumed.explain()
        assert not (await schedules.describe_schedule(live.client, name)).paused
        assert taken.returncode == 2 and "exists already" in taken.stderr, taken.explain()
        bad_cron = await cli("create", f"{name}-bad", "T", "--model", name, "--cron", "61 * * * *")
        assert bad_cron.returncode == 2 and "Minute is not in range" in bad_cron.stderr, (
            bad_cron.explain()
        )
    finally:
        deleted = await cli("delete", name)
    assert deleted.returncode == 0, deleted.explain()
    gone = await cli("pause", name)
    assert gone.returncode == 1 and f"schedule {name!r} not found" in gone.stderr, gone.explain()
    assert "Traceback" not in signed_only.stderr + gone.stderr + taken.stderr
