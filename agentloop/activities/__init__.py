"""The activities: the only places with I/O (model calls, tool execution, outcome lookups,
verification, reading a finished run). Thin: each hands its work to adapters, tools or store."""
