"""The `agentloop` command's arguments: every command, its options and its help."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

from agentloop.cli.output import exit_codes_help
from agentloop.operations.schedules import DEFAULT_CATCHUP_WINDOW, OVERLAPS

DESCRIPTION = "The `agentloop` command: a dev stack, a worker, and the client side of runs."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentloop",
        description=DESCRIPTION,
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    dev = commands.add_parser(
        "dev",
        help="run Temporal dev server + UI, example service, "
        "scripted provider and a worker until Ctrl-C",
    )
    dev.add_argument("--port", type=port_number, default=7233, help="Temporal frontend port")
    dev.add_argument("--ui-port", type=port_number, default=8233)
    dev.add_argument("--example-port", type=port_number, default=8787)
    dev.add_argument("--provider-port", type=port_number, default=8788)
    dev.add_argument(
        "--metrics-port",
        type=port_number,
        default=9464,
        help="the worker's Prometheus metrics (/metrics; printed as the stack starts)",
    )
    dev.add_argument(
        "--inbox-port",
        type=port_number,
        default=8300,
        help="the inbox's port (on 127.0.0.1, local mode)",
    )
    dev.add_argument("--state-dir", type=Path, default=Path(".agentloop"))
    dev.add_argument(
        "--persist",
        action="store_true",
        help="keep workflow history across restarts (in STATE_DIR/temporal.db)",
    )
    dev.add_argument(
        "--scripts",
        type=Path,
        metavar="DIR",
        help="script files (*.json, *.toml) the scripted provider plays beside its built-in"
        " ones, each named after its file; read again on change (default: AGENTLOOP_SCRIPTS_DIR)",
    )
    add_tools_option(dev, "beside the example tools")

    scripts = commands.add_parser("scripts", help="the scripted provider's script files")
    scripts_commands = scripts.add_subparsers(dest="scripts_command", required=True)
    check = scripts_commands.add_parser(
        "check",
        help="check script files (*.json, *.toml) or folders of them: unknown keys, wrong"
        " types, syntax, each with its file and line (exit 1 on any problem)",
    )
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    add_json_flag(check, "print the scripts and the problems as a JSON object")

    worker = commands.add_parser("worker", help="run a worker (configuration from the environment)")
    add_tools_option(worker, "beside the built-ins, after AGENTLOOP_TOOLS")

    mcp = commands.add_parser("mcp", help="the tools this worker's MCP servers would offer")
    mcp_commands = mcp.add_subparsers(dest="mcp_command", required=True)
    mcp_list = mcp_commands.add_parser(
        "list", help="list the servers' tools now: each one's name, effect and why"
    )
    mcp_list.add_argument("server", nargs="?", help="one server (default: every one)")
    add_json_flag(mcp_list)

    store = commands.add_parser("store", help="the transcript and artifact store")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    seal = store_commands.add_parser(
        "seal",
        help="seal every row written before AGENTLOOP_CODEC_KEYS was set under its active key"
        " (once; safe to run again, and while workers run)",
    )
    add_json_flag(seal, "print the counts as a JSON object")

    config = commands.add_parser(
        "config",
        help="check the configuration and print each setting, where it came from "
        "(env, file, default), secrets masked",
    )
    add_json_flag(config)

    run = run_parser(commands, "run", help="start an agent run and print its id and UI link")
    run.add_argument("task")
    add_run_input_options(run)
    run.add_argument("--id", help="workflow id (default: a new one)")

    add_schedule_commands(commands)

    stats = commands.add_parser(
        "stats",
        help="what a task family's finished runs used, and the limits they suggest",
    )
    stats.add_argument("family")
    stats.add_argument("--limit", type=int, default=1_000, help="read at most this many runs")
    add_json_flag(stats)

    lister = commands.add_parser(
        "list",
        help="find runs by phase, status, provider, tenant; a running run whose workflow task "
        "keeps failing is marked WEDGED with the error",
    )
    lister.add_argument("--awaiting-approval", action="store_true")
    lister.add_argument("--phase")
    lister.add_argument("--status", help="completed, limit_reached, ... or running")
    lister.add_argument("--provider")
    lister.add_argument("--tenant")
    lister.add_argument("--limit", type=int, default=50)
    add_json_flag(lister)

    status = commands.add_parser(
        "status",
        help="show where a run is, or its result; exits with the run's code",
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    status.add_argument("run_id")
    add_json_flag(status)

    watcher = commands.add_parser(
        "watch",
        help="what a run does as it happens: the model's text as it streams, each call and wait",
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    watcher.add_argument("run_id")
    watcher.add_argument(
        "--from", dest="from_offset", type=int, default=0, help="the offset to start from"
    )
    add_json_flag(watcher, "print each event as one JSON object per line")

    transcript = commands.add_parser(
        "transcript",
        help="print a run's full conversation from the store (AGENTLOOP_STORE_URL)",
    )
    transcript.add_argument("run_id")
    add_json_flag(transcript, "print the events as a JSON array")

    cancel = commands.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id")
    cancel.add_argument("--reason", default="")
    cancel.add_argument(
        "--by", default="", help="who asks (with --key: the name whose key signs the cancel)"
    )
    add_key_flag(cancel, "cancel", "--by")
    add_json_flag(cancel)

    message = commands.add_parser(
        "message", help="answer a run's question (awaiting_input), or tell it something"
    )
    message.add_argument("run_id")
    message.add_argument("--text", required=True)
    message.add_argument("--sender", required=True)
    add_key_flag(message, "message", "--sender")
    add_json_flag(message)

    for name, text in (("approve", "approve a pending call"), ("reject", "reject a pending call")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("run_id")
        sub.add_argument("call_id")
        sub.add_argument("--approver", required=True)
        sub.add_argument("--reason", default="")
        sub.add_argument(
            "--digest",
            help="the args digest you were shown (default: the one "
            "`status` shows now, after printing the arguments)",
        )
        sub.add_argument(
            "--key",
            help="sign the decision with this approver's private key (PEM, from `agentloop "
            "keys new`; default: $AGENTLOOP_APPROVER_KEY): needed when the workers have "
            "AGENTLOOP_APPROVER_KEYS",
        )
        if name == "reject":
            sub.add_argument(
                "--respond",
                default="",
                metavar="TEXT",
                help="respond instead: the call does not run, the model gets TEXT as its "
                "result and the run goes on (whatever the tool's on_reject)",
            )
        if name == "approve":
            sub.add_argument(
                "--set",
                action="append",
                default=[],
                metavar="NAME=VALUE",
                help="approve the call with this argument changed (repeatable; a VALUE that "
                'reads as JSON is that value: 450, true, "450"); the run checks the edited '
                "call again like the model's",
            )
            sub.add_argument(
                "--patch",
                metavar="JSON",
                help="approve the call with its arguments changed by this JSON merge patch "
                '(RFC 7386: {"amount": 450, "note": null}), applied before --set',
            )
        add_json_flag(sub)

    keys = commands.add_parser(
        "keys", help="key pairs for signed approvals (approvers) and signed starts (starters)"
    )
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    new_key = keys_commands.add_parser(
        "new",
        help="make an approver's (or starter's) key pair: the private key file and its public line",
    )
    new_key.add_argument("approver")
    new_key.add_argument("--dir", default=".", help="where NAME.pem is written (default: .)")
    add_json_flag(new_key, "print the public key and the file as a JSON object")
    show_key = keys_commands.add_parser("public", help="the public line of a private key file")
    show_key.add_argument("approver")
    show_key.add_argument("key_file")
    add_json_flag(show_key, "print the public key as a JSON object")
    inbox_key = keys_commands.add_parser(
        "inbox",
        help="the inbox's AGENTLOOP_INBOX_KEY, derived from the workers' AGENTLOOP_STREAM_KEY "
        "(it checks which runs a worker vouches for, and seals nothing on a run's stream)",
    )
    add_json_flag(inbox_key, "print the key as a JSON object")

    cont = run_parser(
        commands,
        "continue",
        help="start a new run on a finished run's transcript, with a new budget",
    )
    cont.add_argument("run_id")
    cont.add_argument("--task", default="Continue where you stopped.")
    cont.add_argument(
        "--max-model-calls",
        type=int,
        required=True,
        help="the model calls granted to the new run (never inherited)",
    )
    cont.add_argument("--max-tool-calls", type=int)
    cont.add_argument("--id", help="workflow id of the new run")

    resolve = commands.add_parser("resolve", help="say whether a write of unknown outcome happened")
    resolve.add_argument("run_id")
    resolve.add_argument("call_id")
    resolve.add_argument("--outcome", choices=["applied", "not_applied"], required=True)
    resolve.add_argument("--operator", required=True)
    resolve.add_argument("--note", default="")
    resolve.add_argument(
        "--key",
        help="sign the word with this operator's private key (PEM, from `agentloop keys new`; "
        "default: $AGENTLOOP_APPROVER_KEY): needed when the workers have "
        "AGENTLOOP_APPROVER_KEYS",
    )
    add_json_flag(resolve)

    history = commands.add_parser(
        "history", help="export a run's full history as JSON (what `replay` reads)"
    )
    history.add_argument("run_id")
    history.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write it here (default: stdout)"
    )
    add_json_flag(history, "with -o: say where it went as a JSON object")

    resetter = commands.add_parser(
        "reset",
        help="take a wedged run (its workflow task keeps failing) back to its last good "
        "workflow task: a new run of the same id goes on from there on today's workers",
    )
    resetter.add_argument("run_id")
    resetter.add_argument(
        "--to",
        type=int,
        metavar="EVENT_ID",
        help="reset to this WorkflowTaskCompleted event instead (see `history`); needed for "
        "a run that is not wedged",
    )
    resetter.add_argument("--reason", default="", help="recorded with the reset in history")
    add_json_flag(resetter)

    replay = commands.add_parser(
        "replay",
        help="replay exported histories against today's workflow code (no server needed)",
    )
    replay.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a history JSON file, or a folder: every *.json in it",
    )
    add_json_flag(replay, "print one JSON object per history, in an array")

    codec = commands.add_parser(
        "codec-server",
        help="serve the Temporal UI's remote codec endpoint (POST /decode, /encode) with the "
        "keys of AGENTLOOP_CODEC_KEYS, so the UI shows encrypted history decrypted",
    )
    codec.add_argument("--port", type=port_number, default=8081)
    codec.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default 127.0.0.1: whoever reaches it can decrypt)",
    )
    codec.add_argument(
        "--origin",
        action="append",
        dest="origins",
        metavar="URL",
        help="the UI origin a browser may call it from (repeat; default http://localhost:8233 "
        "and http://127.0.0.1:8233)",
    )
    inbox = commands.add_parser(
        "inbox",
        help="serve the inbox: a web page listing the approvals, questions and unknown "
        "writes runs wait on, and answering them",
    )
    inbox.add_argument("--port", type=port_number, default=8300)
    inbox.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default 127.0.0.1; any other needs --auth-header)",
    )
    inbox.add_argument(
        "--auth-header",
        metavar="HEADER",
        help="take the user from this request header, set by an authenticating proxy in "
        "front (without it: local mode, a name typed once per browser, 127.0.0.1 only)",
    )
    return parser


def add_run_input_options(parser: argparse.ArgumentParser) -> None:
    """What a run is started with (`run`, `schedule create`: `starting.build_run_input`)."""
    parser.add_argument("--provider", default="openai-chat")
    parser.add_argument(
        "--model",
        help="the model; with the scripted provider (no API key), the script it plays"
        " (built in: travel, travel_booking, refunds; or a file of `agentloop dev --scripts"
        " DIR`)",
    )
    parser.add_argument(
        "--tool", action="append", default=[], dest="tools", help="allow this tool (repeat)"
    )
    parser.add_argument(
        "--fallback",
        action="append",
        default=[],
        dest="fallbacks",
        metavar="PROVIDER:MODEL",
        help="a model to go on with when the model is unavailable after its retries, in order"
        " (repeat), e.g. anthropic:claude-sonnet-4-5",
    )
    parser.add_argument("--instructions", default="")
    parser.add_argument("--subject", default="cli-user")
    parser.add_argument("--tenant", default="default", help="the principal's tenant")
    parser.add_argument("--scope", action="append", default=[], dest="scopes")
    parser.add_argument("--max-model-calls", type=int)
    parser.add_argument("--max-tool-calls", type=int)
    parser.add_argument("--no-stream", action="store_true")
    parser.add_argument(
        "--compensate",
        choices=["never", "ask", "always"],
        help="if the run does not deliver, what becomes of its writes that declared an undo:"
        " leave them, undo each once a person approves (default: ask), or undo each",
    )
    parser.add_argument("--family", help="the run's task family (indexed as AgentTaskFamily)")
    parser.add_argument(
        "--require-verification",
        action="store_true",
        help="an answer no completion check accepted ends the run unverified (exit 7),"
        " never completed",
    )
    parser.add_argument(
        "--limits-from",
        metavar="FAMILY",
        help="take the limits FAMILY's finished runs suggest (see `stats`); "
        "--max-model-calls and --max-tool-calls still win",
    )
    parser.add_argument(
        "--no-index",
        dest="index",
        action="store_false",
        help="start without the search attributes (a namespace without them)",
    )


def add_schedule_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """`schedule create|list|pause|resume|trigger|delete` (`agentloop.operations.schedules`)."""
    schedule = commands.add_parser(
        "schedule", help="runs on a schedule (Temporal Schedules): create, list, pause, ..."
    )
    actions = schedule.add_subparsers(dest="schedule_command", required=True)
    create = actions.add_parser(
        "create",
        help="start a run of TASK at each time --cron or --every says (run id: NAME and the"
        " scheduled time; task family: --family, default NAME)",
    )
    create.add_argument("name")
    create.add_argument("task")
    add_run_input_options(create)
    create.add_argument(
        "--cron",
        action="append",
        default=[],
        metavar="EXPR",
        help='a cron expression, UTC ("0 7 * * *": 07:00 each day; repeatable)',
    )
    create.add_argument(
        "--every", type=duration, metavar="DURATION", help="an interval: 90s, 15m, 1h, 1d"
    )
    create.add_argument(
        "--overlap",
        choices=list(OVERLAPS),
        default="skip",
        help="a firing while the schedule's last run still runs: skip it (default), buffer"
        " it, cancel or terminate the running one, or allow both",
    )
    create.add_argument(
        "--catchup-window",
        type=duration,
        default=DEFAULT_CATCHUP_WINDOW,
        metavar="DURATION",
        help="a firing missed while Temporal was down still starts within this (default 1h)",
    )
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.add_argument("--note", default="", help="why it exists or is paused")
    add_json_flag(create, "print the schedule as a JSON object")
    lister = actions.add_parser("list", help="the schedules of agentloop runs")
    add_json_flag(lister)
    for name, text in (
        ("pause", "start no run until resumed (runs already started go on)"),
        ("resume", "start runs again"),
        ("trigger", "fire once now (the overlap policy applies)"),
        ("delete", "no more firings (its runs stay)"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("name")
        if name in ("pause", "resume"):
            action.add_argument("--note", default="")
        add_json_flag(action, "print what was done as a JSON object")


def duration(text: str) -> timedelta:
    """`90s`, `15m`, `1h`, `1d` or plain seconds (argparse names the option when it is not)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give e.g. 90s, 15m, 1h")
    return timedelta(seconds=seconds)


