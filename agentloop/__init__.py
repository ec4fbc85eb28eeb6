"""agentloop: a durable AI-agent tool-calling loop that runs as a Temporal service."""
