"""MCP servers as tool sources: what a listing becomes (`listing`), the worker's connections
(`pool`) and the tools runs call through them (`tools`). Their configuration is
`agentloop.runtime.mcp_config`."""
