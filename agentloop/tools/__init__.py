"""The tool contract activity side (handlers, preconditions, outcome lookups, their errors),
the registry, and the tools: the built-ins and, for now, the example tools."""
