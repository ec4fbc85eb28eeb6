"""`agentloop watch RUN_ID`: what a run publishes, as it happens (`agentloop.watch`).

The model's text is printed as it streams; calls, results, waits and the end a line each.
With `--json`, one JSON object per event (a line each), as `agentloop.RunEvent` writes it.
The command exits with the run's code once the run's own `done` arrives (see `agentloop
--help`); what anyone else publishes to the stream, a `done` too, is never read as the run's
(`agentloop.watch`).
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from temporalio.client import Client

from agentloop.cli.output import RESULT_EXIT_CODES, ExitCode
from agentloop.run_client import watch
from agentloop.run_events import RunEvent

CALL_ARGUMENTS_SHOWN = 120
"""How much of a call's arguments a line shows (`status` and the transcript hold them)."""


async def watch_run(client: Client, run_id: str, from_offset: int, as_json: bool) -> int:
    printer = EventPrinter(sys.stdout)
    status: str | None = None
    async for event in watch(client, run_id, from_offset):
        if as_json:
            print(json.dumps(event.published(), ensure_ascii=False), flush=True)
        else:
            printer.show(event)
        if event.kind == "done":
            status = event.status
    printer.close()
    ended = (code for name, code in RESULT_EXIT_CODES.items() if name == status)
    return next(ended, ExitCode.RUNNING)


class EventPrinter:
    """Text as it comes (no line break inside it), every other event on a line of its own."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._in_text = False

    def show(self, event: RunEvent) -> None:
        if event.kind == "text":
            self._out.write(event.delta or "")
            self._out.flush()
            self._in_text = True
            return
        self.close()
        print(describe(event), file=self._out, flush=True)

    def close(self) -> None:
        """Ends the line of text being printed, if any."""
        if self._in_text:
            print(file=self._out, flush=True)
            self._in_text = False


def describe(event: RunEvent) -> str:
    match event.kind:
        case "call":
            arguments = json.dumps(event.arguments, ensure_ascii=False)
            if len(arguments) > CALL_ARGUMENTS_SHOWN:
                arguments = arguments[:CALL_ARGUMENTS_SHOWN] + "..."
            return f"-> {event.call_id} {event.tool} {arguments}"
        case "result":
            preview = (event.preview or "").replace("\n", " ")[:CALL_ARGUMENTS_SHOWN]
            return f"<- {event.call_id} {event.tool}: {event.status}  {preview}".rstrip()
        case "waiting":
            return f".. waiting for {event.reason}: {', '.join(event.call_ids or [])}"
        case "resumed":
            return f".. {event.reason} given: {', '.join(event.call_ids or [])}"
        case "retry":
            return (
                f"~~ turn {event.turn}: the model call is retried (attempt {event.attempt});"
                " its text so far is replaced"
            )
        case "fallback":
            return f"~~ {event.stop_reason}"
        case "continued":
            return "~~ continued as new"
        case "truncated":
            return f"~~ {event.stop_reason}"
        case "done":
            return f"== {event.status}: {event.stop_reason}"
        case _:
            return f"{event.kind}"
