"""Every error class takes its recovery (issue #6; seed 001, "error recovery: classify first,
then decide the action"), end to end: real dev server, the official clients over HTTP to the
scripted provider, the example tools against the example service (the system of record counts
what ran).

One row per way a class shows up. The classes are those of `events.ErrorClass` (what a tool
result carries) and those `policies.errors` advises for a failed model call; the first test
keeps the table complete when a class is added. Each row asserts the run's status and stop
reason (which names the class), the requests that reached the scripted provider, the
executions the example service counted, and that every result went back to the model under
its own call id (or, when the run stopped first, is in the result's `unsent`).

The recoveries:
- transient: a model call is retried by Temporal, honouring Retry-After, and fails naming the
  class once its attempts are used up; a read is retried by its activity retry, then its
  failure goes to the model; a write whose answer was lost is looked up, never resent.
- context_length_exceeded, bad_request, authentication, permission, not_found, unprocessable
  (a model call): not retried, the run stops `failed` naming the class.
- invalid_arguments, unknown_tool: the exact error goes back to the model under the call id;
  past `MAX_REFUSED_CALLS` the run stops `failed` (`invalid_calls`).
- business: back to the model; run exactly once, never retried.
- permission (policy): stop `denied` (or `rejected`), every call id answered, nothing run.
- partial success (a write's outcome unknown): `lookup_outcome` by idempotency key confirms it
  (`confirmed_after_query`), or the run stops listing the side effect as unconfirmed.
- protocol: nothing runs; the run stops `incomplete` / `failed` naming it, and the raw
  response stays in the transcript.
- internal: an SDK failure is not retried; the run stops `failed` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_args

import httpx2
import openai
import pytest
from temporalio.client import WorkflowHandle

from agentloop.contract import AgentRunInput, AgentRunResult, Principal
from agentloop.demo.services import ExampleService
from agentloop.demo.tools.http import ServiceClient
from agentloop.envelope import unwrapped
from agentloop.events import ErrorClass, ModelOutput, ToolResult
from agentloop.policies.errors import classify_connection_error, classify_http_error
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptedError
from agentloop.store import load_transcript, open_store
from agentloop.workflows.loop import MAX_REFUSED_CALLS
from agentloop.workflows.steps import LOOKUP_RETRY, MODEL_RETRY
from tests.live import Live, agent_input
from tests.people.test_approvals import decide
from tests.support import result_of, start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

ALL_SCOPES = ["workshops:read", "workshops:write", "tickets:read", "tickets:write"]
TOOLS = ["get_train_status", "get_weather", "check_workshop", "reserve_seat", "read_ticket"]
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
FULL_WORKSHOP = {"workshop_id": "ws-102", "participant_id": "p-alice"}  # seeded full
OPEN_WORKSHOP = {"workshop_id": "ws-101", "participant_id": "p-carol"}
LOOKUP_OUTAGE = 50
"""More refused lookups than the lookup activity has attempts: no retry gets an answer."""


def call(call_id: str, name: str, arguments: dict[str, Any] | str) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


def error(class_: str, message: str) -> str:
    """A tool result's content exactly as the runner words a refusal or failure."""
    return json.dumps({"error": {"class": class_, "message": message}})


@dataclass(frozen=True)
class Ctx:
    """What a row's own check may look at besides the result."""

    run_id: str
    worker: Settings
    provider: ScriptedProvider
    service: ExampleService


Check = Callable[[AgentRunResult, Ctx], Awaitable[None]]
Drive = Callable[[WorkflowHandle[Any, AgentRunResult]], Awaitable[None]]
Patch = Callable[[pytest.MonkeyPatch, str], None]


