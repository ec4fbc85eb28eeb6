"""The refunds team's system of record: orders and their refunds, over HTTP.

A stand-in for the real payments service, small enough to read: in memory, seeded with three
orders of two tenants. Every refund is made under the caller's `Idempotency-Key`, and the
outcome of a key can be asked for afterwards, which is what lets an agent that lost an answer
find out whether its refund happened instead of sending it again.

    GET  /orders/{order_id}             the order, or 404
    POST /refunds                       {"order_id", "amount"} + Idempotency-Key header
    GET  /refunds/operations/{key}      {"state": "applied", "record": {...}}, or 404
    GET  /_stats                        {"created": N}: refunds actually created

Standalone: `python refunds_service.py [--port 8790]` (runs until Ctrl-C).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

DEFAULT_PORT = 8790


@dataclass(frozen=True)
class Order:
    order_id: str
    tenant: str
    amount: float


@dataclass(frozen=True)
class Refund:
    refund_id: str
    order_id: str
    amount: float
    idempotency_key: str


SEED_ORDERS = (
    Order("A-17", tenant="acme", amount=40.0),
    Order("A-18", tenant="acme", amount=250.0),
    Order("G-9", tenant="globex", amount=30.0),
)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


class RefundsService:
    """The service on a real socket, run in-process by the tests (or by `__main__`).

    Handlers never await between checking and committing a refund, so requests on the one
    event loop cannot interleave inside a write: no lock is needed."""

    def __init__(self) -> None:
        self.orders: dict[str, Order] = {}
        self.refunds: dict[str, Refund] = {}
        """Refunds by idempotency key."""
        self.created = 0
        """Refunds actually created (a replayed key does not count)."""
        self.drop_next_answer = False
        """Fault knob: the next POST /refunds commits, then drops the connection unanswered."""
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self.reset()

    def reset(self) -> None:
        """Back to the seed orders, with no refunds and no fault armed."""
        self.orders = {order.order_id: order for order in SEED_ORDERS}
        self.refunds = {}
        self.created = 0
        self.drop_next_answer = False

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/orders/{order_id}", self._get_order)
        app.router.add_post("/refunds", self._post_refund)
        app.router.add_get("/refunds/operations/{key}", self._get_operation)
        app.router.add_get("/_stats", self._get_stats)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on `host:port` (0 picks a free port); returns the base URL."""
        runner = web.AppRunner(self.app(), shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._base_url = f"http://{host}:{runner.addresses[0][1]}"
        return self._base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("the refunds service is not running")
        return self._base_url

    def refunded(self, order_id: str) -> bool:
        return any(refund.order_id == order_id for refund in self.refunds.values())

    async def _get_order(self, request: web.Request) -> web.Response:
        order = self.orders.get(request.match_info["order_id"])
        if order is None:
            return _error(404, "not_found", f"no order {request.match_info['order_id']}")
        return web.json_response({**asdict(order), "refunded": self.refunded(order.order_id)})

    async def _post_refund(self, request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key", "")
        if not key:
            return _error(400, "missing_key", "an Idempotency-Key header is required")
        try:
            body: Any = await request.json()
            order_id, amount = str(body["order_id"]), float(body["amount"])
        except (ValueError, KeyError, TypeError):
            return _error(400, "invalid_body", 'expected {"order_id": str, "amount": number}')
        known = self.refunds.get(key)
        if known is not None:
            # The same key is the same refund: answer it again, never make a second one.
            if (known.order_id, known.amount) != (order_id, amount):
                return _error(422, "key_reused", f"key {key} was used for another refund")
            return web.json_response(asdict(known), headers={"Idempotent-Replay": "true"})
        order = self.orders.get(order_id)
        if order is None:
            return _error(404, "not_found", f"no order {order_id}")
        if self.refunded(order_id):
            return _error(409, "already_refunded", f"order {order_id} is already refunded")
        if amount <= 0 or amount > order.amount:
            return _error(
                409, "amount_invalid", f"{amount} is not between 0 and the order's {order.amount}"
            )
        self.created += 1
        refund = Refund(f"R-{self.created}", order_id, amount, key)
        self.refunds[key] = refund
        if self.drop_next_answer:
            # Committed, but the caller never hears so: closing the transport before the
            # response is written makes the client read EOF where the status line should be.
            self.drop_next_answer = False
            if request.transport is not None:
                request.transport.close()
        return web.json_response(asdict(refund), status=201)

    async def _get_operation(self, request: web.Request) -> web.Response:
        refund = self.refunds.get(request.match_info["key"])
        if refund is None:
            return _error(404, "not_found", "no refund was made under this key")
        return web.json_response({"state": "applied", "record": asdict(refund)})

    async def _get_stats(self, _: web.Request) -> web.Response:
        return web.json_response({"created": self.created})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args()
    web.run_app(RefundsService().app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
