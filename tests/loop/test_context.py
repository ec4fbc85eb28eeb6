"""The context budget: older tool results give way to previews; the results being answered
stay whole; facts from run state are restated; the stored transcript keeps everything."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop.context import (
    PREVIEW_CHARS,
    Measured,
    budget_chars,
    chars_per_token,
    fit,
    input_token_bound,
    size,
)
from agentloop.contract import Principal
from agentloop.envelope import unwrapped
from agentloop.events import ModelOutput, StateUpdate, ToolCall, ToolResult, UserInput
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptUsage
from agentloop.store import load_transcript, open_store
from agentloop.testing.turns import call as scripted_call
from tests.live import Live, agent_input, scripted
from tests.support import result_of, signal_approval, start_run, wait_for_phase


def turn(i: int, chars: int) -> list[Any]:
    call = ToolCall(call_id=f"c{i}", name="search_policy")
    return [
        ModelOutput(stop="tool_calls", tool_calls=[call]),
        ToolResult(call_id=f"c{i}", tool="search_policy", content=str(i) * chars),
    ]


def test_what_fits_is_sent_unchanged() -> None:
    events = [UserInput(text="q"), *turn(1, 1000)]
    assert fit(Measured.of(events), 100_000, ["x"]).events == events
    assert fit(Measured.of(events), None, ["x"]).events == events


def test_oldest_results_give_way_first_and_the_current_ones_stay_whole() -> None:
    events = [UserInput(text="q"), *turn(1, 5000), *turn(2, 5000), *turn(3, 5000)]
    fitted = fit(Measured.of(events), 9_000, ["send_reply c0 was approved by lead"]).events
    results = [e for e in fitted if isinstance(e, ToolResult)]
    first = json.loads(results[0].content)
    assert first["elided"] and first["total_chars"] == 5000
    assert first["preview"] == "1" * PREVIEW_CHARS and first["source"]["call_id"] == "c1"
    assert results[2].content == "3" * 5000  # the results the model answers now
    note = fitted[-1]
    assert isinstance(note, StateUpdate) and "approved by lead" in note.text
    assert [e.call_id for e in results] == ["c1", "c2", "c3"]  # pairing untouched


def test_a_result_its_stub_would_outgrow_stays_whole() -> None:
    """A result not much longer than the preview: the stub naming it is the larger."""
    events = [UserInput(text="q"), *turn(1, 400), *turn(2, 400)]
    whole = sum(Measured.of(events).sizes)
    for facts in ([], ["a fact"]):
        fitted = fit(Measured.of(events), whole - 1, facts)
        assert (fitted.events, fitted.chars, fitted.added) == (events, whole, [])


def test_shortening_makes_room_for_the_facts_it_restates() -> None:
    events = [UserInput(text="q"), *turn(1, 2000), *turn(2, 2000), *turn(3, 2000)]
    whole = sum(Measured.of(events).sizes)
    facts = ["send_reply c0 was approved by lead " * 40]  # about as long as one elision saves
    fitted = fit(Measured.of(events), whole - 1_000, facts)
    assert fitted.chars <= whole - 1_000
    assert fitted.chars == sum(size(event) for event in fitted.events)
    assert [json.loads(e.content)["elided"] for e in fitted.events[2:5:2]] == [True, True]
    # What the eliding cannot make up for is not elided: the transcript goes as it is.
    small = [UserInput(text="q"), *turn(1, 2000), *turn(2, 10)]
    whole = sum(Measured.of(small).sizes)
    assert fit(Measured.of(small), whole - 1, facts * 3).events == small


def test_the_token_bound_counts_results_shortened_last_time_and_sent_whole_now() -> None:
    """The provider counted the last request with two results shortened; this one, with a
    larger budget, sends them whole: the bound must hold the request still (a token covers
    at least one byte, so the request's bytes are what its tokens can reach)."""
    before = Measured.of([UserInput(text="q"), *turn(1, 5000), *turn(2, 5000), *turn(3, 50)])
    last = fit(before, 6_000, [])
    assert last.elided == {2, 4} and last.elided_through == 5
    answer = ModelOutput(stop="tool_calls", tool_calls=[ToolCall(call_id="c4", name="s")])
    context_tokens = _bytes(last.events) + _bytes([answer])  # at most its bytes, by BPE
    new = [ToolResult(call_id="c4", tool="search_policy", content="4" * 50)]
    now = fit(before.plus([answer, *new]), None, [])
    assert now.elided == frozenset() and now.events[2].content == "1" * 5000
    bound = input_token_bound(now, new, [], context_tokens, last.elided_through)
    assert bound >= _bytes(now.events)
    # Without what the last call sent shortened, the bound fell short of the request.
    assert input_token_bound(now, new, [], context_tokens) < _bytes(now.events)


def _bytes(events: list[Any]) -> int:
    return sum(len(e.model_dump_json(exclude_defaults=True).encode()) for e in events)


def test_a_transcript_measured_as_it_grows_counts_what_is_sent() -> None:
    grown = Measured.of([UserInput(text="q"), *turn(1, 5000)]).plus([*turn(2, 5000)])
    grown = grown.plus([*turn(3, 5000)])
    assert grown == Measured.of(grown.events)  # each event measured once, as it came
    for limit in (None, 100_000, 9_000):
        fitted = fit(grown, limit, ["a fact"])
        assert fitted.chars == sum(size(event) for event in fitted.events)


def test_budgets_by_model_in_tokens_become_characters_at_the_measured_ratio() -> None:
    assert budget_chars("claude-sonnet-4-5", None) == 180_000 * 3  # not measured yet
    assert budget_chars("gpt-4o-mini", None, chars_per_token=4.0) == 112_000 * 4
    assert budget_chars("travel", None) is None
    assert budget_chars("travel", None, 1_000, 2.5) == 2_500
    assert budget_chars("gpt-4o", 5_000, 1_000, 2.5) == 5_000  # characters win
    assert budget_chars("travel", None, 1_000, 0.01) == 1_000  # a ratio out of range: bound
    assert chars_per_token(9_000, 3_000) == 3.0
    assert chars_per_token(9_000, 0) is None  # a provider that reports no usage


def scripted_reads(run_id: str, prompt_tokens: int | None) -> Script:
    """Three policy searches, then an answer; the provider counts `prompt_tokens` per
    request."""
    usage = (
        None
        if prompt_tokens is None
        else ScriptUsage(prompt_tokens=prompt_tokens, completion_tokens=10)
    )
    return scripted(
        run_id,
        *[
            ScriptTurn(
                tool_calls=[scripted_call("search_policy", f"call_t{i}", query=query)],
                usage=usage,
            )
            # The first result (998 characters) is long enough for its stub to be shorter.
            for i, query in enumerate(["refund order", "damaged", "shipping"])
        ],
        ScriptTurn(text="done", usage=usage),
    )


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_token_budget_follows_the_providers_own_count(live: Live, run_id: str) -> None:
    """Two runs with the same 1,500-token budget and the same conversation: the provider
    that counts many tokens per character gets its older results shortened."""
    elided: dict[str, bool] = {}
    for name, prompt_tokens in (("plain", None), ("dense", 50_000)):
        live.provider.register(scripted_reads(f"{run_id}-{name}", prompt_tokens))
        run_input = agent_input(
            f"{run_id}-{name}",
            "openai-chat",
            "Study the refund, damage and shipping policies.",
            ["search_policy"],
            context_budget_tokens=1_500,
            principal=Principal(subject="agent", scopes=["tickets:read"]),
        )
        result = await result_of(
            await start_run(live.client, live.worker, f"{run_id}-{name}", run_input)
        )
        assert result.status == "completed", result.stop_reason
        last = live.provider.requests[-1]["body"]["messages"]
        tools = {m["tool_call_id"]: unwrapped(m["content"]) for m in last if m["role"] == "tool"}
        assert not tools["call_t2"].startswith('{"elided"')  # answered now: whole
        elided[name] = tools["call_t0"].startswith('{"elided"')
    assert elided == {"plain": False, "dense": True}


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_long_run_is_sent_within_its_budget_with_the_facts_restated(
    live: Live, run_id: str
) -> None:
    reply = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "On its way."}
    reads = [  # distinct calls: repeating one would be a stall
        # 998 characters: the one that gives way (a stub is shorter, with the facts restated)
        ("search_policy", {"query": "refund order"}),
        ("read_ticket", {"ticket_id": "T-1002"}),
        ("read_ticket", {"ticket_id": "T-1003"}),
        ("search_policy", {"query": "shipping"}),
    ]
    live.provider.register(
        scripted(
            run_id,
            [ScriptedToolCall(id="call_reply", name="send_reply", arguments=reply)],
            *[
                ScriptTurn(
                    tool_calls=[ScriptedToolCall(id=f"call_s{i}", name=name, arguments=args)]
                )
                for i, (name, args) in enumerate(reads)
            ],
            "done",
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Answer T-1001, then study T-1002.",
        ["send_reply", "read_ticket", "search_policy"],
        context_budget_chars=3_000,
        principal=Principal(subject="agent", scopes=["tickets:write", "tickets:read"]),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_approval")
    await signal_approval(
        handle, "call_reply", view.pending_approvals[0].args_digest, "support-lead"
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason

    last = live.provider.requests[-1]["body"]["messages"]
    tools = {m["tool_call_id"]: unwrapped(m["content"]) for m in last if m["role"] == "tool"}
    assert json.loads(tools["call_s0"])["elided"] is True
    assert not tools["call_s3"].startswith('{"elided"')  # answered now: whole
    facts = [m["content"] for m in last if m["role"] == "user" and "Facts from run" in m["content"]]
    assert facts and "call_reply was approved by support-lead" in facts[-1]
    assert "send_reply call_reply is succeeded" in facts[-1]
    # The store keeps every result whole.
    store = open_store(live.worker.store_url)
    try:
        stored = await load_transcript(store, result.transcript_head)
    finally:
        await store.close()
    kept = {e.call_id: e.content for e in stored if isinstance(e, ToolResult)}
    assert not kept["call_s0"].startswith('{"elided"')
