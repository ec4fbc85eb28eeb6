"""The inbox's HTML, rendered on the server. Every value from outside (task, arguments, model
and tool text, names, ids) goes through `esc`; no page holds an inline script or style (the
Content-Security-Policy forbids them), and links are only ever to the inbox's own paths."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from agentloop.contract import CallRecord, RunStatusView, Usage
from agentloop.inbox.reading import (
    KIND_NAMES,
    RecentRun,
    RunStory,
    WaitingItem,
)
from agentloop.waiting import WAITING_PHASES


def esc(value: Any) -> str:
    return escape(str(value), quote=True)


def run_path(workflow_id: str) -> str:
    return "/runs/" + quote(workflow_id, safe="")


def pretty(value: Any) -> str:
    """Every value, nothing cut: what the approver decides on is what the run would send."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@dataclass(frozen=True)
class Viewer:
    """Who looks, and the token their forms carry."""

    user: str
    csrf: str
    tenants: Sequence[str] | None
    """The tenants they see (None: every one)."""


@dataclass(frozen=True)
class Notice:
    """The outcome of an action, shown on top of the page it led to."""

    ok: bool
    text: str


def layout(title: str, body: str, viewer: Viewer | None, notice: Notice | None = None) -> str:
    who = token = ""
    if viewer is not None:
        token = (
            f'<meta name="csrf-token" content="{esc(viewer.csrf)}">'
            f'<meta name="inbox-user" content="{esc(viewer.user)}">'
        )
        tenants = "all tenants" if viewer.tenants is None else ", ".join(viewer.tenants) or "none"
        who = f'<span class="who">{esc(viewer.user)} · {esc(tenants)}</span>'
    shown = ""
    if notice is not None:
        kind = "ok" if notice.ok else "refused"
        shown = f'<p class="notice {kind}" id="notice" role="status">{esc(notice.text)}</p>'
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · agentloop inbox</title>{token}"
        '<link rel="stylesheet" href="/static/inbox.css">'
        '<script src="/static/inbox.js" defer></script></head><body>'
        '<nav><a href="/">Inbox</a> <a href="/runs">Runs</a> ' + who + "</nav>"
        f"<main><h1>{esc(title)}</h1>{shown}{body}</main></body></html>"
    )


def csrf_field(viewer: Viewer) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(viewer.csrf)}">'


# --- the inbox ------------------------------------------------------------------------------


def inbox_page(
    viewer: Viewer, items: list[WaitingItem], filters: dict[str, str], now: datetime
) -> str:
    tools = sorted({i.tool for i in items if i.tool})
    tenants = sorted({i.tenant for i in items})
    kinds = "".join(
        f'<option value="{k}"{selected(filters, "kind", k)}>{esc(name)}</option>'
        for k, name in KIND_NAMES.items()
    )
    form = (
        '<form method="get" action="/" class="filters" id="filters">'
        f'<label>kind <select name="kind"><option value="">any</option>{kinds}</select></label>'
        f"{text_filter('tool', filters, tools)}{text_filter('tenant', filters, tenants)}"
        '<button type="submit">Filter</button></form>'
    )
    shown = filtered(items, filters)
    rows = "".join(item_row(i, now) for i in shown)
    return layout(
        "Inbox",
        form
        + f'<p id="counts">{esc(counts_text(shown))}</p>'
        + '<table id="inbox" data-poll="/api/inbox?'
        + esc(urlencode({k: v for k, v in filters.items() if v}))
        + '"><thead><tr><th>waiting</th><th>kind</th><th>run</th><th>task</th><th>tool</th>'
        "<th>who may decide</th><th>tenant</th><th>asks</th><th>times out</th></tr></thead>"
        f'<tbody id="items">{rows}</tbody></table>',
        viewer,
    )


def selected(filters: dict[str, str], name: str, value: str) -> str:
    return " selected" if filters.get(name) == value else ""


