"""The structured audit log: each record carries its fields and the activity context, and
nothing it renders holds a credential, personal data in clear, model text or tool output.

The activity records come from the real activity methods run in `ActivityEnvironment`; the
last test runs a real worker on the Temporal dev server to check what temporalio itself logs
(an activity failure's traceback) and a `workflow.logger` audit record from the sandbox."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import pytest
    import structlog
    from pydantic import BaseModel
    from temporalio.client import Client
    from temporalio.common import RetryPolicy
    from temporalio.exceptions import ActivityError, ApplicationError
    from temporalio.testing import ActivityEnvironment
    from temporalio.worker import Worker

    from agentloop.activities.model import ModelActivities
    from agentloop.activity_io import CallModelInput, RunToolInput
    from agentloop.adapters.base import ModelRequest, ProviderError, TextSink
    from agentloop.digests import args_digest
    from agentloop.events import ModelOutput, ProviderRef, ToolCall, Usage, UserInput
    from agentloop.pricing import PriceTable
    from agentloop.runtime.audit import (
        DEFAULT_REDACT_FIELDS,
        Redactor,
        audit,
        configure_logging,
        core_log_forwarding_runtime,
        personal_digest,
        reset_logging,
        settings_secrets,
    )
    from agentloop.runtime.config import Settings
    from agentloop.store import ROOT, SqliteStore
    from agentloop.tool_spec import Outcome, bounded_record
    from agentloop.tools.contract import OutcomeUnknown, ToolContext, ToolError
    from agentloop.tools.decorator import tool
    from tests.support import tool_activities

API_KEY = "sk-test-Zq8v3LmN0pRt5WxY2aBcD"
"""A provider key passed to `configure_logging(secrets=...)`: it must never be rendered."""
TOOL_OUTPUT_MARK = "PANGOLIN-OUTPUT-4417"
MODEL_TEXT_MARK = "QUOKKA-ANSWER-8823"
REASONING_MARK = "OKAPI-THOUGHTS-3391"
RECORD_MARK = "NARWHAL-RECORD-5502"

Records = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def log() -> Iterator[tuple[io.StringIO, Records]]:
    stream = io.StringIO()
    configure_logging(stream=stream, secrets=[API_KEY], redact_fields=DEFAULT_REDACT_FIELDS)

    def records() -> list[dict[str, Any]]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    try:
        yield stream, records
    finally:
        reset_logging()


def one(records: Records, event: str) -> dict[str, Any]:
    found = [r for r in records() if r["event"] == event]
    assert len(found) == 1, f"{event}: {found}"
    return found[0]


# --- tools ---------------------------------------------------------------------------------


class WeatherArgs(BaseModel):
    city: str


class ReplyArgs(BaseModel):
    recipient: str
    body: str


@tool(name="get_weather", effect="read", version="3")
async def _weather(ctx: ToolContext[Any], args: WeatherArgs) -> Any:
    return {"city": args.city, "forecast": f"sunny {TOOL_OUTPUT_MARK}"}


@tool(name="dump", effect="read", max_result_chars=1_000)
async def _big(ctx: ToolContext[Any], args: WeatherArgs) -> Any:
    return TOOL_OUTPUT_MARK + "x" * 5_000


@tool(name="flaky", effect="read")
async def _flaky(ctx: ToolContext[Any], args: WeatherArgs) -> Any:
    raise ToolError(f"upstream 503 {TOOL_OUTPUT_MARK}", error_class="transient", retryable=True)


@tool(name="closed", effect="read")
async def _closed(ctx: ToolContext[Any], args: WeatherArgs) -> Any:
    raise ToolError(f"city closed {TOOL_OUTPUT_MARK}", error_class="business")


async def _recipient_known(ctx: ToolContext[Any], args: ReplyArgs) -> None:
    if args.recipient != "dana@example.com":
        raise ToolError(f"no ticket contact {args.recipient}")


async def _lookup(ctx: ToolContext[Any], args: ReplyArgs) -> Outcome:
    return Outcome(state="applied", record={"sent_to": "dana@example.com", "note": RECORD_MARK})


@tool(name="send_reply", effect="write", precondition=_recipient_known, lookup_outcome=_lookup)
async def _send(ctx: ToolContext[Any], args: ReplyArgs) -> Any:
    raise OutcomeUnknown(f"connection dropped after sending to {args.recipient}")


TOOLS = [_weather, _big, _flaky, _closed, _send]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    store = SqliteStore(tmp_path / "store.db")
    yield store
    await store.close()


@pytest.fixture
def env() -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        workflow_id="wf-audit-1",
        workflow_run_id="run-7f3a",
        activity_id="11",
        activity_type="run_tool",
        attempt=2,
    )
    return env


CONTEXT = {
    "workflow_id": "wf-audit-1",
    "run_id": "run-7f3a",
    "activity_id": "11",
    "activity_type": "run_tool",
    "attempt": 2,
}

REPLY_ARGS = {"recipient": "dana@example.com", "body": "Your refund of 40 EUR is on its way."}


async def test_a_tool_execution_is_audited_with_context_and_without_its_output(
    log: tuple[io.StringIO, Records], env: ActivityEnvironment, store: SqliteStore
) -> None:
    stream, records = log
    tools = tool_activities(TOOLS, store)
    request = RunToolInput(
        workflow_id="wf-audit-1", call_id="call_w1", tool="get_weather", arguments={"city": "Oslo"}
    )
    result = await env.run(tools.run_tool, request)
    assert TOOL_OUTPUT_MARK in result.content  # the model sees it ...

    record = one(records, "tool.executed")
    assert record["kind"] == "audit" and record["level"] == "info"
    assert record | CONTEXT == record  # ... the log carries the activity context instead
    assert {k: record[k] for k in EXECUTED_FIELDS} == {
        "tool": "get_weather",
        "tool_version": "3",
        "call_id": "call_w1",
        "args_digest": args_digest("get_weather", {"city": "Oslo"}),
        "effect": "read",
        "idempotency_key": None,
        "result_status": "succeeded",
        "error_class": None,
        "side_effect": False,
        "result_chars": len(result.content),
        "artifact_ref": None,
    }
    assert TOOL_OUTPUT_MARK not in stream.getvalue()


EXECUTED_FIELDS = (
    "tool",
    "tool_version",
    "call_id",
    "args_digest",
    "effect",
    "idempotency_key",
    "result_status",
    "error_class",
    "side_effect",
    "result_chars",
    "artifact_ref",
)


async def test_large_output_failures_and_retries_are_audited_by_size_class_and_status(
    log: tuple[io.StringIO, Records], env: ActivityEnvironment, store: SqliteStore
) -> None:
    stream, records = log
    tools = tool_activities(TOOLS, store)

    def request(tool: str, call_id: str) -> RunToolInput:
        return RunToolInput(workflow_id="wf", call_id=call_id, tool=tool, arguments={"city": "X"})

    big = await env.run(tools.run_tool, request("dump", "c_big"))
    closed = await env.run(tools.run_tool, request("closed", "c_closed"))
    with pytest.raises(ApplicationError):
        await env.run(tools.run_tool, request("flaky", "c_flaky"))

    by_call = {r["call_id"]: r for r in records() if r["event"] == "tool.executed"}
    assert by_call["c_big"]["result_status"] == "succeeded"
    assert by_call["c_big"]["artifact_ref"] == big.artifact_ref is not None
    assert by_call["c_big"]["result_chars"] == len(TOOL_OUTPUT_MARK) + 5_000
    assert closed.status == "failed"
    assert (
        by_call["c_closed"] | {"result_status": "failed", "error_class": "business"}
        == (by_call["c_closed"])
    )
    assert (
        by_call["c_flaky"] | {"result_status": "attempt_failed", "error_class": "transient"}
        == (by_call["c_flaky"])
    )
    assert all(set(EXECUTED_FIELDS) <= set(r) for r in by_call.values())
    assert TOOL_OUTPUT_MARK not in stream.getvalue()


async def test_a_write_its_precondition_and_its_outcome_lookup_are_audited(
    log: tuple[io.StringIO, Records], env: ActivityEnvironment, store: SqliteStore
) -> None:
    stream, records = log
    tools = tool_activities(TOOLS, store)
    request = RunToolInput(
        workflow_id="wf-audit-1",
        call_id="call_s1",
        tool="send_reply",
        arguments=REPLY_ARGS,
        idempotency_key="wf-audit-1/call_s1",
    )
    stranger = request.model_copy(
        update={"call_id": "call_s2", "arguments": {**REPLY_ARGS, "recipient": "eve@example.org"}}
    )
    assert (await env.run(tools.check_precondition, request)).problem is None
    assert (await env.run(tools.check_precondition, stranger)).problem is not None
    assert (await env.run(tools.run_tool, request)).status == "unknown"
    assert (await env.run(tools.lookup_outcome, request)).state == "applied"

    checks = {r["call_id"]: r for r in records() if r["event"] == "tool.precondition"}
    assert (
        checks["call_s1"] | {"tool": "send_reply", "ok": True, "problem": None}
        == (checks["call_s1"])
    )
    assert checks["call_s2"]["ok"] is False
    assert checks["call_s2"]["problem"] == "no ticket contact e***@example.org"

    executed = one(records, "tool.executed")
    assert executed["result_status"] == "unknown" and executed["side_effect"] is True
    assert executed["effect"] == "write"
    assert executed["idempotency_key"] == "wf-audit-1/call_s1"
    assert executed["args_digest"] == args_digest("send_reply", REPLY_ARGS)

    lookup = one(records, "tool.outcome_lookup")
    assert {k: lookup[k] for k in ("tool", "call_id", "idempotency_key", "outcome")} == {
        "tool": "send_reply",
        "call_id": "call_s1",
        "idempotency_key": "wf-audit-1/call_s1",
        "outcome": "applied",
    }
    assert all(r | CONTEXT == r for r in records())
    text = stream.getvalue()
    for clear in ("dana@example.com", "eve@example.org", "refund", RECORD_MARK):
        assert clear not in text


# --- the model -------------------------------------------------------------------------------


class CannedAdapters:
    """Stands in for `AdapterFactory` (the one stand-in in this file): calling a real provider
    is out of reach here, and what is under test is `call_model`'s record, not an adapter.
    The adapters' own tests run the real clients against the scripted provider."""

    def __init__(
        self, output: ModelOutput | None = None, error: Exception | None = None, count: int = 0
    ):
        self.output, self.error, self.count = output, error, count
        self.requests: list[ModelRequest] = []

    def get(self, provider: str) -> CannedAdapters:
        return self

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelOutput:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        assert self.output is not None
        return self.output

    async def count_input_tokens(self, request: ModelRequest) -> int:
        self.requests.append(request)
        return self.count


