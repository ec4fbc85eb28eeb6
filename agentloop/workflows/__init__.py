"""The `AgentRun` workflow: deterministic code only. `loop/` is the pure state machine; the
modules beside it make the Temporal calls each step names (activities by name, timers, child
runs, search attributes)."""