def text_filter(name: str, filters: dict[str, str], known: list[str]) -> str:
    options = "".join(f'<option value="{esc(v)}">' for v in known)
    return (
        f'<label>{name} <input name="{name}" value="{esc(filters.get(name, ""))}" '
        f'list="{name}-list"></label><datalist id="{name}-list">{options}</datalist>'
    )


def filtered(items: list[WaitingItem], filters: dict[str, str]) -> list[WaitingItem]:
    return [
        i
        for i in items
        if all(
            not filters.get(name) or getattr(i, name) == filters[name]
            for name in ("kind", "tool", "tenant")
        )
    ]


def counts_text(items: list[WaitingItem]) -> str:
    counts = {k: sum(1 for i in items if i.kind == k) for k in KIND_NAMES}
    parts = [f"{n} {KIND_NAMES[k]}{'s' if n != 1 else ''}" for k, n in counts.items()]
    return f"{len(items)} waiting: " + ", ".join(parts)


def item_row(item: WaitingItem, now: datetime) -> str:
    cells = [
        esc(item.waited(now)),
        esc(KIND_NAMES[item.kind]),
        f'<a href="{esc(run_path(item.workflow_id))}">{esc(item.workflow_id)}</a>',
        esc(item.task),
        esc(item.tool),
        esc(", ".join(item.approvers) or ("anyone" if item.kind == "approval" else "")),
        esc(item.tenant),
        esc(item.text),
        esc(item.times_out(now)),
    ]
    return f'<tr class="item {item.kind}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


# --- recent runs ----------------------------------------------------------------------------


def runs_page(viewer: Viewer, runs: list[RecentRun]) -> str:
    rows = "".join(
        f'<tr><td><a href="{esc(run_path(r.workflow_id))}">{esc(r.workflow_id)}</a></td>'
        f'<td class="status {esc(r.status)}">{esc(r.status)}</td><td>{esc(r.phase)}</td>'
        f"<td>{esc(r.tenant)}</td>"
        f"<td>{esc(r.started.isoformat(timespec='seconds') if r.started else '')}</td></tr>"
        for r in runs
    )
    return layout(
        "Runs",
        '<table id="runs"><thead><tr><th>run</th><th>status</th><th>phase</th><th>tenant</th>'
        f"<th>started</th></tr></thead><tbody>{rows}</tbody></table>",
        viewer,
    )


# --- one run --------------------------------------------------------------------------------


def run_page(viewer: Viewer, story: RunStory, now: datetime, notice: Notice | None) -> str:
    parts = [
        '<dl class="facts">',
        fact("run", story.workflow_id),
        fact("execution", story.execution),
        fact("tenant", story.tenant),
        fact("subject", (story.run_input.get("principal") or {}).get("subject", "")),
        fact("model", f"{story.run_input.get('provider', '')} {story.run_input.get('model', '')}"),
        "</dl>",
        f'<h2>Task</h2><pre class="task" id="task">{esc(story.run_input.get("task", ""))}</pre>',
    ]
    view, result = story.view, story.result
    if story.failure:
        parts.append(f'<p class="failure" id="failure">{esc(story.failure)}</p>')
    if view is not None:
        parts.append(f'<p id="phase">phase: <b>{esc(view.phase)}</b> · turn {view.turn}</p>')
        if view.notice_failures:
            failures = "".join(f"<li>{esc(f)}</li>" for f in view.notice_failures)
            parts.append(f'<ul class="notice refused" id="notice-failures">{failures}</ul>')
        parts.append(waiting_forms(viewer, story.workflow_id, view, now))
        parts.append(live_section(story.workflow_id))
        parts.append(usage_section(view.usage, view.limits_left))
        parts.append(calls_section(view.calls))
        parts.append(task_state_section(view.task_state))
        parts.append(cancel_form(viewer, story.workflow_id))
    if result is not None:
        parts.append(
            f'<p id="outcome">status: <b class="status {esc(result.status)}">'
            f"{esc(result.status)}</b> · {esc(result.stop_reason)}</p>"
        )
        if result.output is not None:
            output = result.output if isinstance(result.output, str) else pretty(result.output)
            parts.append(f'<h2>Answer</h2><pre id="output">{esc(output)}</pre>')
        parts.append(usage_section(result.usage, None))
        parts.append(calls_section(result.calls))
        parts.append(task_state_section(result.task_state))
    return layout(f"Run {story.workflow_id}", "".join(parts), viewer, notice)