CANNED = ModelOutput(
    text=f"Let me check. {MODEL_TEXT_MARK}",
    tool_calls=[
        ToolCall(call_id="toolu_a", name="get_weather", arguments={"city": "Oslo"}),
        ToolCall(call_id="toolu_b", name="get_weather", arguments={"city": "Rome"}),
    ],
    stop="tool_calls",
    stop_detail="tool_use",
    usage=Usage(input_tokens=120, output_tokens=30),
    provider_ref=ProviderRef(
        provider="anthropic",
        api="messages",
        model="claude-audit-2026",
        response_id="msg_01XYZ",
        request_id="req_0042",
        raw_items=[{"type": "thinking", "thinking": REASONING_MARK, "signature": "c2ln"}],
    ),
)


def model_request(turn: int = 3) -> CallModelInput:
    return CallModelInput(
        run_id="wf-audit-1",
        turn=turn,
        provider="anthropic",
        model="claude-audit",
        head=ROOT,
        new_events=[UserInput(text="what is the weather in Oslo? write to dana@example.com")],
    )


async def test_a_model_call_is_audited_by_ids_and_counts_never_its_text(
    log: tuple[io.StringIO, Records], env: ActivityEnvironment, store: SqliteStore
) -> None:
    stream, records = log
    prices = PriceTable({"claude-audit": (1000.0, 1000.0)})
    model = ModelActivities(store, CannedAdapters(CANNED), prices)  # type: ignore[arg-type]
    result = await env.run(model.call_model, model_request())

    record = one(records, "model_call.completed")
    assert record | CONTEXT == record
    assert {k: record[k] for k in COMPLETED_FIELDS} == {
        "provider": "anthropic",
        "api": "messages",
        "model": "claude-audit-2026",
        "response_id": "msg_01XYZ",
        "request_id": "req_0042",
        "turn": 3,
        "stop": "tool_calls",
        "stop_detail": "tool_use",
        "tool_call_ids": ["toolu_a", "toolu_b"],
        "input_tokens": 120,
        "output_tokens": 30,
        "cost_usd": pytest.approx(result.cost_usd),
    }
    assert result.cost_usd == pytest.approx(0.15)
    text = stream.getvalue()
    for hidden in (MODEL_TEXT_MARK, REASONING_MARK, "Oslo", "dana@example.com"):
        assert hidden not in text


