"""`python -m agentloop.cli`: the `agentloop` command without its console script."""

from agentloop.cli.commands import main

main()
