"""Worker and client configuration: the environment, over an optional TOML file, over defaults.

`AGENTLOOP_CONFIG=/path/to/agentloop.toml` names the file; its keys are the settings' field
names (`temporal_address = "temporal.internal:7233"`). A variable set in the environment wins
over the file; an empty value counts as unset. `VARIABLES` is the one table of field <->
variable name.

- `Settings.load(env)`: every value checked; one `ConfigError` lists every problem, each
  naming its variable and what is expected. What the CLI and the worker start from.
- `Settings.from_env(env)`: the same sources, types only (no files or formats checked), e.g.
  for an environment meant for another machine.
- `load_config(env)`: the settings together with where each value came from, for
  `agentloop config` (secrets masked by `LoadedConfig.lines` / `LoadedConfig.as_json`).
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from temporalio.service import TLSConfig

from agentloop.contract import DEFAULT_TASK_QUEUE
from agentloop.runtime.audit import mask_url
from agentloop.runtime.codec import KeyRing, KeyRingError, mask_key_ring
from agentloop.runtime.config_checks import (
    Check,
    OtelMode,
    PublishMode,
    RunMode,
    SandboxMode,
    check_approver_keys,
    check_codec_keys,
    check_count,
    check_host_port,
    check_log_level,
    check_otel,
    check_pem_file,
    check_positive_number,
    check_pricing_file,
    check_principal_signing,
    check_publish_mode,
    check_run_mode,
    check_sandbox_mode,
    check_scripts_dir,
    check_slots,
    check_store_url,
    check_tenant_map,
    check_tool_modules,
    check_webhooks,
    http_url_check,
    parse_tenant_map,
    read_text,
)
from agentloop.runtime.mcp_config import (
    McpConfigError,
    McpServerConfig,
    check_servers,
    mask_servers,
    parse_servers,
)
from agentloop.runtime.signing import (
    ApproverKeys,
    PrincipalSignatures,
    PrincipalSigning,
    SigningError,
)

DEFAULT_STORE_URL = "sqlite:///.agentloop/store.db"
DEFAULT_EXAMPLE_SERVICE_URL = "http://127.0.0.1:8787"
CONFIG_FILE_VARIABLE = "AGENTLOOP_CONFIG"

Source = Literal["env", "file", "default"]


class ConfigError(ValueError):
    """The configuration is unusable; `problems` has one line per problem, each naming the
    variable (and the file, for a value from it) and the fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        if len(self.problems) == 1:
            message = f"invalid configuration: {self.problems[0]}"
        else:
            lines = "".join(f"\n  {p}" for p in self.problems)
            message = f"invalid configuration ({len(self.problems)} problems):{lines}"
        super().__init__(message)


@dataclass(frozen=True)
class ProviderEndpoints:
    """Keys and base URLs for the official clients (None: the client's own default)."""

    openai_api_key: str | None = None
    openai_base_url: str | None = None
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None


