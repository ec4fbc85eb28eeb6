"""One refunds service and one agentloop harness (a Temporal dev server, the scripted model
and a worker with `refund_tools`) for the whole session; every test starts from the seed."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# The team's modules are imported by name, as `AGENTLOOP_TOOLS=refund_tools` would be.
sys.path.insert(0, str(Path(__file__).parent))

from refunds_service import RefundsService

from agentloop.testing import Harness


@pytest.fixture(scope="session")
async def service() -> AsyncIterator[RefundsService]:
    service = RefundsService()
    await service.start(host="127.0.0.1", port=0)
    # The tools' dependencies read REFUNDS_URL when the worker opens them.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("REFUNDS_URL", service.base_url)
        yield service
    await service.stop()


@pytest.fixture(autouse=True)
def fresh_service(service: RefundsService) -> None:
    service.reset()


@pytest.fixture(scope="session")
async def harness(service: RefundsService) -> AsyncIterator[Harness]:
    assert os.environ["REFUNDS_URL"] == service.base_url
    async with Harness(tools=["refund_tools"]) as harness:
        yield harness
