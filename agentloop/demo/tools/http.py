"""The HTTP client the example tools reach their system of record with (their `ctx.deps`).

Transport and HTTP failures are mapped onto tool error classes here, once, for every tool:

- reads: a lost connection, a timeout or a 5xx is `transient` (a read may be retried);
- writes: what matters is whether the write may have happened. A failure to connect, a 429 or a
  503 means the service did not take the request: `transient`, safe to send again with the same
  idempotency key. A connection lost or a timeout *after* the request was sent, another 5xx, or
  a 2xx whose body cannot be read mean it may have been applied: `OutcomeUnknown`, which must
  never be retried blindly; the tool's `lookup_outcome` asks the service by idempotency key;
- a 4xx is the service saying no: `invalid_arguments` for `invalid_argument`, else `business`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from agentloop.demo.services.control import request_fingerprint
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import OutcomeUnknown, ToolContext, ToolError

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=30)

WRITE_TOOL_TIMEOUT_SECONDS = 45.0
"""The `timeout_seconds` of the example write tools: above `DEFAULT_TIMEOUT`, so a hung write
ends inside the handler as `OutcomeUnknown` (a result the runner reconciles by idempotency key)
rather than as an activity timeout."""

IDEMPOTENCY_HEADER = "Idempotency-Key"

# Statuses that mean "not processed, try later": nothing was written.
_NOT_PROCESSED = frozenset({429, 503})


def idempotency_headers(ctx: ToolContext[Any]) -> dict[str, str]:
    """The headers of a write: its idempotency key, without which it must never be sent.

    Raises:
        ValueError: the call has no key (a wiring bug, not something the model can fix).
    """
    if not ctx.idempotency_key:
        raise ValueError(f"write {ctx.call_id} has no idempotency key")
    return {IDEMPOTENCY_HEADER: ctx.idempotency_key}


class ServiceClient:
    """JSON over HTTP to one service; `timeout`, when given, overrides the session's."""

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession,
        *,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._session = session
        self._timeout = timeout

    async def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        status, body = await self._exchange("GET", path, write=False, params=params)
        return _checked(status, body, write=False)

    async def get_json_or_none(self, path: str, params: dict[str, str] | None = None) -> Any:
        """Like `get_json`, but a 404 is an answer (None), not an error: for lookups, where
        "no such thing" is the information asked for."""
        status, body = await self._exchange("GET", path, write=False, params=params)
        return None if status == 404 else _checked(status, body, write=False)

    async def post_json(
        self, path: str, body: Any, *, headers: dict[str, str] | None = None
    ) -> Any:
        """A write: failures after sending raise `OutcomeUnknown` (see the module docstring)."""
        status, answer = await self._exchange("POST", path, write=True, json=body, headers=headers)
        return _checked(status, answer, write=True)

    async def _exchange(
        self, method: str, path: str, *, write: bool, **kwargs: Any
    ) -> tuple[int, Any]:
        """(status, JSON body or None if unreadable); raises only for transport failures."""
        if self._timeout is not None:
            kwargs["timeout"] = self._timeout
        try:
            async with self._session.request(method, self.base_url + path, **kwargs) as resp:
                status = resp.status
                try:
                    return status, await resp.json(content_type=None)
                except ValueError:  # not JSON (json.JSONDecodeError is a ValueError)
                    return status, None
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            # Raised while connecting: the request never left, so nothing can have happened.
            raise ToolError(
                f"service unreachable: {exc!r}", error_class="transient", retryable=True
            ) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            if write:
                raise OutcomeUnknown(
                    f"{method} {path}: no answer after sending ({exc!r}); the write may have "
                    "been applied"
                ) from exc
            raise ToolError(
                f"service unreachable: {exc!r}", error_class="transient", retryable=True
            ) from exc


@dataclass(frozen=True)
class ExampleDeps:
    """What the example tools get as `ctx.deps`: a client of the example service."""

    example: ServiceClient


def _checked(status: int, body: Any, *, write: bool) -> Any:
    """The body of a successful answer, or the tool error its status means."""
    if status in _NOT_PROCESSED or (status >= 500 and not write):
        raise ToolError(f"service error {status}", error_class="transient", retryable=True)
    if status >= 500:
        raise OutcomeUnknown(f"service error {status} during a write; it may have been applied")
    if status >= 400:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        code = error.get("code", "")
        error_class = "invalid_arguments" if code == "invalid_argument" else "business"
        raise ToolError(error.get("message") or f"HTTP {status}", error_class=error_class)
    if body is None:
        if write:
            raise OutcomeUnknown(f"HTTP {status} without a readable body after a write")
        raise ToolError(
            "service answered with a non-JSON body", error_class="transient", retryable=True
        )
    return body


async def lookup_operation(
    client: ServiceClient, path: str, request_fields: dict[str, Any]
) -> Outcome:
    """What the example service recorded under an idempotency key (`GET .../operations/{key}`)
    for the request `request_fields` describes.

    `not_applied` only when the service says so (404: no operation ever committed under the key,
    or a recorded refusal, which a retry with the same key would get again). A key the service
    holds for another request is `unknown`: the key alone is no proof. A question that itself
    failed raises a retryable `ToolError`: the lookup activity is retried, and once its
    attempts are used up the runner records `unknown` (never "absent" from an outage)."""
    try:
        answer = await client.get_json_or_none(path)
    except ToolError as exc:
        raise ToolError(
            f"outcome lookup failed: {exc}", error_class="transient", retryable=True
        ) from exc
    if answer is None:
        return Outcome(state="not_applied")
    if isinstance(answer, dict) and answer.get("fingerprint") not in (
        None,
        request_fingerprint(request_fields),
    ):
        return Outcome(state="unknown", record="the key was used for a different request")
    state = answer.get("state") if isinstance(answer, dict) else None
    if state == "applied":
        return Outcome(state="applied", record=answer.get("record"))
    if state == "refused":
        return Outcome(state="not_applied", record=answer.get("error"))
    return Outcome(state="unknown")