async def test_a_count_is_audited_by_counts_never_its_text_and_a_negative_one_refused(
    log: tuple[io.StringIO, Records], env: ActivityEnvironment, store: SqliteStore
) -> None:
    stream, records = log
    counting = CannedAdapters(count=412)
    model = ModelActivities(store, counting)  # type: ignore[arg-type]
    assert await env.run(model.count_model_input, model_request()) == 412
    record = one(records, "model_call.counted")
    assert {k: record[k] for k in ("provider", "model", "turn", "input_tokens")} == {
        "provider": "anthropic",
        "model": "claude-audit",
        "turn": 3,
        "input_tokens": 412,
    }
    assert [e.text for e in counting.requests[0].events] == [  # type: ignore[union-attr]
        "what is the weather in Oslo? write to dana@example.com"
    ]
    assert "Oslo" not in stream.getvalue()
    # A count below zero would hand the output more than the caps leave: refused.
    model = ModelActivities(store, CannedAdapters(count=-5))  # type: ignore[arg-type]
    with pytest.raises(ApplicationError) as raised:
        await env.run(model.count_model_input, model_request())
    assert raised.value.type == "BadCount" and raised.value.non_retryable


COMPLETED_FIELDS = (
    "provider",
    "api",
    "model",
    "response_id",
    "request_id",
    "turn",
    "stop",
    "stop_detail",
    "tool_call_ids",
    "input_tokens",
    "output_tokens",
    "cost_usd",
)


