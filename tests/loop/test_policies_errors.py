"""Provider error classification: which class a failure is decides its recovery."""

from __future__ import annotations

import pytest

from agentloop.policies.errors import (
    MAX_RETRY_AFTER_SECONDS,
    classify_connection_error,
    classify_http_error,
    retry_after_seconds,
)


@pytest.mark.parametrize(
    ("status", "message", "error_class", "retryable"),
    [
        (408, "", "transient", True),
        (409, "", "transient", True),
        (429, "rate limited", "transient", True),
        (500, "", "transient", True),
        (502, "", "transient", True),
        (503, "", "transient", True),
        (529, "overloaded", "transient", True),
        (
            400,
            "This model's maximum context length is 8192 tokens",
            "context_length_exceeded",
            False,
        ),
        (400, "context_length_exceeded: too many tokens", "context_length_exceeded", False),
        (
            400,
            "prompt is too long: 210000 tokens > 200000 maximum",
            "context_length_exceeded",
            False,
        ),
        (400, "invalid 'messages[2]'", "bad_request", False),
        (401, "", "authentication", False),
        (403, "", "permission", False),
        (404, "model not found", "not_found", False),
        (422, "", "unprocessable", False),
        (418, "", "bad_request", False),
    ],
)
def test_http_errors_map_to_classes(
    status: int, message: str, error_class: str, retryable: bool
) -> None:
    advice = classify_http_error(status, {}, message)
    assert (advice.error_class, advice.retryable) == (error_class, retryable)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the finer one wins
        ({"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}, None),  # dates are not trusted
        ({"retry-after": "-3"}, None),
        # From outside: no delay holds `inf`, and a day-long one would park the call.
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "inf", "retry-after": "4"}, 4.0),
        ({"retry-after": "1e20"}, MAX_RETRY_AFTER_SECONDS),
        ({"retry-after": "86400000"}, MAX_RETRY_AFTER_SECONDS),
        ({}, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(headers) == seconds


def test_the_retry_delay_travels_with_retryable_advice_only() -> None:
    assert classify_http_error(429, {"retry-after": "3"}).retry_after_seconds == 3.0
    assert classify_http_error(400, {"retry-after": "3"}).retry_after_seconds is None


def test_connection_errors_are_transient() -> None:
    advice = classify_connection_error()
    assert (advice.error_class, advice.retryable) == ("transient", True)
