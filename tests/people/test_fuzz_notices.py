"""Generated webhook receivers for `notify_waiting` (issue 45, part 7): several webhooks a
notice goes to at once, each on a local server (127.0.0.1) that answers 2xx (with any body:
none, huge, endless, cut short, its head dripped), redirects to another local server, hangs,
drips its answer slower than the delivery waits, answers 4xx or 5xx, answers garbage (bad
status lines, a header too long), closes at once, or is not there at all.

A healthy receiver gets the notice exactly once, signed, on its first attempt; a redirect's
target gets nothing; every other receiver is told at most the delivery's attempts (once when
its answer says another attempt will not do better) and is named in the failure by host only:
nothing of any URL's path, query or credentials appears in the failure, the log or the
heartbeats. A run whose webhooks are such a mix still waits for its approval and completes
after it. A short slice runs in CI, thousands of receivers under `make fuzz`; a failure names
the seed that reproduces it (`tests.fuzzing`)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import io
import random
import socket
import string
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentloop.activities.notices import SIGNATURE_HEADER, NoticeActivities
from agentloop.activity_io import NOTICE_NOT_DELIVERED, DeliveryPolicy, NoticeCall, WaitingNotice
from agentloop.runtime.config import Settings
from agentloop.runtime.notice_routes import Webhook
from agentloop.worker import running_worker
from tests.fuzzing import SEED, case_rng, cases
from tests.live import Servers
from tests.loop.test_fuzz_signals import failed_tasks
from tests.people.test_inbox_notices import (
    INBOX_URL,
    SECRET,
    approved_to_completion,
    booking,
    notifying,
)
from tests.people.test_notice_delivery import worker_log  # noqa: F401 (a fixture)
from tests.support import start_run, wait_for_phase, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fuzz]

QUICK = DeliveryPolicy(timeout_seconds=3, attempts=3, first_backoff_seconds=0.05)
"""The delivery of the activity-alone cases: short enough for thousands of receivers, long
enough for a healthy one on a busy machine."""
CONCURRENT = 16
MOST_BYTES = 8 * 1024 * 1024
"""The most a receiver writes of a huge or endless answer (its sender stops reading first)."""
Outcome = Literal["delivered", "final", "retried", "failed"]
"""What a receiver's answers make of its delivery: taken at once; refused for good at once;
tried every attempt; not taken after one attempt or more (garbage)."""
Answer = Callable[["Receivers", asyncio.StreamWriter, random.Random], Awaitable[None]]


def status_line(code: int) -> bytes:
    return b"HTTP/1.1 %d Whatever\r\n" % code


async def healthy(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    kind = rng.choice([b"application/json", b"text/html", b"application/octet-stream", b"\xff"])
    code = rng.choice([200, 201, 202, 204, 299])
    body = rng.choice([b"", b"ok", rng.randbytes(300)]) if code != 204 else b""
    writer.write(
        status_line(code)
        + b"Content-Type: "
        + kind
        + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        + body
    )


async def huge_body(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    writer.write(status_line(200) + b"Content-Length: 50000000\r\n\r\n")
    await write_until_stopped(writer, b"h" * 65_536)


async def endless_chunks(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    writer.write(status_line(200) + b"Transfer-Encoding: chunked\r\n\r\n")
    await write_until_stopped(writer, b"10000\r\n" + b"c" * 65_536 + b"\r\n")


async def write_until_stopped(writer: asyncio.StreamWriter, chunk: bytes) -> None:
    with contextlib.suppress(ConnectionError):
        for _ in range(MOST_BYTES // len(chunk)):
            writer.write(chunk)
            await writer.drain()


async def cut_short(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    writer.write(status_line(200) + b"Content-Length: 1000\r\n\r\n" + b"x" * 10)


async def head_dripped(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    answer = status_line(200) + b"Content-Length: 0\r\nConnection: close\r\n\r\n"
    for at in range(0, len(answer), 8):  # well within the delivery's timeout
        writer.write(answer[at : at + 8])
        await writer.drain()
        await asyncio.sleep(0.01)


async def redirect(hooks: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    where = rng.choice([hooks.target_url.encode(), b"/elsewhere", hooks.target_url.encode()])
    code = rng.choice([301, 302, 303, 307, 308])
    writer.write(status_line(code) + b"Location: " + where + b"\r\nContent-Length: 0\r\n\r\n")


async def hang(hooks: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    await hooks.release.wait()


async def drip_slowly(hooks: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    """Its status line a byte at a time, slower than the delivery waits for the answer."""
    with contextlib.suppress(ConnectionError):
        for byte in status_line(200):
            writer.write(bytes([byte]))
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hooks.release.wait(), QUICK.timeout_seconds / 3)


def plain_status(*codes: int) -> Answer:
    """A receiver answering one of `codes`, and nothing else."""

    async def answer(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
        code = rng.choice(codes)
        writer.write(status_line(code) + b"Content-Length: 0\r\nConnection: close\r\n\r\n")

    return answer


async def garbage(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    writer.write(
        rng.choice(
            [
                b"HTTP/1.1 abc OK\r\n\r\n",
                b"HELLO\r\n\r\n",
                b"HTTP/1.1 20 OK\r\n\r\n",
                b"HTTP/9.9\r\n\r\n",
                b"\x00\xff\xfe" + rng.randbytes(100),
                status_line(200) + b"X-Big: " + b"b" * 100_000 + b"\r\n\r\n",
                status_line(200) + b"Bad Header Without Colon\r\n\r\n",
                status_line(204) + b"Content-Length: 3\r\n\r\nabc",  # no body may follow
            ]
        )
    )


async def close_at_once(_: Receivers, writer: asyncio.StreamWriter, rng: random.Random) -> None:
    pass


BEHAVIOURS: dict[str, tuple[Answer, Outcome]] = {
    "healthy": (healthy, "delivered"),
    "huge body": (huge_body, "delivered"),
    "endless chunks": (endless_chunks, "delivered"),
    "cut short": (cut_short, "delivered"),
    "head dripped": (head_dripped, "delivered"),
    "redirect": (redirect, "final"),
    "refuse": (plain_status(400, 401, 403, 404, 410, 413, 422, 451, 499), "final"),
    "hang": (hang, "retried"),
    "drip slowly": (drip_slowly, "retried"),
    "retry later": (plain_status(500, 502, 503, 599, 408, 425, 429), "retried"),
    "close at once": (close_at_once, "retried"),
    "garbage": (garbage, "failed"),
    "not there": (close_at_once, "retried"),
}


@dataclass
class Receivers:
    """One local server whose every path is a receiver of its own (its behaviour and its
    generator), and the redirects' target on another, which must never be reached."""

    port: int = 0
    target_url: str = ""
    target_hits: int = 0
    closed_port: int = 0
    """A port nothing listens on: the receivers that are not there."""
    paths: dict[str, tuple[str, random.Random]] = field(default_factory=dict)
    bodies: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=lambda: defaultdict(list))
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, rng: random.Random, behaviour: str) -> tuple[str, list[str]]:
        """A new receiver's URL, and the secrets in it (path segments, query, credentials)."""
        secrets = ["".join(rng.choices(string.ascii_letters, k=12)) for _ in range(4)]
        path = f"/{secrets[0]}/{secrets[1]}"
        self.paths[path] = (behaviour, rng)
        port = self.closed_port if behaviour == "not there" else self.port
        credentials = f"{secrets[3]}:{secrets[3][::-1]}@" if rng.random() < 0.2 else ""
        if not credentials:
            secrets.pop()
        return f"http://{credentials}127.0.0.1:{port}{path}?token={secrets[2]}", secrets

    def told(self, path: str) -> int:
        return len(self.bodies[path])

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            body = await reader.readexactly(length)
            path = target.split("?", 1)[0]
            if path not in self.paths:  # where a redirect points: never to be reached
                self.target_hits += 1
                return
            self.bodies[path].append((head, body))
            behaviour, rng = self.paths[path]
            await BEHAVIOURS[behaviour][0](self, writer, rng)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the sender gave up on it
        finally:
            writer.close()

    async def target(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.target_hits += 1
        writer.close()


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    receivers = Receivers()
    hooks = await asyncio.start_server(receivers.serve, "127.0.0.1", 0)
    target = await asyncio.start_server(receivers.target, "127.0.0.1", 0)
    receivers.port = hooks.sockets[0].getsockname()[1]
    receivers.target_url = f"http://127.0.0.1:{target.sockets[0].getsockname()[1]}/internal"
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        receivers.closed_port = unused.getsockname()[1]
    yield receivers
    receivers.release.set()
    for server in (hooks, target):
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 10)