async def test_a_failed_model_call_is_audited_and_the_key_in_its_message_never_shows(
    log: tuple[io.StringIO, Records], env: ActivityEnvironment, store: SqliteStore
) -> None:
    stream, records = log
    error = ProviderError(
        f"Error code: 401 - invalid x-api-key {API_KEY}",
        error_class="authentication",
        retryable=False,
        status_code=401,
    )
    model = ModelActivities(store, CannedAdapters(error=error))  # type: ignore[arg-type]
    with pytest.raises(ApplicationError) as raised:
        await env.run(model.call_model, model_request())
    # The error itself is masked (it reaches the stop reason and history) ...
    assert API_KEY not in str(raised.value) and "invalid x-api-key ***" in str(raised.value)
    assert raised.value.__cause__ is None  # ... with no unmasked cause behind it
    try:
        raise raised.value
    except ApplicationError:
        # ... and logged with its traceback, as the worker does when an activity fails.
        logging.getLogger("temporalio.activity").warning(
            "Completing activity as failed", exc_info=True
        )

    record = one(records, "model_call.failed")
    assert record | CONTEXT == record
    assert {k: record[k] for k in ("provider", "error_class", "retryable", "status_code")} == {
        "provider": "anthropic",
        "error_class": "authentication",
        "retryable": False,
        "status_code": 401,
    }
    failure = one(records, "Completing activity as failed")
    assert "invalid x-api-key ***" in failure["exception"]
    assert API_KEY not in stream.getvalue()


# --- redaction -------------------------------------------------------------------------------


def test_credentials_secrets_personal_fields_and_emails_are_redacted_at_any_depth(
    log: tuple[io.StringIO, Records],
) -> None:
    stream, records = log
    audit(
        "provider.request",
        headers={"Authorization": "Bearer abc.def.ghi", "X-Api-Key": "k-1", "Accept": "json"},
        client={"options": [{"api_key": "k-2", "timeout": 3}, {"password": "hunter22"}]},
        access_token="t-1",
        cookie="session=1",
        client_secret="s-1",
        input_tokens=12,
        max_output_tokens=100,
        note=f"retrying with key={API_KEY} on behalf of Dana.Smith@example.co.uk",
        dsn="postgresql://agentloop:pg-pass-9@db:5432/agentloop",
        auth_header="Bearer Zq8v3LmN0pRt5WxY",
        recipient="dana@example.com",
        customer_email="dana@example.com",
        args={"ticket_id": "T-1001", "body": "Hi Dana, your refund is on its way."},
        thinking="I should not say this",
    )
    record = one(records, "provider.request")
    assert record["headers"] == {"Authorization": "***", "X-Api-Key": "***", "Accept": "json"}
    assert record["client"] == {"options": [{"api_key": "***", "timeout": 3}, {"password": "***"}]}
    assert record["access_token"] == record["cookie"] == record["client_secret"] == "***"
    assert record["input_tokens"] == 12 and record["max_output_tokens"] == 100  # counts stay
    assert record["note"] == "retrying with key=*** on behalf of D***@example.co.uk"
    assert record["dsn"] == "postgresql://agentloop:***@db:5432/agentloop"
    assert record["auth_header"] == "Bearer ***"
    # Personal fields: not readable, but the same value gives the same mark (correlatable).
    mark = personal_digest("dana@example.com")
    assert mark.startswith("<redacted:") and len(mark) == len("<redacted:>") + 12
    assert record["recipient"] == record["customer_email"] == mark
    assert record["args"] == {
        "ticket_id": "T-1001",
        "body": personal_digest("Hi Dana, your refund is on its way."),
    }
    assert record["thinking"] == "<omitted: 21 chars>"
    text = stream.getvalue()
    for clear in (API_KEY, "abc.def.ghi", "k-1", "hunter22", "pg-pass-9", "refund", "Dana.Smith"):
        assert clear not in text
    assert "dana@example.com" not in text


