"""Process concerns, shared by the worker and the CLI: configuration, payload encryption, the
audit log and tracing. Nothing here is workflow code."""