class Settings(BaseModel):
    temporal_address: str = "localhost:7233"
    """`host:port` of the Temporal frontend."""
    temporal_namespace: str = "default"
    """The Temporal namespace runs live in."""
    temporal_api_key: str | None = Field(default=None, repr=False)
    """Sent as the API key of every Temporal call (Temporal Cloud); TLS is on with it."""
    temporal_tls_cert: str | None = None
    """PEM client certificate (mTLS); with `temporal_tls_key`."""
    temporal_tls_key: str | None = None
    """PEM private key of `temporal_tls_cert`: both or neither."""
    temporal_tls_ca: str | None = None
    """PEM CA bundle the server's certificate is checked against (default: the system's)."""
    task_queue: str = DEFAULT_TASK_QUEUE
    """The task queue of AgentRun and its activities (model calls, tools)."""
    store_url: str = DEFAULT_STORE_URL
    """The transcript and artifact store: `sqlite:///PATH`, a file path, or
    `postgresql://USER:PASSWORD@HOST:PORT/DB` (several workers share one)."""
    example_service_url: str = DEFAULT_EXAMPLE_SERVICE_URL
    """The example service the example tools (`agentloop.demo.tools`) call."""
    openai_api_key: str | None = Field(default=None, repr=False)
    """The official `openai` client's API key."""
    openai_base_url: str | None = None
    """Where the `openai` client sends requests (the client's own variable; tests point it at
    the scripted provider)."""
    anthropic_api_key: str | None = Field(default=None, repr=False)
    """The official `anthropic` client's API key."""
    anthropic_base_url: str | None = None
    """Where the `anthropic` client sends requests (the client's own variable)."""
    ui_url: str = "http://localhost:8233"
    """The Temporal UI, for the run links the CLI prints."""
    pricing_file: str | None = None
    """JSON `{"model-prefix": [input, output]}` in USD per million tokens, over the defaults."""
    tool_http_timeout_seconds: float = 30.0
    """How long an example tool waits for its system of record; a write that gets no answer
    in time has an unknown outcome and is looked up, never resent blindly."""
    max_cached_workflows: int = 1_000
    """Runs a worker keeps in its sticky cache (Temporal's `max_cached_workflows`). A run
    waiting on a person costs the worker nothing beyond its place here; one evicted resumes
    by replaying its history, running nothing again."""
    sticky_timeout_seconds: float = 10.0
    """How long a run's next workflow task waits for the worker that has it cached before any
    worker may take it (Temporal's sticky schedule-to-start timeout): after a worker dies,
    its runs go on elsewhere this much later. Shorter moves them sooner, at the price of
    replays when a busy worker is merely slow to poll."""
    max_concurrent_activities: int | None = None
    """Activity tasks (model calls, tool calls) a worker runs at once (Temporal's
    `max_concurrent_activities`; unset: Temporal's default, 100). Each one in flight holds its
    request and connection buffers; more of them wait on the task queue, none is lost."""
    max_concurrent_workflow_tasks: int | None = None
    """Workflow tasks (steps of runs) a worker processes at once (Temporal's
    `max_concurrent_workflow_tasks`; unset: Temporal's default, 100)."""
    codec_keys: str | None = Field(default=None, repr=False)
    """`ID:BASE64KEY[,ID:BASE64KEY...]`, the first active: with it every payload in workflow
    history is encrypted (AES-256-GCM, `agentloop.runtime.codec`); the others still decrypt."""
    otel: OtelMode = "off"
    """OpenTelemetry tracing of runs through Temporal's TracingInterceptor
    (`agentloop.runtime.tracing`)."""
    publish_events: PublishMode = "on"
    """`off`: this worker's model calls publish no text on their run's stream, and the runs
    `agentloop run` starts publish nothing (`publish_events: false`); `on`: what each run's
    input says (by default it publishes)."""
    workflow_sandbox: SandboxMode = "off"
    """`on`: workers (and `agentloop replay`) run AgentRun in Temporal's workflow sandbox;
    `off`: outside it, the workflow's imports checked by tests instead."""
    log_level: str = "INFO"
    """The level of the log lines `agentloop worker` and `agentloop dev` write (DEBUG, INFO,
    WARNING, ERROR, CRITICAL); audit records are written whatever it says."""
    tools: str | None = None
    """`module[:attribute],...`: the team's tool modules the worker loads beside the
    built-ins (`agentloop.tools.plugins`); in the TOML file also an array of strings."""
    approver_keys: str | None = None
    """`NAME=ed25519:BASE64,...`: the approvers whose signed decisions count. With it, the
    worker refuses unsigned or wrongly signed approvals (`agentloop.runtime.signing`);
    without, any signaller may name any approver. In the TOML file also an array."""
    scripts_dir: str | None = None
    """A folder of script files (`*.json`, `*.toml`) the scripted provider of `agentloop dev`
    and `agentloop.testing.Harness` plays, beside the built-in ones; read again on change."""
    mcp_servers: str | None = None
    """A JSON object of MCP server name -> server (`agentloop.runtime.mcp_config`), whose tools the
    worker offers; in the TOML file the `[mcp_servers.NAME]` tables."""
    starter_keys: str | None = None
    """`NAME=ed25519:BASE64,...`: the front ends (starters) whose signature of a run's principal
    counts (`agentloop keys new NAME` makes one). With it, a run must carry a valid
    `principal_signature` unless `principal_signing` is `optional`."""
    principal_signing: PrincipalSigning | None = None
    """`required`: every run needs a starter's signature of its principal; `optional`: only a
    signature that is given is checked. Unset: required when `starter_keys` is set."""
    env: RunMode = "development"
    """`production`: a worker refuses to start without `approver_keys` and `codec_keys`
    (`production_problems`). `agentloop dev` always runs as development."""
    notify_webhooks: str | None = Field(default=None, repr=False)
    """`URL[,URL...]`: where a run's worker POSTs a JSON notice when the run starts waiting
    for a person, signed with `notify_secret` (`agentloop.activities.notices`); in the TOML
    file also an array."""
    notify_secret: str | None = Field(default=None, repr=False)
    """The HMAC-SHA256 key of the notices' `X-Agentloop-Signature` header (needed with
    `notify_webhooks`)."""
    inbox_url: str = "http://127.0.0.1:8300"
    """Where people open the inbox (`agentloop inbox`): the notices link to the run there."""
    inbox_tenants: str | None = None
    """A JSON object of inbox user -> the tenants whose runs they see and decide (`agentloop
    inbox`); in the TOML file the `[inbox_tenants]` table. A user it does not name sees
    every tenant only in local mode (no `--auth-header`), none behind a proxy."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The environment (default `os.environ`) over `AGENTLOOP_CONFIG`'s file over the
        defaults, with types checked but not formats or files (`load` checks those).
        Raises `ConfigError`."""
        return load_config(env, check=False).settings

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Like `from_env`, every value checked: raises one `ConfigError` listing every
        problem."""
        return load_config(env).settings

    def tool_modules(self) -> list[str]:
        """`tools` as a list of `module[:attribute]`, in order, each once."""
        return list(dict.fromkeys(m.strip() for m in (self.tools or "").split(",") if m.strip()))

    def mcp_server_configs(self) -> dict[str, McpServerConfig]:
        """The servers of `mcp_servers`; raises `ConfigError` naming AGENTLOOP_MCP_SERVERS
        and the server when one is malformed."""
        try:
            return parse_servers(self.mcp_servers)
        except McpConfigError as exc:
            raise ConfigError([f"{VARIABLES['mcp_servers'].name}: {exc}"]) from None

    def provider_endpoints(self) -> ProviderEndpoints:
        return ProviderEndpoints(
            openai_api_key=self.openai_api_key,
            openai_base_url=self.openai_base_url,
            anthropic_api_key=self.anthropic_api_key,
            anthropic_base_url=self.anthropic_base_url,
        )

    def notice_webhooks(self) -> list[str]:
        """The URLs of `notify_webhooks` (none when unset); raises `ConfigError` when they are
        set without `notify_secret` (an unsigned notice could be forged by anyone)."""
        urls = [u.strip() for u in (self.notify_webhooks or "").split(",") if u.strip()]
        if urls and _present(self.notify_secret) is None:
            raise ConfigError(
                [
                    f"{VARIABLES['notify_webhooks'].name} is set without "
                    f"{VARIABLES['notify_secret'].name}: set the key the notices are signed with"
                ]
            )
        return urls

    def inbox_tenant_map(self) -> dict[str, list[str]]:
        """`inbox_tenants` as user -> tenants (empty when unset); raises `ConfigError` naming
        AGENTLOOP_INBOX_TENANTS when it is malformed."""
        if _present(self.inbox_tenants) is None:
            return {}
        assert self.inbox_tenants is not None
        try:
            return parse_tenant_map(self.inbox_tenants)
        except ValueError as exc:
            raise ConfigError([f"{VARIABLES['inbox_tenants'].name}: {exc}"]) from None

    def run_url(self, workflow_id: str) -> str:
        return f"{self.ui_url}/namespaces/{self.temporal_namespace}/workflows/{workflow_id}"

    def approvers(self) -> ApproverKeys:
        """The keys of `approver_keys` (none when unset); raises `ConfigError` naming
        AGENTLOOP_APPROVER_KEYS when it is malformed."""
        try:
            return ApproverKeys.parse(self.approver_keys)
        except SigningError as exc:
            raise ConfigError([f"{VARIABLES['approver_keys'].name}: {exc}"]) from None

    def principal_signatures(self) -> PrincipalSignatures:
        """How the worker takes a run's principal; raises `ConfigError` when `starter_keys` is
        malformed, or signatures are required without starter keys to check them."""
        try:
            starters = ApproverKeys.parse(self.starter_keys)
        except SigningError as exc:
            raise ConfigError([f"{VARIABLES['starter_keys'].name}: {exc}"]) from None
        if self.principal_signing == "required" and not starters.signing:
            raise ConfigError([_signing_without_starters()])
        required = starters.signing and self.principal_signing != "optional"
        return PrincipalSignatures(starters, required=required)

    def codec_key_ring(self) -> KeyRing | None:
        """The key ring of `codec_keys` (None when unset); raises `ConfigError` naming
        AGENTLOOP_CODEC_KEYS when it is malformed."""
        if _present(self.codec_keys) is None:
            return None
        assert self.codec_keys is not None
        try:
            return KeyRing.parse(self.codec_keys)
        except KeyRingError as exc:
            name = VARIABLES["codec_keys"].name
            raise ConfigError([f"{name}={mask_key_ring(self.codec_keys)!r}: {exc}"]) from None

    def production_problems(self) -> list[str]:
        """What a production worker lacks (one line each, naming the setting to set); none
        in development. Raises `ConfigError` when a key setting is malformed."""
        if self.env != "production":
            return []
        mode = f"{VARIABLES['env'].name}=production"
        problems = []
        if not self.approvers().signing:
            problems.append(
                f"{mode}: {_or_file('approver_keys')} is not set: a production worker takes"
                " only signed approvals: set it to the approvers' public keys"
                " (NAME=ed25519:BASE64,..., the line `agentloop keys new NAME` prints)"
            )
        if self.codec_key_ring() is None:
            problems.append(
                f"{mode}: {_or_file('codec_keys')} is not set: a production worker encrypts"
                " what it writes to history: set it to ID:BASE64KEY (e.g."
                ' "k1:$(openssl rand -base64 32)"), the same keys on every worker and client'
            )
        return problems

    def check_production(self) -> None:
        """Raises one `ConfigError` listing `production_problems`, if any."""
        problems = self.production_problems()
        if problems:
            raise ConfigError(problems)

    def tls_config(self) -> TLSConfig | None:
        """The client TLS of the Temporal connection: None (plain, or the SDK's default TLS
        when an API key is set) unless a client certificate or a CA is configured."""
        cert, key, ca = self.temporal_tls_cert, self.temporal_tls_key, self.temporal_tls_ca
        if bool(cert) != bool(key):
            raise ConfigError([_TLS_PAIR_PROBLEM])
        if not (cert or ca):
            return None
        return TLSConfig(
            server_root_ca_cert=Path(ca).read_bytes() if ca else None,
            client_cert=Path(cert).read_bytes() if cert else None,
            client_private_key=Path(key).read_bytes() if key else None,
        )


# --- the one table of settings and their variables ---------------------------------------


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
    "otel": Variable("AGENTLOOP_OTEL", check_otel),
    "publish_events": Variable("AGENTLOOP_PUBLISH_EVENTS", check_publish_mode),
    "workflow_sandbox": Variable("AGENTLOOP_WORKFLOW_SANDBOX", check_sandbox_mode),
    "log_level": Variable("AGENTLOOP_LOG_LEVEL", check_log_level),
    "tools": Variable("AGENTLOOP_TOOLS", check_tool_modules),
    "approver_keys": Variable("AGENTLOOP_APPROVER_KEYS", check_approver_keys),
    "scripts_dir": Variable("AGENTLOOP_SCRIPTS_DIR", check_scripts_dir),
    "mcp_servers": Variable("AGENTLOOP_MCP_SERVERS", check_servers, secret=True, mask=mask_servers),
    "starter_keys": Variable("AGENTLOOP_STARTER_KEYS", check_approver_keys),
    "principal_signing": Variable("AGENTLOOP_PRINCIPAL_SIGNING", check_principal_signing),
    "env": Variable("AGENTLOOP_ENV", check_run_mode),
    "notify_webhooks": Variable("AGENTLOOP_NOTIFY_WEBHOOKS", check_webhooks, secret=True),
    "notify_secret": Variable("AGENTLOOP_NOTIFY_SECRET", secret=True),
    "inbox_url": Variable(
        "AGENTLOOP_INBOX_URL", http_url_check("http://127.0.0.1:8300"), is_url=True
    ),
    "inbox_tenants": Variable("AGENTLOOP_INBOX_TENANTS", check_tenant_map),
}
"""Settings field -> its environment variable (and file key: the field name)."""
FILE_SUFFIX = "_FILE"
"""`NAME_FILE=PATH`: NAME's value is the text of that file (how compose and Kubernetes hand
out secrets); for a list setting, one item a line."""

_NUMBER_FIELDS = frozenset(
    {
        "tool_http_timeout_seconds",
        "max_cached_workflows",
        "sticky_timeout_seconds",
        "max_concurrent_activities",
        "max_concurrent_workflow_tasks",
    }
)
_LIST_FIELDS = frozenset({"tools", "approver_keys", "starter_keys", "notify_webhooks"})
_TABLE_FIELDS = frozenset({"mcp_servers", "inbox_tenants"})
"""Given in the file as a table, kept as its JSON text (the variable's form)."""
_TLS_PAIR_PROBLEM = (
    "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together: set both (the client certificate"
    " and its private key, PEM files) or neither"
)


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


# --- loading ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedConfig:
    settings: Settings
    sources: Mapping[str, Source]
    """Field -> where its value came from."""
    file: str | None
    """`AGENTLOOP_CONFIG`, when set."""

    def entries(self) -> list[tuple[str, Any, Source]]:
        """`(variable, printable value, source)`, `AGENTLOOP_CONFIG` first."""
        rows: list[tuple[str, Any, Source]] = [
            (CONFIG_FILE_VARIABLE, self.file, "env" if self.file else "default")
        ]
        for field, variable in VARIABLES.items():
            value = shown_value(field, getattr(self.settings, field))
            rows.append((variable.name, value, self.sources[field]))
        return rows

    def lines(self) -> list[str]:
        """`NAME=value (source)`, one per setting, secrets masked."""
        return [
            f"{name}={'' if value is None else value} ({source})"
            for name, value, source in self.entries()
        ]

    def as_json(self) -> dict[str, dict[str, Any]]:
        """`{NAME: {"value": ..., "source": ...}}`, secrets masked."""
        return {name: {"value": value, "source": source} for name, value, source in self.entries()}


def load_config(
    env: Mapping[str, str] | None = None,
    *,
    check: bool = True,
    skip: Collection[str] = (),
) -> LoadedConfig:
    """The settings from `env` (default `os.environ`) over `AGENTLOOP_CONFIG`'s file over the
    defaults, and where each came from.

    With `check`, every value is checked except those of the fields in `skip` (which the
    caller replaces); either way a file that cannot be read, is not TOML, or holds an unknown
    key or a value of the wrong type is a problem. Raises one `ConfigError` listing them all.
    """
    env = os.environ if env is None else env
    problems: list[str] = []
    file = _present(env.get(CONFIG_FILE_VARIABLE))
    from_file = _read_config_file(file, problems) if file else {}

    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for field, variable in VARIABLES.items():
        from_env = _present(env.get(variable.name))
        if from_env is None:
            from_env = _read_value_file(field, env, problems)
        elif _present(env.get(variable.name + FILE_SUFFIX)) is not None:
            problems.append(
                f"{variable.name} and {variable.name}{FILE_SUFFIX} are both set: set one of them"
            )
        if from_env is not None:
            values[field], sources[field] = from_env, "env"
        elif field in from_file:
            values[field], sources[field] = from_file[field], "file"
        else:
            sources[field] = "default"

    if check:
        problems += _check_values(values, sources, file, skip)
    if problems:
        raise ConfigError(problems)
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        raise ConfigError(
            [
                _problem(str(error["loc"][0]), values, sources, file, error["msg"])
                for error in exc.errors()
            ]
        ) from None
    return LoadedConfig(settings=settings, sources=sources, file=file)


def _present(value: Any) -> Any:
    """None for an unset or empty (blank) value."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return value


def _signing_without_starters() -> str:
    return (
        f"{VARIABLES['principal_signing'].name}=required: {_or_file('starter_keys')} is not"
        " set: set it to the starters' public keys (NAME=ed25519:BASE64,...)"
    )


def _or_file(field: str) -> str:
    """`NAME (or NAME_FILE)`: how a setting is named to someone who must set it."""
    name = VARIABLES[field].name
    return f"{name} (or {name}{FILE_SUFFIX})"


def _read_value_file(field: str, env: Mapping[str, str], problems: list[str]) -> str | None:
    """The value `NAME_FILE` gives `field` (None when unset or the file is blank)."""
    variable = f"{VARIABLES[field].name}{FILE_SUFFIX}"
    path = _present(env.get(variable))
    if path is None:
        return None
    text, unreadable = read_text(path)
    if unreadable:
        problems.append(
            f"{variable}={path!r}: {unreadable}: point it at the file holding"
            f" {VARIABLES[field].name}'s value, or unset it"
        )
        return None
    if field in _LIST_FIELDS:
        text = ",".join(line.strip() for line in text.splitlines())
    value: str | None = _present(text.strip())
    return value


def _read_config_file(path: str, problems: list[str]) -> dict[str, Any]:
    where = f"{CONFIG_FILE_VARIABLE}={path!r}"
    text, unreadable = read_text(path)
    if unreadable:
        problems.append(f"{where}: {unreadable}: point it at a TOML file of settings, or unset it")
        return {}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"{path} ({CONFIG_FILE_VARIABLE}): invalid TOML: {exc}")
        return {}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in VARIABLES:
            problems.append(f"{path} ({CONFIG_FILE_VARIABLE}): unknown key {key!r}{_hint(key)}")
            continue
        if (
            key in _LIST_FIELDS
            and isinstance(value, list)
            and all(isinstance(v, str) for v in value)
        ):
            value = ",".join(value)
        if key in _TABLE_FIELDS and isinstance(value, dict):
            odd = _not_json(value, key)
            if odd is not None:
                problems.append(
                    f"{path} ({CONFIG_FILE_VARIABLE}): {odd} is a TOML date/time, which no"
                    " setting takes: write it as a string (in quotes)"
                )
                continue
            value = json.dumps(value)
        wanted = "a number or a string" if key in _NUMBER_FIELDS else "a string"
        if key in _LIST_FIELDS:
            wanted = "a string or an array of strings"
        if key in _TABLE_FIELDS:
            wanted = "a table (or its JSON text)"
        ok = isinstance(value, str) or (
            key in _NUMBER_FIELDS and isinstance(value, int | float) and not isinstance(value, bool)
        )
        if not ok:
            problems.append(
                f"{path} ({CONFIG_FILE_VARIABLE}): {key} must be {wanted},"
                f" not a TOML {_toml_type(value)}"
            )
            continue
        if _present(value) is not None:
            values[key] = value
    return values


def _not_json(value: Any, where: str) -> str | None:
    """Where in a table a value is that JSON has no word for (TOML's dates and times), as a
    dotted key; None when there is none."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None if value is None or isinstance(value, str | int | float) else where
    for key, item in items:
        found = _not_json(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}")
        if found is not None:
            return found
    return None


def _hint(key: str) -> str:
    by_variable = {v.name: field for field, v in VARIABLES.items()}
    if key.upper() in by_variable:
        return f": did you mean {by_variable[key.upper()]!r}? (keys are field names)"
    close = difflib.get_close_matches(key, list(VARIABLES), n=1)
    if close:
        return f": did you mean {close[0]!r}?"
    return f": the keys are {', '.join(VARIABLES)}"


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if isinstance(value, int | float):
        return "number"
    return "date/time"


def _check_values(
    values: Mapping[str, Any],
    sources: Mapping[str, Source],
    file: str | None,
    skip: Collection[str],
) -> list[str]:
    problems: list[str] = []
    for field, variable in VARIABLES.items():
        if field in skip or variable.check is None or field not in values:
            continue
        wrong = variable.check(values[field])
        if wrong:
            problems.append(_problem(field, values, sources, file, wrong))
    if values.get("principal_signing") == "required" and "starter_keys" not in values:
        problems.append(_signing_without_starters())
    tls_pair = ("temporal_tls_cert", "temporal_tls_key")
    if not set(tls_pair) & set(skip) and (tls_pair[0] in values) != (tls_pair[1] in values):
        problems.append(_TLS_PAIR_PROBLEM)
    return problems


def _problem(
    field: str,
    values: Mapping[str, Any],
    sources: Mapping[str, Source],
    file: str | None,
    wrong: str,
) -> str:
    """`NAME='value': what is wrong`, naming the file when the value came from it."""
    name = VARIABLES[field].name
    shown = shown_value(field, values.get(field))
    origin = f" ({field} in {file})" if sources.get(field) == "file" else ""
    return f"{name}={shown!r}{origin}: {wrong}"