def test_a_short_secret_is_cut_out_where_it_stands_alone_not_inside_words() -> None:
    """A one-letter database password must not mangle every line ("tem***oralio")."""
    redactor = Redactor(secrets=["p", "x9", "a-much-longer-secret"])
    line = "temporalio.worker polled; dsn postgresql://u:p@db/x9 (p) key a-much-longer-secret"
    assert redactor.scrub(line) == (
        "temporalio.worker polled; dsn postgresql://u:***@db/*** (***) key ***"
    )
    assert redactor.scrub("no secret here: px9 p9x") == "no secret here: px9 p9x"


def test_stdlib_and_structlog_records_get_the_same_format_and_redaction(
    log: tuple[io.StringIO, Records],
) -> None:
    stream, records = log
    logging.getLogger("temporalio.worker").info("poll failed for %s", f"user {API_KEY}")
    structlog.get_logger("agentloop.other").info("native", token="abc", to="bob@example.com")
    stdlib = one(records, "poll failed for user ***")
    assert stdlib["logger"] == "temporalio.worker" and stdlib["level"] == "info"
    assert "timestamp" in stdlib and "kind" not in stdlib
    native = one(records, "native")
    assert native["token"] == "***" and native["to"] == "b***@example.com"
    assert API_KEY not in stream.getvalue()


def test_a_workflow_logger_audit_record_is_flattened_like_audit(
    log: tuple[io.StringIO, Records],
) -> None:
    """What `workflow.logger.info(event, extra={"audit": {...}})` hands to logging (the
    adapter appends its details to the message and puts them in `temporal_workflow`)."""
    _, records = log
    details = {"workflow_id": "wf-9", "run_id": "r-9", "workflow_type": "AgentRun", "attempt": 1}
    logging.getLogger("temporalio.workflow").info(
        f"policy.decision ({details})",
        extra={
            "temporal_workflow": details,
            "audit": {"call_id": "c1", "decision": "needs_approval", "recipient": "x@y.org"},
        },
    )
    record = one(records, "policy.decision")
    assert record["kind"] == "audit"
    assert record | {"workflow_id": "wf-9", "run_id": "r-9", "call_id": "c1"} == record
    assert record["decision"] == "needs_approval"
    assert record["recipient"] == personal_digest("x@y.org")


def test_configuring_again_replaces_the_handler_and_audit_ignores_the_level() -> None:
    first, second = io.StringIO(), io.StringIO()
    try:
        configure_logging(stream=first)
        configure_logging(stream=first)
        audit("once")
        assert first.getvalue().count('"once"') == 1
        configure_logging(stream=second, level="WARNING")
        logging.getLogger("agentloop.x").info("chatter")
        audit("still.audited", call_id="c1")
        logging.getLogger("agentloop.x").warning("warned")
        lines = [json.loads(line) for line in second.getvalue().splitlines()]
        assert [r["event"] for r in lines] == ["still.audited", "warned"]
        assert '"once"' not in second.getvalue() and "still" not in first.getvalue()
    finally:
        reset_logging()


def test_the_console_format_redacts_too() -> None:
    stream = io.StringIO()
    try:
        configure_logging(fmt="console", stream=stream, secrets=[API_KEY], redact_fields=["body"])
        audit("tool.executed", call_id="c1", note=f"key {API_KEY}", body="hello")
        line = stream.getvalue()
        assert "tool.executed" in line and "call_id=c1" in line and "kind=audit" in line
        assert API_KEY not in line and "hello" not in line and "<redacted:" in line
    finally:
        reset_logging()


