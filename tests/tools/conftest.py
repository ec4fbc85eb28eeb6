"""Fixtures of the example service's own tests: a fresh service on a throw-away database per
test (its state is what they assert), and an HTTP client session to call it with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agentloop.demo.services import ExampleService


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[ExampleService]:
    async with ExampleService(tmp_path / "service.db") as service:
        yield service
