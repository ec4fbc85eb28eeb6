"""Whether a namespace has agentloop's search attributes registered, asked of the Temporal
server. The worker asks before it lets a run started without them (a plain `start_workflow`)
upsert them: an upsert of an attribute the namespace lacks fails the workflow task, and
Temporal would retry it for ever. `agentloop list` asks before it queries by them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from agentloop import search

CHECK_TIMEOUT = timedelta(seconds=5)
REMEMBERED_SECONDS = 30.0
"""How long a worker trusts an answer: attributes registered meanwhile index runs started
after that."""

log = logging.getLogger(__name__)


async def missing_attributes(
    client: Client,
    namespace: str | None = None,
    keys: Iterable[SearchAttributeKey[str]] = search.ALL,
) -> list[str]:
    """Which of `keys` (default: the attributes every run is indexed by) `namespace` (default:
    the client's) does not have as Keyword attributes, in order. Raises `RPCError` when the
    server does not say (a server without the operator service, a key without the
    permission)."""
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace or client.namespace),
        timeout=CHECK_TIMEOUT,
    )
    registered = {**response.system_attributes, **response.custom_attributes}
    keyword = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    return [key.name for key in keys if registered.get(key.name) != keyword]


def unregistered(missing: list[str], namespace: str, server: str | None = None) -> str:
    """One line: which attributes `namespace` (on `server`) lacks, and the command
    registering them."""
    on = f" on {server}" if server else ""
    return (
        f"namespace {namespace!r}{on} lacks the search attributes {', '.join(missing)} (type "
        f"Keyword), so runs are not indexed by them; register them once: "
        f"{search.create_commands(missing, namespace)}"
    )


@dataclass
class _Answer:
    indexable: bool
    family: bool
    """`AgentTaskFamily` is registered too."""
    at: float


class Registration:
    """Whether runs on a namespace may be indexed, for one worker process: asked of the
    server at most once every `remembered_seconds` per namespace (runs starting together
    wait for the one answer). A check that fails counts as not registered for as long (a run
    left unindexed is harmless; a failed upsert is not; and a server that does not answer
    is not asked again by every run)."""

    def __init__(
        self,
        client: Client,
        remembered_seconds: float = REMEMBERED_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._remembered = remembered_seconds
        self._clock = clock
        self._answers: dict[str, _Answer] = {}
        self._lock = asyncio.Lock()

    async def indexable(self, namespace: str) -> bool:
        """Whether runs on `namespace` may be indexed by `search.ALL`."""
        return (await self._answer(namespace)).indexable

    async def family_indexable(self, namespace: str) -> bool:
        """Whether they may be indexed by `AgentTaskFamily` as well."""
        answer = await self._answer(namespace)
        return answer.indexable and answer.family

    async def _answer(self, namespace: str) -> _Answer:
        async with self._lock:  # runs starting together ask the server once
            answer = self._answers.get(namespace)
            if answer is not None and self._clock() - answer.at < self._remembered:
                return answer
            try:
                missing = await missing_attributes(self._client, namespace, search.REGISTERED)
            except RPCError as exc:
                log.warning(
                    "cannot tell whether namespace %r has agentloop's search attributes (%s): "
                    "runs started without them stay unindexed",
                    namespace,
                    exc,
                )
                missing = [key.name for key in search.REGISTERED]
            else:
                if missing:
                    log.warning("%s", unregistered(missing, namespace))
            answer = _Answer(
                indexable=not set(missing) & {key.name for key in search.ALL},
                family=search.AGENT_TASK_FAMILY.name not in missing,
                at=self._clock(),
            )
            self._answers[namespace] = answer
            return answer