def test_settings_secrets_are_the_keys_and_url_passwords() -> None:
    settings = Settings(
        openai_api_key="sk-openai-1234567890",
        anthropic_api_key=None,
        store_url="postgresql://agentloop:pg-secret@db/agentloop",
    )
    assert sorted(settings_secrets(settings)) == ["pg-secret", "sk-openai-1234567890"]


def test_core_logs_can_be_forwarded_to_logging() -> None:
    runtime = core_log_forwarding_runtime()
    assert runtime is not None


# --- a real worker ---------------------------------------------------------------------------


@workflow.defn(name="AuditProbe")
class AuditProbe:
    @workflow.run
    async def run(self, request: CallModelInput) -> str:
        workflow.logger.info(
            "policy.decision",
            extra={
                "audit": {
                    "call_id": "c1",
                    "tool": "send_reply",
                    "decision": "needs_approval",
                    "recipient": "dana@example.com",
                }
            },
        )
        try:
            await workflow.execute_activity(
                "call_model",
                request,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except ActivityError:
            return "failed"
        return "answered"


@pytest.mark.integration
async def test_a_real_worker_logs_temporalio_records_and_workflow_audit_records_redacted(
    client: Client, store: SqliteStore
) -> None:
    stream = io.StringIO()
    configure_logging(stream=stream, secrets=[API_KEY], redact_fields=DEFAULT_REDACT_FIELDS)
    try:
        error = ProviderError(
            f"Error code: 401 - invalid x-api-key {API_KEY}",
            error_class="authentication",
            retryable=False,
            status_code=401,
        )
        model = ModelActivities(store, CannedAdapters(error=error))  # type: ignore[arg-type]
        queue = f"audit-{uuid.uuid4().hex[:8]}"
        workflow_id = f"audit-probe-{uuid.uuid4().hex[:8]}"
        async with Worker(
            client, task_queue=queue, workflows=[AuditProbe], activities=[model.call_model]
        ):
            outcome = await client.execute_workflow(
                AuditProbe.run, model_request(), id=workflow_id, task_queue=queue
            )
        assert outcome == "failed"
    finally:
        reset_logging()
    text = stream.getvalue()
    records = [json.loads(line) for line in text.splitlines()]
    decision = next(r for r in records if r["event"] == "policy.decision")
    assert decision["kind"] == "audit" and decision["workflow_id"] == workflow_id
    assert decision["run_id"] and decision["workflow_type"] == "AuditProbe"
    assert decision["recipient"] == personal_digest("dana@example.com")
    failed = next(r for r in records if r["event"] == "model_call.failed")
    assert failed["workflow_id"] == workflow_id and failed["attempt"] == 1
    assert failed["activity_type"] == "call_model" and failed["activity_id"]
    worker_log = next(r for r in records if r["event"] == "Completing activity as failed")
    assert worker_log["activity_type"] == "call_model" and "exception" in worker_log
    assert "invalid x-api-key ***" in worker_log["exception"]
    assert API_KEY not in text and "dana@example.com" not in text


async def _lookup_everything(ctx: ToolContext[Any], args: ReplyArgs) -> Outcome:
    return Outcome(state="applied", record={"history": "h" * 3_000_000})


@tool(name="send_all", effect="write", lookup_outcome=_lookup_everything, max_result_chars=2_000)
async def _send_all(ctx: ToolContext[Any], args: ReplyArgs) -> Any:
    raise OutcomeUnknown("connection dropped")


async def test_a_looked_up_record_is_cut_before_it_leaves_the_activity(
    env: ActivityEnvironment, store: SqliteStore
) -> None:
    """A record past Temporal's 2 MiB would never reach the run: it is cut to the tool's
    `max_result_chars` on the worker, the outcome kept."""
    tools = tool_activities([_send_all], store)
    request = RunToolInput(
        workflow_id="wf-audit-1",
        call_id="call_a1",
        tool="send_all",
        arguments=REPLY_ARGS,
        idempotency_key="wf-audit-1/call_a1",
    )
    outcome = await env.run(tools.lookup_outcome, request)
    assert outcome.state == "applied"
    assert isinstance(outcome.record, str) and outcome.record.startswith('{"history": "hhh')
    assert outcome.record.endswith("of 3000015 characters]")  # the whole record's size
    # The run keeps it as it came: its JSON is within the bound, not cut a second time.
    assert bounded_record(outcome.record, 2_000) == outcome.record
