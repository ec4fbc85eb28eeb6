"""A plain Temporal worker, as another team would run one (in Python here; any SDK language
would do): it imports nothing of agentloop. It serves, on `TEAM_QUEUE`, the activity `book_seat`
(a write to the example service under the idempotency key it is given, heartbeating while it
waits) and `booking_outcome` (that write looked up by its key). agentloop's runs call them as
an activity tool (`agentloop.activity_tool`)."""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import quote

import aiohttp
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

SERVICE = os.environ["TEAM_SERVICE_URL"]
READY = "plain worker polling"


class BusinessRefusal(Exception):
    """The class name is the error type agentloop reads: the model is told, nothing happened."""


@activity.defn(name="book_seat")
async def book_seat(request: dict[str, Any]) -> dict[str, Any]:
    arguments, key = request["arguments"], request["idempotency_key"]
    url = f"{SERVICE}/workshops/{quote(arguments['workshop_id'])}/reservations"
    async with aiohttp.ClientSession() as session:
        sending = asyncio.ensure_future(
            session.post(
                url,
                json={"participant_id": arguments["participant_id"]},
                headers={"Idempotency-Key": key},
            )
        )
        while not sending.done():
            activity.heartbeat()
            await asyncio.wait([sending], timeout=0.5)
        response = sending.result()
        body = await response.json(content_type=None)
    if 400 <= response.status < 500:
        raise BusinessRefusal(body.get("error", {}).get("message", str(response.status)))
    response.raise_for_status()
    return {"booked": body, "served_by": "plain worker", "for": request["principal"]["subject"]}


@activity.defn(name="booking_outcome")
async def booking_outcome(request: dict[str, Any]) -> dict[str, Any]:
    url = f"{SERVICE}/workshops/operations/{quote(request['idempotency_key'], safe='')}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        if response.status == 404:
            return {"state": "not_applied"}
        body = await response.json(content_type=None)
    if body.get("state") == "applied":
        return {"state": "applied", "record": body.get("record")}
    if body.get("state") == "refused":  # refused under this key: a retry would be refused too
        return {"state": "not_applied", "record": body.get("error")}
    return {"state": "unknown"}


async def main() -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    worker = Worker(
        client, task_queue=os.environ["TEAM_QUEUE"], activities=[book_seat, booking_outcome]
    )
    async with worker:
        print(READY, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