@dataclass(frozen=True)
class Row:
    error_class: str
    """The class this row takes through its recovery."""
    turns: list[ScriptTurn]
    status: str
    stop: str
    """Must appear in `stop_reason`: the limit, policy or error class that ended the run."""
    model_requests: int
    """Requests that reached the scripted provider (retries included)."""
    executions: dict[str, int] = field(default_factory=dict)
    """Requests the example service counted, per endpoint (endpoints not named: none)."""
    seen: dict[str, str] = field(default_factory=dict)
    """call id -> what the model received as that call's result (a substring of it)."""
    ledger: dict[str, str] = field(default_factory=dict)
    """call id -> status in the result's `calls`."""
    unsent: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(call id, status, error class) of the results the model never saw, in the model's
    order: the run stopped first (a run that continues this one sends them first)."""
    records: dict[str, int] = field(default_factory=lambda: {"reservations": 0})
    """What the system of record holds afterwards (writes made)."""
    faults: list[tuple[str, str, int]] = field(default_factory=list)
    """(endpoint, mode, count) injected at the example service before the run."""
    scopes: list[str] = field(default_factory=lambda: ALL_SCOPES)
    overrides: dict[str, Any] = field(default_factory=dict)
    drive: Drive | None = None
    """What a human does while the run waits (approve, reject)."""
    patch: Patch | None = None
    """A failure injected at the SDK seam, for failures no wire answer produces."""
    unchecked_script: bool = False
    """Register the script without its validation (duplicate call ids on purpose)."""
    check: Check | None = None


def approve(call_id: str, approved: bool = True) -> Drive:
    async def drive(handle: WorkflowHandle[Any, AgentRunResult]) -> None:
        await wait_for_phase(handle, "awaiting_approval")
        await decide(handle, call_id, approved=approved)

    return drive


def waited(seconds: float) -> Check:
    """The retry reached the provider no sooner than the Retry-After it was given."""

    async def check(result: AgentRunResult, ctx: Ctx) -> None:
        times = [r["received_at"] for r in ctx.provider.requests if r["script"] == ctx.run_id]
        assert times[1] - times[0] >= seconds, "the retry did not wait for Retry-After"

    return check


def raw_response_kept(turn: int) -> Check:
    """The model output that broke the protocol is in the run's transcript, with the
    provider's response id: nothing ran, but nothing was lost either."""

    async def check(result: AgentRunResult, ctx: Ctx) -> None:
        store = open_store(ctx.worker.store_url)
        try:
            events = await load_transcript(store, result.transcript_head)
        finally:
            await store.close()
        last = events[-1]
        assert isinstance(last, ModelOutput)
        assert last.provider_ref.response_id == f"chatcmpl-{ctx.run_id}-{turn}"
        assert last.provider_ref.raw_items, "the raw items to echo back were not kept"

    return check


def side_effect(status: str, confirmed_by: str) -> Check:
    """The write is listed once, under its idempotency key, and the stop report says how it
    was confirmed."""

    async def check(result: AgentRunResult, ctx: Ctx) -> None:
        [effect] = result.side_effects
        key = effect.idempotency_key
        assert (effect.call_id, effect.tool, effect.status, effect.confirmed_by) == (
            "call_w",
            "reserve_seat",
            status,
            confirmed_by,
        )
        assert key.startswith(f"{ctx.run_id}/") and key.endswith("/call_w")  # one per run chain
        assert f"reserve_seat call_w: {status}, confirmed by {confirmed_by}" in result.report

    return check