@dataclass(frozen=True)
class Generated:
    """One case: webhooks of generated behaviours, by path, and every secret in their URLs."""

    webhooks: list[Webhook]
    behaviours: dict[str, str]
    """Webhook name -> the behaviour of its receiver."""
    paths: dict[str, str]
    """Webhook name -> its path on the receivers' server."""
    secrets: list[str]


def generated(receivers: Receivers, rng: random.Random, most: int = 5) -> Generated:
    webhooks, behaviours, paths, secrets = [], {}, {}, []
    for n in range(1, rng.randint(1, most) + 1):
        behaviour = rng.choice(sorted(BEHAVIOURS))
        url, in_url = receivers.add(rng, behaviour)
        name = f"webhook {n}"
        webhooks.append(Webhook(name=name, url=url))
        behaviours[name] = behaviour
        paths[name] = "/" + "/".join(in_url[:2])
        secrets += in_url
    return Generated(webhooks, behaviours, paths, secrets)


def notice(case: str) -> WaitingNotice:
    return WaitingNotice(
        workflow_id=f"fuzz/{case}",
        kind="approval",
        calls=[NoticeCall(call_id="c_res", tool="reserve_seat", approvers=["workshop-lead"])],
        tenant="default",
    )


def check_signed(head: bytes, body: bytes) -> None:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    sent = [
        line.split(b":", 1)[1].strip().decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(SIGNATURE_HEADER.lower().encode() + b":")
    ]
    assert sent == [expected]


