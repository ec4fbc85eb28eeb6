"""The session's real parts as one fixture (`live`, or `servers` for a test that runs its own
worker), and the scripts a test gives the scripted model provider among them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import Client

from agentloop.contract import AgentRunInput
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider
from agentloop.testing.turns import Turn, as_turn


@dataclass(frozen=True)
class Servers:
    """The session's real parts a test drives (the `servers` fixture): the dev server's
    client, the scripted model provider and the example service its tools call; no worker
    serves the session's runs, for a test that runs its own."""

    client: Client
    provider: ScriptedProvider
    service: ExampleService


@dataclass(frozen=True)
class Live(Servers):
    """The session's `Servers` with the in-process worker serving its runs (the `live`
    fixture): `worker` holds its settings."""

    worker: Settings


def scripted(name: str, *turns: Turn) -> Script:
    """The scripted model's script `name`, its turns written as agentloop.testing writes them:
    a `ScriptTurn`, a list of `call(...)`s made together, or a final text."""
    return Script(name=name, turns=[as_turn(turn) for turn in turns])


def agent_input(
    model: str, provider: str, task: str, tools: list[str], **fields: Any
) -> AgentRunInput:
    """A run's input: `task` with `tools`, for the model `model` over `provider` (the scripted
    model plays the script named `model`); `fields` are the input's other fields."""
    return AgentRunInput(task=task, provider=provider, model=model, tools=tools, **fields)