def sdk_fails_after_the_answer(make: Callable[[], Exception]) -> Patch:
    """The request reaches the provider and is answered, then the SDK raises `make()`, as it
    would for an answer it cannot use. No wire answer of the scripted provider makes the
    official client raise these, so they are injected at the SDK seam; the adapter's error
    mapping, the activity, the retry policy and the workflow are the real ones."""

    def patch(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
        real = openai.AsyncOpenAI.post

        async def post(self: openai.AsyncOpenAI, *args: Any, **kwargs: Any) -> Any:
            answer = await real(self, *args, **kwargs)
            if (kwargs.get("body") or {}).get("model") == script:
                raise make()
            return answer

        monkeypatch.setattr(openai.AsyncOpenAI, "post", post)

    return patch


def invalid_response() -> Exception:
    response = httpx2.Response(
        200,
        headers={"x-request-id": "req_unusable"},
        request=httpx2.Request("POST", "http://provider/v1"),
    )
    return openai.APIResponseValidationError(response, None, message="choices: field required")


def answer_then_crash(path_part: str) -> Patch:
    """A tool handler bug: the service answers, then the handler raises (not a ToolError)."""

    def patch(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
        real = ServiceClient.get_json

        async def get_json(self: ServiceClient, path: str, params: Any = None) -> Any:
            answer = await real(self, path, params)
            if path_part in path:
                raise KeyError("station")
            return answer

        monkeypatch.setattr(ServiceClient, "get_json", get_json)

    return patch


def final(text: str = "Done.") -> ScriptTurn:
    return ScriptTurn(text=text)


def provider_error(status: int, message: str = "") -> Row:
    """A model call failing with an HTTP error that retrying would not fix: one request, and
    the run stops `failed` naming the class `policies.errors` gave it."""
    advice = classify_http_error(status, {}, message)
    assert not advice.retryable
    return Row(
        advice.error_class,
        [ScriptTurn(text="never", errors=[ScriptedError(status=status, message=message)])],
        "failed",
        f"model_error: Provider:{advice.error_class}",
        1,
    )


def bad_weather_calls(turn: int, arguments: dict[str, Any]) -> list[ScriptedToolCall]:
    cities = ["Oslo", "Lima", "Kyiv"]
    return [
        call(f"call_bad_{turn}_{i}", "get_weather", {"city": city, **arguments})
        for i, city in enumerate(cities)
    ]


# Three turns of three refused calls, each turn wrong in another way (the same error three
# turns in a row would be a stall, a different stop).
CAPPED_TURNS = [
    ScriptTurn(tool_calls=bad_weather_calls(1, {})),
    ScriptTurn(tool_calls=bad_weather_calls(2, {"date": "tomorrow"})),
    ScriptTurn(tool_calls=bad_weather_calls(3, {"date": "2026-12-01", "units": "metric"})),
]
CAPPED = sum(len(turn.tool_calls) for turn in CAPPED_TURNS)

ROWS: dict[str, Row] = {
    # --- transient: retried (honouring Retry-After), never handed to the model blindly -----
    "transient-model-429-retry-after-ms": Row(
        "transient",
        [ScriptTurn(text="fine", errors=[ScriptedError(status=429, retry_after_ms="300")])],
        "completed",
        "final answer",
        2,
        check=waited(0.3),
    ),
    "transient-model-503-retry-after": Row(
        "transient",
        [ScriptTurn(text="fine", errors=[ScriptedError(status=503, retry_after="1")])],
        "completed",
        "final answer",
        2,
        check=waited(1.0),
    ),
    "transient-model-attempts-run-out": Row(
        "transient",
        [
            ScriptTurn(
                text="never",
                errors=[ScriptedError(status=500, retry_after_ms="10")]
                * (MODEL_RETRY.maximum_attempts + 1),
            )
        ],
        "failed",
        "model_error: Provider:transient",
        MODEL_RETRY.maximum_attempts,
    ),
    "transient-read-retried-by-the-activity": Row(
        "transient",
        [
            ScriptTurn(
                tool_calls=[call("call_t", "get_train_status", TRAIN)],
                expect_tool_results={"call_t": '"train_number": "G1234"'},
            ),
            final("{{call_t.status}}"),
        ],
        "completed",
        "final answer",
        2,
        executions={"trains": 3},
        seen={"call_t": '"train_number": "G1234"'},
        ledger={"call_t": "succeeded"},
        faults=[("trains", "unavailable", 2)],
    ),
    "transient-read-attempts-run-out": Row(
        "transient",
        [
            ScriptTurn(
                tool_calls=[call("call_t", "get_train_status", TRAIN)],
                expect_tool_results={"call_t": "transient"},
            ),
            final("The train service is down."),
        ],
        "completed",
        "final answer",
        2,
        executions={"trains": 3},
        seen={"call_t": error("transient", "Tool:transient: service error 503")},
        ledger={"call_t": "failed"},
        faults=[("trains", "unavailable", 3)],
    ),
    # --- model calls that a retry would not fix -------------------------------------------
    "context_length_exceeded-model": provider_error(
        400, "This model's maximum context length is 8192 tokens."
    ),
    "bad_request-model": provider_error(400, "Invalid 'messages[1].content'."),
    "authentication-model": provider_error(401, "Incorrect API key provided."),
    "permission-model": provider_error(403, "Project does not have access to this model."),
    "not_found-model": provider_error(404, "The model does not exist."),
    "unprocessable-model": provider_error(422, "Unprocessable request."),
    # --- parameter / format: the exact error back to the model, capped ---------------------
    "invalid_arguments-corrected": Row(
        "invalid_arguments",
        [
            ScriptTurn(
                tool_calls=[call("call_bad", "get_weather", {"city": "Shanghai"})],
                expect_tool_results={"call_bad": "invalid_arguments"},
            ),
            ScriptTurn(
                tool_calls=[call("call_good", "get_weather", WEATHER)],
                expect_tool_results={"call_good": "Shanghai"},
            ),
            final("{{call_good.condition}}"),
        ],
        "completed",
        "final answer",
        3,
        executions={"weather": 1},
        seen={
            "call_bad": error(
                "invalid_arguments",
                "arguments do not match the schema: 'date' is a required property",
            ),
            "call_good": '"city": "Shanghai"',
        },
        ledger={"call_bad": "rejected", "call_good": "succeeded"},
    ),
    "invalid_arguments-past-the-cap": Row(
        "invalid_arguments",
        CAPPED_TURNS,
        "failed",
        f"invalid_calls: {CAPPED} tool calls refused before running",
        len(CAPPED_TURNS),
        seen={
            "call_bad_1_0": "'date' is a required property",
            "call_bad_2_0": "'tomorrow' does not match",
        },
        ledger={c.id: "rejected" for t in CAPPED_TURNS for c in t.tool_calls},
        unsent=[(c.id, "rejected", "invalid_arguments") for c in CAPPED_TURNS[-1].tool_calls],
    ),
    "unknown_tool": Row(
        "unknown_tool",
        [
            ScriptTurn(
                tool_calls=[call("call_x", "book_flight", {"to": "Shanghai"})],
                expect_tool_results={"call_x": "unknown_tool"},
                undeclared_tools=["book_flight"],
            ),
            final("I cannot book flights."),
        ],
        "completed",
        "final answer",
        2,
        seen={"call_x": '{"class": "unknown_tool", "message": "unknown tool \'book_flight\''},
        ledger={"call_x": "rejected"},
    ),
    # --- business rejection: to the model, run once, no blind retry -------------------------
    "business-unknown-ticket": Row(
        "business",
        [
            ScriptTurn(
                tool_calls=[call("call_tk", "read_ticket", {"ticket_id": "T-9999"})],
                expect_tool_results={"call_tk": "business"},
            ),
            final("There is no ticket T-9999."),
        ],
        "completed",
        "final answer",
        2,
        executions={"support.ticket": 1},
        seen={"call_tk": error("business", "ticket 'T-9999' not found")},
        ledger={"call_tk": "failed"},
    ),
    "business-full-workshop": Row(
        "business",
        [
            ScriptTurn(
                tool_calls=[call("call_w", "reserve_seat", FULL_WORKSHOP)],
                expect_tool_results={"call_w": "precondition_failed"},
            ),
            final("ws-102 is full."),
        ],
        "completed",
        "final answer",
        2,
        # Checked once against the system of record; never offered for approval, never sent.
        executions={"workshops.eligibility": 1},
        seen={"call_w": error("precondition_failed", "ws-102 is full: no seat left for p-alice")},
        ledger={"call_w": "rejected"},
        overrides={"approval_timeout_seconds": 5},
    ),
    # --- permission / policy: stop, every call id answered, nothing run ---------------------
    "permission-missing-scope": Row(
        "permission",
        [
            ScriptTurn(
                tool_calls=[
                    call("call_c", "check_workshop", {"workshop_id": "ws-101"}),
                    call("call_w", "reserve_seat", OPEN_WORKSHOP),
                ]
            )
        ],
        "denied",
        "denied: p-alice (tenant default) lacks scope workshops:write required by reserve_seat",
        1,
        ledger={"call_c": "denied", "call_w": "denied"},
        unsent=[("call_c", "denied", "permission"), ("call_w", "denied", "permission")],
        scopes=["workshops:read"],
    ),
    "permission-rejected-by-the-approver": Row(
        "permission",
        [ScriptTurn(tool_calls=[call("call_w", "reserve_seat", OPEN_WORKSHOP)])],
        "rejected",
        "rejected: call_w by workshop-lead",
        1,
        executions={"workshops.eligibility": 1},
        ledger={"call_w": "rejected"},
        unsent=[("call_w", "rejected", "permission")],
        drive=approve("call_w", approved=False),
    ),
    # --- partial success: the write's outcome unknown ----------------------------------------
    "partial-success-write-outcome-unknown-confirmed-by-lookup": Row(
        "transient",
        [
            ScriptTurn(
                tool_calls=[call("call_w", "reserve_seat", OPEN_WORKSHOP)],
                expect_tool_results={"call_w": "confirmed"},
            ),
            final("Booked."),
        ],
        "completed",
        "final answer",
        2,
        # Checked before the approval and again after it; sent once (the answer was lost
        # after the commit), then asked for, never resent.
        executions={
            "workshops.eligibility": 2,
            "workshops.reserve": 1,
            "workshops.operation": 1,
        },
        seen={"call_w": '"confirmed": "the system of record has it"'},
        ledger={"call_w": "confirmed_after_query"},
        records={"reservations": 1},
        faults=[("workshops.reserve", "commit_then_drop", 1)],
        drive=approve("call_w"),
        check=side_effect("confirmed_after_query", "lookup by idempotency key"),
    ),
    "partial-success-write-outcome-unknown-stop-lists-the-side-effect": Row(
        "transient",
        [ScriptTurn(tool_calls=[call("call_w", "reserve_seat", OPEN_WORKSHOP)])],
        "unresolved",
        "unresolved: outcome of call_w unknown",
        1,
        executions={
            "workshops.eligibility": 2,  # before the approval, and again after it
            "workshops.reserve": 1,
            "workshops.operation": LOOKUP_RETRY.maximum_attempts,
        },
        ledger={"call_w": "unknown"},
        unsent=[("call_w", "unknown", None)],
        records={"reservations": 1},
        faults=[
            ("workshops.reserve", "commit_then_drop", 1),
            ("workshops.operation", "unavailable", LOOKUP_OUTAGE),
        ],
        overrides={"reconciliation_timeout_seconds": 1},
        drive=approve("call_w"),
        check=side_effect("unknown", "not confirmed: outcome unknown"),
    ),
    # --- model protocol: nothing runs, the raw response is kept, stop naming it --------------
    "protocol-stream-cut-inside-tool-arguments": Row(
        "protocol",
        [
            ScriptTurn(
                tool_calls=[call("call_cut", "get_train_status", TRAIN)],
                cut_stream_after_chars=12,
            )
        ],
        "incomplete",
        "truncated: ",
        1,
        check=raw_response_kept(0),
    ),
    "protocol-duplicate-call-ids": Row(
        "protocol",
        [
            ScriptTurn(
                tool_calls=[
                    call("call_dup", "get_train_status", TRAIN),
                    call("call_dup", "get_weather", WEATHER),
                ]
            )
        ],
        "failed",
        "protocol: tool calls without unique call ids: ['call_dup', 'call_dup']",
        1,
        unsent=[("call_dup", "rejected", None)] * 2,  # `not_run`, for a continuing run
        unchecked_script=True,
        check=raw_response_kept(0),
    ),
    "protocol-call-id-reused-from-an-earlier-turn": Row(
        "protocol",
        [
            ScriptTurn(
                tool_calls=[call("call_t", "get_train_status", TRAIN)],
                expect_tool_results={"call_t": "G1234"},
            ),
            ScriptTurn(tool_calls=[call("call_t", "get_weather", WEATHER)]),
        ],
        "failed",
        "protocol: call ids reused from an earlier turn: ['call_t']",
        2,
        executions={"trains": 1},
        seen={"call_t": '"train_number": "G1234"'},
        ledger={"call_t": "succeeded"},
        unsent=[("call_t", "rejected", None)],
        unchecked_script=True,
        check=raw_response_kept(1),
    ),
    "protocol-response-the-sdk-cannot-validate": Row(
        "protocol",
        [final("never")],
        "failed",
        "model_error: Provider:protocol: protocol: invalid provider response: choices: field "
        "required (request req_unusable)",
        1,
        overrides={"stream": False},
        patch=sdk_fails_after_the_answer(invalid_response),
    ),
    # --- internal ----------------------------------------------------------------------------
    "internal-sdk-failure": Row(
        "internal",
        [final("never")],
        "failed",
        "model_error: Provider:internal: internal: OpenAIError: the SDK broke",
        1,
        overrides={"stream": False},
        patch=sdk_fails_after_the_answer(lambda: openai.OpenAIError("the SDK broke")),
    ),
}

ROWS["internal-tool-handler-crash"] = Row(
    "internal",
    [
        ScriptTurn(tool_calls=[call("call_t", "get_train_status", TRAIN)]),
        final("The train tool is broken."),
    ],
    "completed",
    "final answer",
    2,
    executions={"trains": 3},  # a crash is retried like an infrastructure failure
    seen={"call_t": '"class": "internal"'},
    ledger={"call_t": "failed"},
    patch=answer_then_crash("/travel/trains/"),
)


def test_every_error_class_has_a_row() -> None:
    """Both vocabularies: what a tool result carries, and what a failed model call is advised
    as (every HTTP status the classifier knows, a connection failure, and the two classes the
    adapters give SDK failures)."""
    advised = {classify_http_error(s, {}, "").error_class for s in range(400, 600)}
    advised |= {
        classify_http_error(400, {}, "maximum context length").error_class,
        classify_connection_error().error_class,
        "protocol",
        "internal",
    }
    covered = {row.error_class for row in ROWS.values()}
    assert set(get_args(ErrorClass)) | advised <= covered
    assert MAX_REFUSED_CALLS < CAPPED  # the cap row really goes past the cap


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
async def test_each_error_class_takes_its_recovery(
    live: Live, monkeypatch: pytest.MonkeyPatch, run_id: str, row: Row
) -> None:
    if row.unchecked_script:
        live.provider.register(Script.model_construct(name=run_id, turns=row.turns))
    else:
        live.provider.register(Script(name=run_id, turns=row.turns))
    for endpoint, mode, count in row.faults:
        live.service.inject_fault(endpoint, mode, count)
    if row.patch is not None:
        row.patch(monkeypatch, run_id)
    run_input = AgentRunInput.model_validate(
        {
            "task": "Help me with my trip, my workshop seat and my ticket.",
            "provider": "openai-chat",
            "model": run_id,
            "tools": TOOLS,
            "principal": Principal(subject="p-alice", scopes=row.scopes),
            **row.overrides,
        }
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    if row.drive is not None:
        await row.drive(handle)
    result = await result_of(handle)

    assert result.status == row.status, result.stop_reason
    assert row.stop in result.stop_reason
    assert result.report.startswith(f"Stopped: {result.status} — {result.stop_reason}")
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    assert len(requests) == row.model_requests
    counted = {k: v for k, v in live.service.stats()["counts"].items() if v}
    assert counted == row.executions
    held = live.service.records()
    assert {kind: held[kind] for kind in row.records} == row.records
    assert {c.call_id: c.status for c in result.calls} == row.ledger
    # Every result the model saw answers a call of the turn before, once, under its id.
    answered = results_by_call_id(requests[-1]["body"]) if requests else {}
    for call_id, text in row.seen.items():
        assert text in answered[call_id], (call_id, answered.get(call_id))
    unsent = [e for e in result.unsent if isinstance(e, ToolResult)]
    assert [(e.call_id, e.status, e.error_class) for e in unsent] == row.unsent
    if row.check is not None:
        await row.check(result, Ctx(run_id, live.worker, live.provider, live.service))


def results_by_call_id(body: dict[str, Any]) -> dict[str, str]:
    """The tool results of a Chat Completions request by call id, after checking that each
    assistant turn's calls are answered right after it, exactly once each, by id."""
    messages = body["messages"]
    found: dict[str, str] = {}
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        asked = [c["id"] for c in message["tool_calls"]]
        following = messages[i + 1 : i + 1 + len(asked)]
        assert sorted(m.get("tool_call_id") for m in following) == sorted(asked)
        assert all(m["role"] == "tool" for m in following)
        found.update((m["tool_call_id"], unwrapped(m["content"])) for m in following)
    return found


@pytest.mark.parametrize(
    "name", ["protocol-stream-cut-inside-tool-arguments", "protocol-duplicate-call-ids"]
)
async def test_a_protocol_stop_names_the_provider_response(
    live: Live, run_id: str, name: str
) -> None:
    row = ROWS[name]
    live.provider.register(Script.model_construct(name=run_id, turns=row.turns))
    run_input = agent_input(run_id, "openai-chat", "Is my train late?", TOOLS)
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == row.status
    assert f"chatcmpl-{run_id}-0" in result.stop_reason
    assert f"chatcmpl-{run_id}-0" in result.report
