"""The OpenAI error body, shared by Chat Completions and Responses (same API family)."""

from __future__ import annotations

from agentloop.scripted_provider.rendering import JSONObject, Rejection

REQUEST_ID_HEADER = "x-request-id"
"""The openai client exposes it as `_request_id` on every parsed response."""


def error_body(rejection: Rejection) -> JSONObject:
    """The body the openai client turns into `BadRequestError`, `RateLimitError`, ..."""
    error_type, default_code = _kind(rejection.status)
    return {
        "error": {
            "message": rejection.message,
            "type": error_type,
            "param": rejection.param,
            "code": rejection.code or default_code,
        }
    }


def _kind(status: int) -> tuple[str, str | None]:
    # What the real API answers: `requests` / `rate_limit_exceeded` for a rate limit,
    # `server_error` for its own failures, `invalid_request_error` for the caller's.
    if status == 429:
        return "requests", "rate_limit_exceeded"
    if status >= 500:
        return "server_error", None
    return "invalid_request_error", None
