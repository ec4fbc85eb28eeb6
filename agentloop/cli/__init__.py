"""The `agentloop` command: runs started, followed, decided and read from a terminal or a
script, the dev stack, replay. Client side only: nothing here runs inside a workflow."""

from agentloop.cli.commands import main

__all__ = ["main"]