def fact(name: str, value: Any) -> str:
    return f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>"


def live_section(workflow_id: str) -> str:
    """Where the script shows the run's stream as it comes (`inbox.live`): the model's text,
    the calls proposed and their outcomes, the waits. Display only: what a person decides on
    is in the sections the server renders from `status`."""
    events = "/api" + run_path(workflow_id) + "/events"
    return (
        f'<section id="live" data-events="{esc(events)}"><h2>As it happens</h2>'
        '<p id="live-status">connecting…</p><ol id="live-log"></ol></section>'
    )


def waiting_forms(viewer: Viewer, workflow_id: str, view: RunStatusView, now: datetime) -> str:
    if view.phase not in WAITING_PHASES and not view.pending_approvals:
        return ""
    action = esc(run_path(workflow_id))
    signed = view.approval_signing == "signed" and bool(view.pending_approvals)
    parts = ['<section id="waiting"><h2>Waiting for a person</h2>']
    if signed:
        parts.append(signing_key_section(viewer))
    sign = f' data-sign="{action}/signing-message"' if signed else ""
    for pending in view.pending_approvals:
        approvers = pending.approvers
        may = not approvers or viewer.user in approvers
        call_id, digest = pending.call_id, pending.args_digest
        parts.append(
            f'<div class="approval" data-call="{esc(call_id)}">'
            f"<h3>Approve {esc(pending.tool)} ({esc(call_id)})?</h3>"
            f'<pre class="arguments">{esc(pretty(pending.arguments))}</pre>'
            f"<p>arguments digest <code>{esc(digest)}</code> · who may decide: "
            f"{esc(', '.join(approvers) or 'anyone')} · signing: "
            f"{esc(view.approval_signing or 'unsigned')}</p>"
        )
        if may:
            parts.append(
                f'<form method="post" action="{action}/decide" class="decide"{sign}>'
                f"{csrf_field(viewer)}"
                f'<input type="hidden" name="call_id" value="{esc(call_id)}">'
                f'<input type="hidden" name="args_digest" value="{esc(digest)}">'
                '<label>reason <input name="reason" maxlength="4000"></label> '
                '<button name="verdict" value="approve" type="submit">Approve</button> '
                '<button name="verdict" value="reject" type="submit">Reject</button></form>'
            )
        else:
            parts.append(f"<p>{esc(viewer.user)} may not decide this call.</p>")
        parts.append("</div>")
    if view.question is not None:
        parts.append(
            f'<div class="question"><h3>Question</h3><pre>{esc(view.question)}</pre>'
            f'<form method="post" action="{action}/answer">{csrf_field(viewer)}'
            '<label>answer <textarea name="text" required maxlength="100000"></textarea>'
            '</label> <button type="submit">Answer</button></form></div>'
        )
    for unknown in view.unresolved:
        call_id = unknown.call_id
        parts.append(
            f'<div class="unresolved" data-call="{esc(call_id)}">'
            f"<h3>Did {esc(unknown.tool)} ({esc(call_id)}) happen?</h3>"
            f'<pre class="arguments">{esc(pretty(unknown.arguments))}</pre>'
            f"<p>{esc(unknown.known)} · idempotency key "
            f"<code>{esc(unknown.idempotency_key)}</code></p>"
            f'<form method="post" action="{action}/resolve">{csrf_field(viewer)}'
            f'<input type="hidden" name="call_id" value="{esc(call_id)}">'
            '<label>note <input name="note" maxlength="4000"></label> '
            '<button name="outcome" value="applied" type="submit">Applied</button> '
            '<button name="outcome" value="not_applied" type="submit">Not applied</button>'
            "</form></div>"
        )
    parts.append("</section>")
    return "".join(parts)


