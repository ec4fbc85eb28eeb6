"""The HTTP client example tools use to reach their systems of record.

Maps transport and HTTP failures onto tool error classes once, for every tool: a lost
connection or a 5xx is transient (a read may retry), a 4xx is the service saying no.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from agentloop.tools.contract import ToolError

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=30)


class ServiceClient:
    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url.rstrip("/")
        self._session = session

    async def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        return await self._request("GET", path, params=params)

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            async with self._session.request(method, self.base_url + path, **kwargs) as resp:
                body = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise ToolError(
                f"service unreachable: {exc!r}", error_class="transient", retryable=True
            ) from exc
        except aiohttp.ContentTypeError as exc:
            raise ToolError(
                "service answered with a non-JSON body", error_class="transient", retryable=True
            ) from exc
        if status >= 500:
            raise ToolError(f"service error {status}", error_class="transient", retryable=True)
        if status >= 400:
            error = body.get("error", {}) if isinstance(body, dict) else {}
            code = error.get("code", "")
            error_class = "invalid_arguments" if code == "invalid_argument" else "business"
            raise ToolError(error.get("message") or f"HTTP {status}", error_class=error_class)
        return body
