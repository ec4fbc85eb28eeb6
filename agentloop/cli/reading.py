"""Client-side: reading a run (`status`, `transcript`, `list`, `history`).

A run is read the cheapest way that is true: a running run through its `status` query, a
finished one through its result, which its history holds (no worker needed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from agentloop import search
from agentloop.cli.output import (
    PAUSED_PHASES,
    RESULT_EXIT_CODES,
    CommandError,
    ExitCode,
    HistoryWritten,
    ListedRun,
    RunSnapshot,
    print_json,
)
from agentloop.cli.progress import format_snapshot
from agentloop.cli.transcript import format_transcript, open_transcript_store, read_transcript
from agentloop.contract import AgentRunResult, RunStatusView
from agentloop.operations.failing_tasks import (
    FailingTask,
    failing_attempt,
    failing_task,
    failing_tasks,
)
from agentloop.run_client import RunClient
from agentloop.runtime.audit import mask_url
from agentloop.runtime.codec import KeyRing
from agentloop.runtime.indexing import missing_attributes, unregistered
from agentloop.store import StoreError, StoreUnavailable


async def execution_status(run: RunClient) -> str:
    """Temporal's word for where the run is: RUNNING, COMPLETED, FAILED, TERMINATED, ..."""
    description = await run.handle.describe()
    return description.status.name if description.status else "UNKNOWN"


async def read_snapshot(run: RunClient, *, wedged: bool = False) -> RunSnapshot:
    """A running run's `status` query, or a finished run's result (a finished run needs no
    worker: its result is in the history). With `wedged`, a running run whose workflow task
    keeps failing is reported as such, with the worker's error, instead of queried (it
    answers no query)."""
    description = await run.handle.describe()
    execution = description.status.name if description.status else "UNKNOWN"
    if execution == "RUNNING":
        if wedged and failing_attempt(description):
            failing = await failing_task(run.client, run.id, description=description)
            if failing is not None:
                return snapshot(run.id, execution, ExitCode.WEDGED, task_failure=failing)
        return snapshot_of_view(run.id, await run.status())
    return await ended_snapshot(run.id, execution, run.result())


def snapshot_of_view(workflow_id: str, view: RunStatusView) -> RunSnapshot:
    code = ExitCode.PAUSED if view.phase in PAUSED_PHASES else ExitCode.RUNNING
    return snapshot(workflow_id, "RUNNING", code, status=view)


async def ended_snapshot(
    workflow_id: str, execution: str, result: Awaitable[AgentRunResult]
) -> RunSnapshot:
    try:
        ended = await result
    except WorkflowFailureError as exc:
        return snapshot(workflow_id, execution, ExitCode.FAILED, failure=str(exc.cause))
    return snapshot(workflow_id, execution, RESULT_EXIT_CODES[ended.status], result=ended)


def snapshot(
    workflow_id: str,
    execution: str,
    code: ExitCode,
    *,
    status: RunStatusView | None = None,
    result: AgentRunResult | None = None,
    failure: str | None = None,
    task_failure: FailingTask | None = None,
) -> RunSnapshot:
    """The snapshot, its outcome named after its exit code."""
    return RunSnapshot(
        workflow_id=workflow_id,
        execution=execution,
        outcome=code.name.lower(),
        exit_code=code,
        status=status,
        result=result,
        failure=failure,
        task_failure=task_failure,
    )


def report_snapshot(found: RunSnapshot, as_json: bool) -> int:
    if as_json:
        print_json(found)
    else:
        print(format_snapshot(found), flush=True)
    return found.exit_code