def run_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str
) -> argparse.ArgumentParser:
    """`run` and `continue`: both start a run, and may follow it to its end."""
    sub = commands.add_parser(
        name,
        help=help,
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument(
        "--follow",
        action="store_true",
        help="show progress until the run ends, then its result; exit with the run's code",
    )
    add_json_flag(sub, "print one JSON object: the run's id and UI link, or with --follow its end")
    sub.add_argument(
        "--key",
        help="sign the run's start (its whole input, for this id, once, within ten minutes) "
        "with this starter's private key (PEM, from `agentloop keys new`; default: "
        "$AGENTLOOP_STARTER_KEY): needed when the workers have AGENTLOOP_STARTER_KEYS",
    )
    return sub


def port_number(text: str) -> int:
    """A TCP port to listen on, 1 to 65535 (argparse names the option when it is not)."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give a number from 1 to 65535")
    return port


def add_tools_option(parser: argparse.ArgumentParser, where: str) -> None:
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help=f"a tool module to load {where} (repeatable; also comma-separated)",
    )


def add_json_flag(parser: argparse.ArgumentParser, text: str = "print it as JSON") -> None:
    parser.add_argument("--json", action="store_true", help=text + " (for scripts)")


def add_key_flag(parser: argparse.ArgumentParser, what: str, signer: str) -> None:
    parser.add_argument(
        "--key",
        help=f"sign the {what} with the private key of {signer} (PEM, from `agentloop keys "
        "new`; default: $AGENTLOOP_APPROVER_KEY): needed when the workers have "
        "AGENTLOOP_APPROVER_KEYS",
    )
