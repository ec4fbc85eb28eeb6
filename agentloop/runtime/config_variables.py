"""The one table of settings and their variables (`VARIABLES`: field <-> environment variable,
its check, how it is shown), and what counts as set: the names every part of the
configuration speaks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentloop.runtime.audit import mask_url
from agentloop.runtime.codec import mask_key_ring
from agentloop.runtime.config_checks import (
    Check,
    check_approver_keys,
    check_codec_keys,
    check_count,
    check_failed_runs,
    check_host_port,
    check_inbox_key,
    check_log_level,
    check_operators,
    check_otel,
    check_pem_file,
    check_port,
    check_positive_number,
    check_pricing_file,
    check_principal_signing,
    check_publish_mode,
    check_redactors,
    check_run_mode,
    check_sandbox_mode,
    check_scripts_dir,
    check_slots,
    check_store_url,
    check_tenant_map,
    check_tool_modules,
    check_verification_rule,
    check_webhooks,
    http_url_check,
)
from agentloop.runtime.mcp_config import check_servers, mask_servers
from agentloop.runtime.notice_routes import check_routes, mask_routes, mask_webhooks

CONFIG_FILE_VARIABLE = "AGENTLOOP_CONFIG"


@dataclass(frozen=True)
class Variable:
    name: str
    """The environment variable."""
    check: Check | None = None
    secret: bool = False
    """Shown as `…` and its last 4 characters (or as `mask` shows it)."""
    mask: Callable[[str], str] | None = None
    """How a secret is shown instead, when even 4 characters of it are too many."""
    is_url: bool = False
    """Shown with any password inside it as `***`."""


VARIABLES: dict[str, Variable] = {
    "temporal_address": Variable("TEMPORAL_ADDRESS", check_host_port),
    "temporal_namespace": Variable("TEMPORAL_NAMESPACE"),
    "temporal_api_key": Variable("TEMPORAL_API_KEY", secret=True),
    "temporal_tls_cert": Variable("TEMPORAL_TLS_CERT", check_pem_file),
    "temporal_tls_key": Variable("TEMPORAL_TLS_KEY", check_pem_file),
    "temporal_tls_ca": Variable("TEMPORAL_TLS_CA", check_pem_file),
    "task_queue": Variable("AGENT_LOOP_TASK_QUEUE"),
    "store_url": Variable("AGENTLOOP_STORE_URL", check_store_url, is_url=True),
    "example_service_url": Variable(
        "AGENTLOOP_EXAMPLE_SERVICE_URL", http_url_check("http://127.0.0.1:8787"), is_url=True
    ),
    "openai_api_key": Variable("OPENAI_API_KEY", secret=True),
    "openai_base_url": Variable(
        "OPENAI_BASE_URL", http_url_check("https://api.openai.com/v1"), is_url=True
    ),
    "anthropic_api_key": Variable("ANTHROPIC_API_KEY", secret=True),
    "anthropic_base_url": Variable(
        "ANTHROPIC_BASE_URL", http_url_check("https://api.anthropic.com"), is_url=True
    ),
    "ui_url": Variable("AGENTLOOP_UI_URL", http_url_check("http://localhost:8233"), is_url=True),
    "pricing_file": Variable("AGENTLOOP_PRICING_FILE", check_pricing_file),
    "tool_http_timeout_seconds": Variable(
        "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS", check_positive_number
    ),
    "max_cached_workflows": Variable("AGENTLOOP_MAX_CACHED_WORKFLOWS", check_count),
    "sticky_timeout_seconds": Variable("AGENTLOOP_STICKY_TIMEOUT_SECONDS", check_positive_number),
    "max_concurrent_activities": Variable("AGENTLOOP_MAX_CONCURRENT_ACTIVITIES", check_slots),
    "max_concurrent_workflow_tasks": Variable(
        "AGENTLOOP_MAX_CONCURRENT_WORKFLOW_TASKS", check_slots
    ),
    "codec_keys": Variable(
        "AGENTLOOP_CODEC_KEYS", check_codec_keys, secret=True, mask=mask_key_ring
    ),
    "metrics_port": Variable("AGENTLOOP_METRICS_PORT", check_port),
    "metrics_poll_seconds": Variable("AGENTLOOP_METRICS_POLL_SECONDS", check_positive_number),
    "metrics_otlp_url": Variable(
        "AGENTLOOP_METRICS_OTLP_URL", http_url_check("http://otel-collector:4317"), is_url=True
    ),
    "otel": Variable("AGENTLOOP_OTEL", check_otel),
    "stream_key": Variable("AGENTLOOP_STREAM_KEY", secret=True),
    "publish_events": Variable("AGENTLOOP_PUBLISH_EVENTS", check_publish_mode),
    "redact": Variable("AGENTLOOP_REDACT", check_redactors),
    "workflow_sandbox": Variable("AGENTLOOP_WORKFLOW_SANDBOX", check_sandbox_mode),
    "log_level": Variable("AGENTLOOP_LOG_LEVEL", check_log_level),
    "tools": Variable("AGENTLOOP_TOOLS", check_tool_modules),
    "approver_keys": Variable("AGENTLOOP_APPROVER_KEYS", check_approver_keys),
    "operators": Variable("AGENTLOOP_OPERATORS", check_operators),
    "scripts_dir": Variable("AGENTLOOP_SCRIPTS_DIR", check_scripts_dir),
    "mcp_servers": Variable("AGENTLOOP_MCP_SERVERS", check_servers, secret=True, mask=mask_servers),
    "starter_keys": Variable("AGENTLOOP_STARTER_KEYS", check_approver_keys),
    "principal_signing": Variable("AGENTLOOP_PRINCIPAL_SIGNING", check_principal_signing),
    "env": Variable("AGENTLOOP_ENV", check_run_mode),
    "notify_webhooks": Variable(
        "AGENTLOOP_NOTIFY_WEBHOOKS", check_webhooks, secret=True, mask=mask_webhooks
    ),
    "notify_routes": Variable(
        "AGENTLOOP_NOTIFY_ROUTES", check_routes, secret=True, mask=mask_routes
    ),
    "notify_secret": Variable("AGENTLOOP_NOTIFY_SECRET", secret=True),
    "inbox_url": Variable(
        "AGENTLOOP_INBOX_URL", http_url_check("http://127.0.0.1:8300"), is_url=True
    ),
    "inbox_tenants": Variable("AGENTLOOP_INBOX_TENANTS", check_tenant_map),
    "failed_runs": Variable("AGENTLOOP_FAILED_RUNS", check_failed_runs),
    "require_verification": Variable("AGENTLOOP_REQUIRE_VERIFICATION", check_verification_rule),
    "inbox_key": Variable("AGENTLOOP_INBOX_KEY", check_inbox_key, secret=True),
    "inbox_wait_seconds": Variable("AGENTLOOP_INBOX_WAIT_SECONDS", check_positive_number),
    "inbox_refresh_seconds": Variable("AGENTLOOP_INBOX_REFRESH_SECONDS", check_positive_number),
}
"""Settings field -> its environment variable (and file key: the field name)."""
FILE_SUFFIX = "_FILE"
"""`NAME_FILE=PATH`: NAME's value is the text of that file (how compose and Kubernetes hand
out secrets); for a list setting, one item a line."""

NUMBER_FIELDS = frozenset(
    {
        "tool_http_timeout_seconds",
        "max_cached_workflows",
        "sticky_timeout_seconds",
        "max_concurrent_activities",
        "max_concurrent_workflow_tasks",
        "inbox_wait_seconds",
        "inbox_refresh_seconds",
        "metrics_port",
        "metrics_poll_seconds",
    }
)
LIST_FIELDS = frozenset(
    {
        "tools",
        "approver_keys",
        "operators",
        "starter_keys",
        "notify_webhooks",
        "require_verification",
    }
)
TABLE_FIELDS = frozenset({"mcp_servers", "inbox_tenants", "notify_routes"})
"""Given in the file as a table, kept as its JSON text (the variable's form)."""


def mask_secret(value: str) -> str:
    """`…` and the last 4 characters (after an `sk-` marker); `***` for a value too short
    to show any of it."""
    if len(value) < 12:
        return "***"
    marker = "sk-" if value.startswith("sk-") else ""
    return f"{marker}…{value[-4:]}"


def shown_value(field: str, value: Any) -> Any:
    """`value` as it may be printed: secrets masked, passwords in URLs as `***`."""
    if value is None:
        return None
    variable = VARIABLES[field]
    if variable.secret:
        return (variable.mask or mask_secret)(str(value))
    if variable.is_url:
        return mask_url(str(value))
    return value


def present(value: Any) -> Any:
    """None for an unset or empty (blank) value."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return value
