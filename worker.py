"""The agentloop worker, where a Temporal user looks first: `python worker.py` polls the task
queue (`agent-loop`, or `AGENT_LOOP_TASK_QUEUE`) with the configuration from the environment,
exactly as `agentloop worker` does (`agentloop.worker`)."""

from agentloop.worker import main

if __name__ == "__main__":
    main()