async def show_transcript(
    run: RunClient, store_url: str, keys: KeyRing | None, as_json: bool
) -> int:
    """The run's conversation from the store (decrypted with `keys`, the codec's), walked
    back from the run's transcript head. A store that cannot be opened or reached exits 2
    before the run is read; one that lacks the run's transcript, or holds it under a key not
    in `keys`, 1."""
    where = f"the store at {mask_url(store_url)} (AGENTLOOP_STORE_URL: where workers write)"
    print(f"reading {where}", file=sys.stderr, flush=True)
    try:
        store = open_transcript_store(store_url, keys)
    except StoreUnavailable as exc:
        raise CommandError(f"cannot open {where}: {exc}", ExitCode.USAGE) from None
    try:
        found = await read_snapshot(run)
        head = await transcript_head(run, found)
        events = await read_transcript(store, head)
    except StoreUnavailable as exc:
        raise CommandError(f"cannot reach {where}: {exc}", ExitCode.USAGE) from None
    except StoreError as exc:
        raise CommandError(
            f"cannot read the transcript of {run.id} from {where}: {exc}", ExitCode.FAILED
        ) from None
    finally:
        await store.close()
    if as_json:
        print_json(events)
    elif events:
        ledger = found.result or found.status
        print(format_transcript(events, ledger.calls if ledger else []))
    else:
        print(f"{run.id} has no transcript yet", file=sys.stderr)
    return ExitCode.OK


async def transcript_head(run: RunClient, found: RunSnapshot) -> str:
    if found.result is not None:
        return found.result.transcript_head
    # A run that failed without a result: its state up to the failure tells the head.
    view = found.status or await run.status()
    return view.transcript_head


async def list_runs(client: Client, args: argparse.Namespace) -> int:
    """A visibility query over the runs' search attributes; on a namespace without them, a
    line saying which are missing and how to register them (not an empty list: no run could
    be found by them there)."""
    try:
        missing = await missing_attributes(client)
    except RPCError as exc:
        if exc.status not in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED):
            raise
        missing = []  # the server does not say: the query itself will tell
    if missing:
        server = client.service_client.config.target_host
        print(f"agentloop list: {unregistered(missing, client.namespace, server)}", file=sys.stderr)
        return ExitCode.USAGE
    phase = "awaiting_approval" if args.awaiting_approval else args.phase
    query = search.list_query(
        phase=phase, status=args.status, provider=args.provider, tenant=args.tenant
    )
    found = []
    async for execution in client.list_workflows(query, limit=args.limit):
        attributes = execution.typed_search_attributes
        found.append(
            ListedRun(
                workflow_id=execution.id,
                run_id=execution.run_id,
                phase=attributes.get(search.AGENT_PHASE),
                status=attributes.get(search.AGENT_STATUS),
                provider=attributes.get(search.AGENT_PROVIDER),
                tenant=attributes.get(search.AGENT_TENANT),
                started=execution.start_time.isoformat() if execution.start_time else None,
                task_checked=execution.status != WorkflowExecutionStatus.RUNNING,
            )
        )
    await mark_wedged(client, found)
    if args.json:
        print_json(found)
    else:
        for run in found:
            print(listed_line(run))
        print(f"{len(found)} run(s) matching {query}", file=sys.stderr)
        unchecked = sum(not run.task_checked for run in found)
        if unchecked:
            print(
                f"{unchecked} running run(s) not checked for a failing task in time",
                file=sys.stderr,
            )
    return ExitCode.OK


async def mark_wedged(client: Client, runs: list[ListedRun]) -> None:
    """Check the running runs of the page for a workflow task that keeps failing (bounded:
    a few at a time, each given a few seconds), and say so on each."""
    running = [(run.workflow_id, run.run_id) for run in runs if not run.task_checked]
    checked = await failing_tasks(client, running)
    for run in runs:
        key = (run.workflow_id, run.run_id)
        if key in checked:
            run.task_checked = True
            run.task_failure = checked[key]


def listed_line(run: ListedRun) -> str:
    line = f"{run.workflow_id}  {run.phase}  {run.status}  {run.provider}  {run.tenant}"
    if run.task_failure is not None:
        line += f"  WEDGED: {run.task_failure.describe()}"
    return line


async def export_history(run: RunClient, output: Path | None, as_json: bool) -> int:
    """The run's full history (so far, if it still runs) as the JSON `replay` reads."""
    history = await run.handle.fetch_history()
    text = history.to_json() + "\n"
    if output is None:
        sys.stdout.write(text)  # one JSON document already, --json or not
        return ExitCode.OK
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.FAILED
    written = HistoryWritten(workflow_id=run.id, path=output, events=len(history.events))
    if as_json:
        print_json(written)
    else:
        print(f"wrote {output}: {written.events} events of {run.id}")
    return ExitCode.OK
