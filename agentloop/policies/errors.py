"""Error classification: which class a failure belongs to decides its recovery.

Pure: returns advice, never raises. Activities turn the advice into Temporal retry behaviour
(retryable or not, `next_retry_delay` from Retry-After); the workflow turns the class into a
stop reason the operator can read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(frozen=True)
class ErrorAdvice:
    error_class: str
    """`transient`, `context_length_exceeded`, `bad_request`, `authentication`,
    `permission`, `not_found`, `unprocessable`, `protocol`, `internal`."""
    retryable: bool
    retry_after_seconds: float | None = None


MAX_RETRY_AFTER_SECONDS = 3_600.0
"""The longest wait a provider's Retry-After is taken for: the header comes from outside, and
a longer one (or `inf`, which no retry delay can hold) would park the call for that long."""


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """`retry-after-ms` wins over `retry-after` (seconds); dates, junk, `nan` and `inf` are
    ignored, and a wait is at most `MAX_RETRY_AFTER_SECONDS`."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = lowered.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        if 0 <= value < math.inf:
            return min(value, MAX_RETRY_AFTER_SECONDS)
    return None


def classify_http_error(
    status_code: int, headers: Mapping[str, str], message: str = ""
) -> ErrorAdvice:
    delay = retry_after_seconds(headers)
    if status_code in RETRYABLE_STATUS or status_code >= 500:
        return ErrorAdvice("transient", True, delay)
    if status_code == 400:
        lowered = message.lower()
        if "context_length" in lowered or "context length" in lowered or "too long" in lowered:
            return ErrorAdvice("context_length_exceeded", False)
        return ErrorAdvice("bad_request", False)
    named = {401: "authentication", 403: "permission", 404: "not_found", 422: "unprocessable"}
    return ErrorAdvice(named.get(status_code, "bad_request"), False)


def classify_connection_error() -> ErrorAdvice:
    """The request may not have reached the provider, or its answer was lost: retry."""
    return ErrorAdvice("transient", True)