def signing_key_section(viewer: Viewer) -> str:
    """Signed mode: the approver's key is imported into this browser (not extractable, kept in
    IndexedDB) by the script; the file never leaves the browser, the inbox never holds it."""
    return (
        '<div id="signing-key"><p>The workers take only signed decisions: each is signed in'
        f" this browser with {esc(viewer.user)}'s key (the PEM file of `agentloop keys new"
        f" {esc(viewer.user)}`).</p>"
        '<label>key file <input type="file" id="key-file" accept=".pem"></label> '
        '<span id="key-status"></span>'
        '<p class="notice refused" id="sign-problem" hidden></p></div>'
    )


def usage_section(usage: Usage, left: Any) -> str:
    rows = [
        ("model calls", usage.model_calls, left.model_calls if left else None),
        ("tool calls", usage.tool_calls, left.tool_calls if left else None),
        ("input tokens", usage.input_tokens, None),
        ("output tokens", usage.output_tokens, None),
        ("total tokens", usage.input_tokens + usage.output_tokens, left and left.total_tokens),
        ("cost (USD)", f"{usage.cost_usd:.4f}", left and left.cost_usd),
    ]
    body = "".join(
        f"<tr><td>{esc(name)}</td><td>{esc(used)}</td>"
        f"<td>{'' if rest is None else esc(rest)}</td></tr>"
        for name, used, rest in rows
    )
    seconds = f"<p>seconds left: {esc(round(left.seconds))}</p>" if left and left.seconds else ""
    return (
        '<h2>Usage</h2><table id="usage"><thead><tr><th></th><th>used</th><th>left</th></tr>'
        f"</thead><tbody>{body}</tbody></table>{seconds}"
    )


def calls_section(calls: list[CallRecord]) -> str:
    if not calls:
        return "<h2>Calls</h2><p>none yet</p>"
    rows = "".join(
        f'<tr class="call" data-call="{esc(c.call_id)}"><td>{c.turn}</td>'
        f"<td>{esc(c.call_id)}</td><td>{esc(c.tool)}</td>"
        f'<td><pre class="arguments">{esc(pretty(c.arguments))}</pre></td>'
        f'<td class="call-status">{esc(c.status)}</td><td class="decision">{esc(c.decision)}</td>'
        f"<td>{esc(c.result_summary)}</td></tr>"
        for c in calls
    )
    return (
        '<h2>Calls</h2><table id="calls"><thead><tr><th>turn</th><th>call</th><th>tool</th>'
        "<th>arguments</th><th>status</th><th>decision</th><th>result (summary)</th></tr>"
        f"</thead><tbody>{rows}</tbody></table>"
    )


def task_state_section(task_state: dict[str, Any]) -> str:
    if not task_state:
        return ""
    return f'<h2>Task state</h2><pre id="task-state">{esc(pretty(task_state))}</pre>'


def cancel_form(viewer: Viewer, workflow_id: str) -> str:
    return (
        f'<form method="post" action="{esc(run_path(workflow_id))}/cancel" class="cancel">'
        f'{csrf_field(viewer)}<label>reason <input name="reason" maxlength="4000"></label> '
        '<button type="submit">Cancel run</button></form>'
    )


# --- who is acting (local mode) ---------------------------------------------------------------


def name_page(csrf: str, problem: str = "") -> str:
    said = f'<p class="notice refused">{esc(problem)}</p>' if problem else ""
    return layout(
        "Who are you?",
        f"{said}<p>The inbox runs in local mode: decisions are recorded under the name you"
        " give (once per browser).</p>"
        f'<form method="post" action="/whoami"><input type="hidden" name="csrf" '
        f'value="{esc(csrf)}"><label>name <input name="name" required maxlength="200" '
        'pattern="[A-Za-z0-9_.@\\-]+"></label> <button type="submit">Continue</button></form>',
        None,
    )


def error_page(viewer: Viewer | None, title: str, text: str) -> str:
    return layout(title, f'<p class="notice refused" id="notice">{esc(text)}</p>', viewer)