async def deliver(receivers: Receivers, case: str) -> tuple[Generated, str | None, list[Any]]:
    """Runs `notify_waiting` alone for one generated case: the case, the failure it raised
    (None: it returned) and its heartbeats."""
    made = generated(receivers, case_rng(case))
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    activities = NoticeActivities(made.webhooks, SECRET, INBOX_URL, QUICK)
    try:
        await env.run(activities.notify_waiting, notice(case))
    except ApplicationError as failed:
        assert failed.type == NOTICE_NOT_DELIVERED and failed.non_retryable, (SEED, case, failed)
        return made, str(failed), beats
    return made, None, beats


def check_case(receivers: Receivers, case: str, made: Generated, failure: str | None) -> None:
    said = (SEED, case, made.behaviours, failure)
    for webhook in made.webhooks:
        behaviour = made.behaviours[webhook.name]
        outcome = BEHAVIOURS[behaviour][1]
        told = receivers.told(made.paths[webhook.name])
        named = failure is not None and f"{webhook.label} " in failure
        if outcome == "delivered":
            assert told == 1 and not named, (webhook.name, told, *said)
            [(head, body)] = receivers.bodies[made.paths[webhook.name]]
            check_signed(head, body)
        elif behaviour == "not there":
            assert told == 0 and named, (webhook.name, *said)
        else:
            most = {"final": 1, "retried": QUICK.attempts, "failed": QUICK.attempts}[outcome]
            least = most if outcome != "failed" else 1
            assert least <= told <= most and named, (webhook.name, told, *said)
    delivered = all(BEHAVIOURS[b][1] == "delivered" for b in made.behaviours.values())
    assert (failure is None) == delivered, said


async def test_generated_receivers_each_get_the_notice_as_their_answers_deserve(
    receivers: Receivers,
    worker_log: io.StringIO,  # noqa: F811
) -> None:
    gate = asyncio.Semaphore(CONCURRENT)
    seen: Counter[str] = Counter()

    async def one(n: int) -> None:
        case = f"notice/{n}"
        async with gate:
            made, failure, beats = await deliver(receivers, case)
        check_case(receivers, case, made, failure)
        shown = f"{failure} {beats}"
        for secret in made.secrets:
            assert secret not in shown, (SEED, case, secret, shown[:500])
        last = beats[-1][0] if beats else {}
        for name, behaviour in made.behaviours.items():
            seen[behaviour] += 1
            if BEHAVIOURS[behaviour][1] == "delivered":
                assert last[name]["attempts"] == 1 and last[name]["delivered"], (SEED, case)

    await asyncio.gather(*(one(n) for n in range(cases(short=16, long=1_500))))
    print(f"seed {SEED}: receivers by behaviour: {dict(seen)}")
    assert receivers.target_hits == 0, SEED
    log = worker_log.getvalue()
    assert '"notice.webhook"' in log
    for path in receivers.paths:
        for segment in path.strip("/").split("/"):
            assert segment not in log, (SEED, segment)


@pytest.mark.usefixtures("clean_fakes")
async def test_a_run_notifying_generated_receivers_still_waits_and_completes_after_approval(
    servers: Servers, worker_settings: Settings, receivers: Receivers, run_id: str
) -> None:
    for n in range(cases(short=1, long=10)):
        servers.service.reset()  # each run books the same seat
        rng = case_rng(f"notified run/{n}")
        made = generated(receivers, rng, most=6)
        healthy_ones = [
            made.paths[name]
            for name, behaviour in made.behaviours.items()
            if BEHAVIOURS[behaviour][1] == "delivered"
        ]
        workflow_id = f"{run_id}-{n}"
        settings = notifying(worker_settings, workflow_id, *(w.url for w in made.webhooks))
        async with running_worker(servers.client, settings):
            handle = await start_run(
                servers.client, settings, workflow_id, booking(servers.provider, workflow_id)
            )
            view = await wait_for_phase(handle, "awaiting_approval", seconds=60)
            await wait_until(
                lambda paths=healthy_ones: all(receivers.told(path) for path in paths),
                f"the healthy receivers' notices (seed {SEED}, {made.behaviours})",
                seconds=60,
            )
            view = await wait_for_phase(handle, "awaiting_approval")
            await approved_to_completion(handle, view)
        assert [receivers.told(path) for path in healthy_ones] == [1] * len(healthy_ones)
        for failure in view.notice_failures:
            assert not any(secret in failure for secret in made.secrets), (SEED, failure)
        first = handle.result_run_id or handle.run_id
        assert first is not None
        assert await failed_tasks(servers.client, workflow_id, first) == [], SEED
    assert receivers.target_hits == 0, SEED
