"""Worker and client configuration: the environment, over an optional TOML file, over defaults.

`AGENTLOOP_CONFIG=/path/to/agentloop.toml` names the file; its keys are the settings' field
names (`temporal_address = "temporal.internal:7233"`). A variable set in the environment wins
over the file; an empty value counts as unset. `VARIABLES` is the one table of field <->
variable name (`config_variables.py`); `config_files.py` reads the TOML file and the
`NAME_FILE` files; `config_checks.py` checks each value.

- `Settings.load(env)`: every value checked; one `ConfigError` lists every problem, each
  naming its variable and what is expected. What the CLI and the worker start from.
- `Settings.from_env(env)`: the same sources, types only (no files or formats checked), e.g.
  for an environment meant for another machine.
- `load_config(env)`: the settings together with where each value came from, for
  `agentloop config` (secrets masked by `LoadedConfig.lines` / `LoadedConfig.as_json`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from temporalio.service import TLSConfig

from agentloop.contract import DEFAULT_TASK_QUEUE
from agentloop.runtime.codec import KeyRing, KeyRingError, mask_key_ring
from agentloop.runtime.config_checks import (
    FailedRunsMode,
    OtelMode,
    PublishMode,
    RunMode,
    SandboxMode,
    parse_tenant_map,
)
from agentloop.runtime.config_files import read_config_file, read_value_file

# `X as X`: the table's names are read from here too, where the settings are.
from agentloop.runtime.config_variables import CONFIG_FILE_VARIABLE as CONFIG_FILE_VARIABLE
from agentloop.runtime.config_variables import FILE_SUFFIX as FILE_SUFFIX
from agentloop.runtime.config_variables import VARIABLES as VARIABLES
from agentloop.runtime.config_variables import present, shown_value
from agentloop.runtime.mcp_config import McpConfigError, McpServerConfig, parse_servers
from agentloop.runtime.notice_routes import Webhook, listed_webhooks, parse_routes
from agentloop.runtime.signing import ApproverKeys, SigningError, parse_names
from agentloop.runtime.start_signing import PrincipalSignatures, PrincipalSigning

DEFAULT_STORE_URL = "sqlite:///.agentloop/store.db"
DEFAULT_EXAMPLE_SERVICE_URL = "http://127.0.0.1:8787"

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
    metrics_port: int | None = None
    """The port a worker serves Prometheus metrics on (`/metrics`: Temporal's worker metrics
    and agentloop's, `agentloop.runtime.metrics`); unset: none are served (`agentloop dev`
    serves them on a port of its own and prints the address)."""
    metrics_poll_seconds: float = 15.0
    """How often a worker serving metrics counts the runs waiting for people (from Temporal's
    visibility: one count per waiting phase)."""
    metrics_otlp_url: str | None = None
    """An OTLP/gRPC collector the worker pushes its metrics to instead (`metrics_port` unset)."""
    otel: OtelMode = "off"
    """OpenTelemetry tracing of runs through Temporal's TracingInterceptor
    (`agentloop.runtime.tracing`)."""
    stream_key: str | None = Field(default=None, repr=False)
    """A secret the worker seals its model calls' stream items with (`agentloop.stream_seals`):
    what makes them the run's own on its stream. Give every worker of a task queue the same
    one, and no client (whoever holds it can forge the model's text): a run's model call may
    run on another worker than the run, whose seal then reads as foreign. Unset: one drawn per
    worker process, right for a single worker (development, `agentloop dev`); a production
    worker refuses to start without it."""
    publish_events: PublishMode = "on"
    """`off`: this worker's model calls publish no text on their run's stream, and the runs
    `agentloop run` starts publish nothing (`publish_events: false`); `on`: what each run's
    input says (by default it publishes)."""
    redact: str = "card_number,api_key"
    """`NAME,...` or `none`: the redactors every tool's output passes through in this worker
    before the model or the store sees it (`agentloop.redaction`), beside each tool's own
    `redact`. Known: card_number (Luhn-checked), iban (mod-97-checked), api_key, email."""
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
    operators: str | None = None
    """`NAME,...`: the operators' role: who may settle any run's unknown write (`resolve`)
    besides its tool's approvers (`agentloop.runtime.signing`). Unset: only the approvers (or
    anyone, for a tool that names none). In the TOML file also an array."""
    scripts_dir: str | None = None
    """A folder of script files (`*.json`, `*.toml`) the scripted provider of `agentloop dev`
    and `agentloop.testing.Harness` plays, beside the built-in ones; read again on change."""
    mcp_servers: str | None = None
    """A JSON object of MCP server name -> server (`agentloop.runtime.mcp_config`), whose tools the
    worker offers; in the TOML file the `[mcp_servers.NAME]` tables."""
    starter_keys: str | None = None
    """`NAME=ed25519:BASE64,...`: the front ends (starters) whose signature of a run's start
    counts (`agentloop keys new NAME` makes one). With it, a run must carry a valid
    `principal_signature` unless `principal_signing` is `optional`."""
    principal_signing: PrincipalSigning | None = None
    """`required`: every run needs a starter's signature of its start; `optional`: only a
    signature that is given is checked. Unset: required when `starter_keys` is set."""
    env: RunMode = "development"
    """`production`: a worker refuses to start without `approver_keys`, `codec_keys` and
    `stream_key` (`production_problems`). `agentloop dev` always runs as development."""
    notify_webhooks: str | None = Field(default=None, repr=False)
    """`URL[,URL...]`: where a run's worker POSTs a JSON notice when the run starts waiting
    for a person, signed with `notify_secret` (`agentloop.activities.notices`); in the TOML
    file also an array. Each is told of every notice. A secret: only each URL's scheme,
    host and port are ever shown."""
    notify_routes: str | None = Field(default=None, repr=False)
    """A JSON object of route name -> `{"url": URL, "tools": [...], "tenants": [...]}`: a
    webhook told only of the calls of those tools (none: every tool) in the runs of those
    tenants (none: every tenant), beside `notify_webhooks`; with `remind_after_seconds`,
    `escalate_after_seconds` and `escalate_to` (another route, which `escalation_only` keeps
    to escalations) it is reminded of a call unanswered, then the call is escalated; in the
    TOML file the
    `[notify_routes.NAME]` tables (`agentloop.runtime.notice_routes`). Shown like
    `notify_webhooks`."""
    notify_secret: str | None = Field(default=None, repr=False)
    """The HMAC-SHA256 key of the notices' `X-Agentloop-Signature` header (needed with
    `notify_webhooks` or `notify_routes`)."""
    inbox_url: str = "http://127.0.0.1:8300"
    """Where people open the inbox (`agentloop inbox`): the notices link to the run there."""
    inbox_tenants: str | None = None
    """A JSON object of inbox user -> the tenants whose runs they see and decide (`agentloop
    inbox`); in the TOML file the `[inbox_tenants]` table. A user it does not name sees
    every tenant only in local mode (no `--auth-header`), none behind a proxy."""
    failed_runs: FailedRunsMode = "fail"
    """`fail`: a run that ends `failed` is a failed workflow in Temporal (its result in the
    failure's details; agentloop's clients read it all the same); `complete`: its workflow
    completes with the result, as earlier builds did, for clients that read `handle.result()`."""
    require_verification: str | None = None
    """`all`, or `FAMILY[,FAMILY...]`: the runs (of those task families) this worker starts
    require verification, as if started with `require_verification: true`; in the TOML file
    also an array."""

    def requires_verification(self, family: str | None) -> bool:
        """Whether this worker requires verification of a run of `family`."""
        names = {name.strip() for name in (self.require_verification or "").split(",")}
        return "all" in names or (family is not None and family in names)

    inbox_key: str | None = Field(default=None, repr=False)
    """The inbox's key for the runs' memo seals (`agentloop keys inbox` derives it from the
    workers' `stream_key`; it seals nothing). Unset: only the runs of a worker in the inbox's
    own process are listed (`agentloop dev`); a production inbox refuses to start."""
    inbox_wait_seconds: float = 2.0
    """How long an inbox view waits in all for runs' `status` answers (then: "not answering")."""
    inbox_refresh_seconds: float = 2.0
    """How long after one listing of the waiting runs the inbox starts the next, in the
    background (a view answers from the last complete one at once, saying how old it is)."""

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

    def notice_webhooks(self) -> list[Webhook]:
        """The webhooks of `notify_webhooks`, then those of `notify_routes` (none when both
        are unset); raises `ConfigError` when the routes are malformed, or webhooks are set
        without `notify_secret` (an unsigned notice could be forged by anyone)."""
        try:
            routes = parse_routes(self.notify_routes)
        except ValueError as exc:
            raise ConfigError([f"{VARIABLES['notify_routes'].name}: {exc}"]) from None
        webhooks = [*listed_webhooks(self.notify_webhooks), *routes]
        if webhooks and present(self.notify_secret) is None:
            name = VARIABLES["notify_webhooks" if self.notify_webhooks else "notify_routes"].name
            raise ConfigError(
                [
                    f"{name} is set without {VARIABLES['notify_secret'].name}: set the key"
                    " the notices are signed with"
                ]
            )
        return webhooks

    def inbox_tenant_map(self) -> dict[str, list[str]]:
        """`inbox_tenants` as user -> tenants (empty when unset); raises `ConfigError` naming
        AGENTLOOP_INBOX_TENANTS when it is malformed."""
        if present(self.inbox_tenants) is None:
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

    def operator_names(self) -> list[str]:
        """The names of `operators` (none when unset); raises `ConfigError` naming
        AGENTLOOP_OPERATORS when one is not a name."""
        try:
            return parse_names(self.operators)
        except SigningError as exc:
            raise ConfigError([f"{VARIABLES['operators'].name}: {exc}"]) from None

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
        if present(self.codec_keys) is None:
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
        if present(self.stream_key) is None:
            problems.append(
                f"{mode}: {_or_file('stream_key')} is not set: a production worker's model text"
                " shows on its run's stream only when sealed with the key every worker of the"
                " task queue holds: set it to a secret (e.g. $(openssl rand -base64 32)), the"
                " same on every worker and on no client (whoever holds it can forge the model's"
                " text)"
            )
        return problems

    def inbox_problems(self) -> list[str]:
        """What a production inbox lacks (none in development)."""
        if self.env != "production" or present(self.inbox_key) is not None:
            return []
        return [
            f"{VARIABLES['env'].name}=production: {_or_file('inbox_key')} is not set: a"
            " production inbox lists only the runs a worker vouches for: set it to what"
            " `agentloop keys inbox` prints with the workers' AGENTLOOP_STREAM_KEY"
        ]

    def inbox_memo_key(self) -> bytes | None:
        """`inbox_key` as bytes (None when unset)."""
        if present(self.inbox_key) is None:
            return None
        assert self.inbox_key is not None
        return bytes.fromhex(self.inbox_key.strip())

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


_TLS_PAIR_PROBLEM = (
    "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together: set both (the client certificate"
    " and its private key, PEM files) or neither"
)


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
    file = present(env.get(CONFIG_FILE_VARIABLE))
    from_file = read_config_file(file, problems) if file else {}

    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for field, variable in VARIABLES.items():
        from_env = present(env.get(variable.name))
        if from_env is None:
            from_env = read_value_file(field, env, problems)
        elif present(env.get(variable.name + FILE_SUFFIX)) is not None:
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


def _signing_without_starters() -> str:
    return (
        f"{VARIABLES['principal_signing'].name}=required: {_or_file('starter_keys')} is not"
        " set: set it to the starters' public keys (NAME=ed25519:BASE64,...)"
    )


def _or_file(field: str) -> str:
    """`NAME (or NAME_FILE)`: how a setting is named to someone who must set it."""
    name = VARIABLES[field].name
    return f"{name} (or {name}{FILE_SUFFIX})"


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
