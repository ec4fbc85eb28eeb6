"""The structured audit log: one JSON line per decision and action, with redaction.

`configure_logging` sets up structlog on top of stdlib `logging`, so our records, temporalio's
(`temporalio.activity`, `temporalio.workflow`, `temporalio.worker`, ...) and anything else that
logs through `logging` come out in one format: JSON lines (or a console rendering for
`agentloop dev`). `audit(event, **fields)` emits one record with `kind="audit"`.

Every record passes the same processors:
- inside an activity it carries `workflow_id`, `run_id`, `activity_id`, `activity_type` and
  `attempt` (read from `temporalio.activity.info()`); a `workflow.logger` record carries the
  workflow's ids from temporalio's `temporal_workflow` extra;
- a stdlib record with `extra={"audit": {...}}` (how the workflow writes its records through
  `workflow.logger`) is rendered like `audit()`'s: those fields flattened, `kind="audit"`;
- redaction, at every depth of nested dicts and lists: values under credential-like keys
  (`api_key`, `authorization`, `password`, `secret`, `token`, `cookie`, ...) become `"***"`;
  configured secrets are cut out of every string (error messages and tracebacks included;
  one shorter than `SHORT_SECRET_CHARS` only where it stands alone, not inside a word),
  as are URL passwords, bearer tokens and `sk-...` keys; configured personal-data fields
  become `"<redacted:sha256 first 12 hex>"` (correlatable, not readable); email addresses in
  any string are masked (`d***@example.com`); model text, reasoning and raw tool output under
  their usual keys (`text`, `content`, `thinking`, `reasoning`, `raw_items`, `preview`, ...)
  are replaced by their size. The callers log only ids, digests, sizes, statuses and classes
  in the first place: this is the net under them.
"""

from __future__ import annotations

import datetime
import functools
import logging
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TextIO, assert_never

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger
from temporalio import activity
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from agentloop.digests import canonical_json, sha256_hex

LogFormat = Literal["json", "console"]

AUDIT_LOGGER = "agentloop.runtime.audit"
"""The stdlib logger `audit()` writes to; it is always open at INFO, whatever the level."""

DEFAULT_REDACT_FIELDS = ("recipient", "customer_email", "email", "body")
"""Personal-data fields of the example tools; pass them (and yours) as `redact_fields`."""

MASK = "***"

_CREDENTIAL_PARTS = frozenset(
    {
        "authorization",
        "password",
        "passwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "cookie",
        "cookies",
        "credential",
        "credentials",
        "apikey",
    }
)
"""A key is a credential's when one of its words (split at `_`, `-`, `.`, camelCase) is one
of these (`access_token`, `Set-Cookie`, `client_secret`), or it contains `api_key` or
`private_key`. Words, not substrings: `input_tokens` is a count, not a token."""

_CONTENT_KEYS = frozenset(
    {
        "text",
        "content",
        "thinking",
        "redacted_thinking",
        "reasoning",
        "reasoning_content",
        "signature",
        "raw_items",
        "raw_arguments",
        "preview",
        "output",
        "tool_output",
        "result_content",
    }
)
"""Keys under which model text, hidden reasoning or raw tool output would travel: never
rendered, only their size."""

_EMAIL = re.compile(
    r"(?<![\w.%+-])([A-Za-z0-9])[A-Za-z0-9._%+-]*@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
)
_URL_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@")
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=-]{8,}")
_PROVIDER_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")
_TEMPORAL_SUFFIX = re.compile(r" \(\{.*\}\)$", re.DOTALL)
"""What temporalio's logger adapters append to a message: the details we render as fields."""
_WORD_SPLIT = re.compile(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])")
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/?#]*):.*@")
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&#]*")


SHORT_SECRET_CHARS = 8
"""A configured secret shorter than this is cut out only where it stands alone, not inside a
word: a one-letter password cut out of every word would leave no line readable."""


class Redactor:
    """The redaction processor; also usable on its own (`Redactor(...).redact(value)`)."""

    def __init__(self, secrets: Iterable[str | None] = (), redact_fields: Iterable[str] = ()):
        # Longest first, so a secret containing another is cut out whole.
        given = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._secrets = [s for s in given if len(s) >= SHORT_SECRET_CHARS]
        self._short = [s for s in given if len(s) < SHORT_SECRET_CHARS]
        self._short_alone = (
            re.compile(rf"(?<!\w)(?:{'|'.join(map(re.escape, self._short))})(?!\w)")
            if self._short
            else None
        )
        self._personal = frozenset(f.lower() for f in redact_fields)

    def __call__(self, logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
        return {key: self._field(key, value) for key, value in event_dict.items()}

    def redact(self, value: Any) -> Any:
        """`value` with every rule applied at every depth (no key of its own)."""
        if isinstance(value, str):
            return self.scrub(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, Mapping):
            return {str(k): self._field(str(k), v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self.redact(item) for item in value]
        # Anything else is rendered as text: scrub that text, not the object's repr later.
        return self.scrub(str(value))

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        if self._short_alone is not None and any(secret in text for secret in self._short):
            text = self._short_alone.sub(MASK, text)
        # Each pattern runs only on text holding what it needs: most values are ids and
        # statuses, and every record passes here (four regex passes per string cost more
        # than all the rest of a record).
        if "@" in text:
            text = _URL_PASSWORD.sub(rf"\g<1>{MASK}@", text)
        if "bearer" in text.lower():
            text = _BEARER.sub(rf"\g<1>\g<2>{MASK}", text)
        if "sk-" in text:
            text = _PROVIDER_KEY.sub(MASK, text)
        if "@" in text:
            text = _EMAIL.sub(rf"\g<1>{MASK}@\g<2>", text)
        return text

    def _field(self, key: str, value: Any) -> Any:
        if value is None:
            return None
        lowered = key.lower()
        if is_credential_key(key):
            return MASK
        if lowered in self._personal:
            return personal_digest(value)
        if lowered in _CONTENT_KEYS:
            return _omitted(value)
        return self.redact(value)


@functools.lru_cache(maxsize=4096)
def is_credential_key(key: str) -> bool:
    lowered = key.lower().replace("-", "_")
    if "api_key" in lowered or "apikey" in lowered or "private_key" in lowered:
        return True
    return any(word.lower() in _CREDENTIAL_PARTS for word in _WORD_SPLIT.split(key) if word)


def personal_digest(value: Any) -> str:
    """`<redacted:...>`: the same value always gives the same mark, so records correlate."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = canonical_json(value)
        except (TypeError, ValueError):
            text = str(value)
    return f"<redacted:{sha256_hex(text)[:12]}>"


def _omitted(value: Any) -> str:
    if isinstance(value, str):
        return f"<omitted: {len(value)} chars>"
    if isinstance(value, (list, tuple, dict)):
        return f"<omitted: {len(value)} items>"
    return "<omitted>"


# --- context processors ------------------------------------------------------------------


def add_activity_context(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """The running activity's identity, on every record emitted inside one."""
    if activity.in_activity():
        info = activity.info()
        event_dict.setdefault("workflow_id", info.workflow_id)
        event_dict.setdefault("run_id", info.workflow_run_id)
        event_dict.setdefault("activity_id", info.activity_id)
        event_dict.setdefault("activity_type", info.activity_type)
        event_dict.setdefault("attempt", info.attempt)
    return event_dict


def flatten_stdlib_extras(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """A stdlib record's `extra={"audit": {...}}` becomes fields (with `kind="audit"`), and
    temporalio's `temporal_activity` / `temporal_workflow` extras become the context fields."""
    record = event_dict.get("_record")
    if record is None or event_dict.get("_from_structlog"):
        return event_dict
    details_found = False
    activity_details = getattr(record, "temporal_activity", None)
    if isinstance(activity_details, Mapping):
        details_found = True
        for key, value in activity_details.items():
            event_dict.setdefault("run_id" if key == "workflow_run_id" else str(key), value)
    workflow_details = getattr(record, "temporal_workflow", None)
    if isinstance(workflow_details, Mapping):
        details_found = True
        for key, value in workflow_details.items():
            event_dict.setdefault("workflow_attempt" if key == "attempt" else str(key), value)
    if details_found and isinstance(event_dict.get("event"), str):
        event_dict["event"] = _TEMPORAL_SUFFIX.sub("", event_dict["event"])
    fields = getattr(record, "audit", None)
    if isinstance(fields, Mapping):
        reserved = {"event", "level", "timestamp", "logger"}
        event_dict.update({k: v for k, v in fields.items() if k not in reserved})
        event_dict["kind"] = "audit"
    return event_dict


def add_timestamp(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """ISO 8601 UTC; a stdlib record keeps its own creation time."""
    record = event_dict.get("_record")
    if record is not None and not event_dict.get("_from_structlog"):
        moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
    else:
        moment = datetime.datetime.now(tz=datetime.UTC)
    event_dict.setdefault("timestamp", moment.isoformat(timespec="milliseconds"))
    return event_dict


_LEADING = ("timestamp", "level", "event", "kind", "logger")


def _leading_keys_first(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """`timestamp level event kind logger` first, then the fields in the order given."""
    head = {key: event_dict[key] for key in _LEADING if key in event_dict}
    return {**head, **{k: v for k, v in event_dict.items() if k not in head}}


def _render_exception(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    # Tracebacks become a string *before* redaction, so secrets in messages are cut out.
    return structlog.processors.format_exc_info(logger, method, event_dict)


# --- configuration ---------------------------------------------------------------------------


class _Installed:
    handler: logging.Handler | None = None
    previous_root_level: int | None = None
    previous_audit_level: int | None = None


_INSTALLED = _Installed()


class _LevelOrAudit(logging.Filter):
    """Records below the configured level are dropped, except audit records."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.level or record.name == AUDIT_LOGGER:
            return True
        if isinstance(getattr(record, "audit", None), Mapping):
            return True
        return isinstance(record.msg, dict) and record.msg.get("kind") == "audit"


def configure_logging(
    level: str | int = "INFO",
    fmt: LogFormat = "json",
    stream: TextIO | None = None,
    redact_fields: Iterable[str] = (),
    secrets: Iterable[str | None] = (),
) -> None:
    """Send structlog and stdlib logging records to `stream` (default: stderr), as JSON lines
    or (`fmt="console"`) a human rendering, through the context and redaction processors.

    Idempotent: calling it again replaces the previous setup (no handler is added twice).
    Audit records are emitted whatever `level` says."""
    numeric = level if isinstance(level, int) else logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    if fmt not in ("json", "console"):
        raise ValueError(f"unknown log format {fmt!r}: json or console")
    stream = sys.stderr if stream is None else stream

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        flatten_stdlib_extras,
        add_activity_context,
        add_timestamp,
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Processor
    match fmt:
        case "json":
            renderer = structlog.processors.JSONRenderer(sort_keys=False)
        case "console":
            renderer = structlog.dev.ConsoleRenderer(colors=_isatty(stream))
        case _:
            assert_never(fmt)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _render_exception,
            Redactor(secrets, redact_fields),
            _leading_keys_first,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.addFilter(_LevelOrAudit(numeric))

    root = logging.getLogger()
    audit_logger = logging.getLogger(AUDIT_LOGGER)
    if _INSTALLED.handler is not None:
        root.removeHandler(_INSTALLED.handler)
    else:
        _INSTALLED.previous_root_level = root.level
        _INSTALLED.previous_audit_level = audit_logger.level
    root.addHandler(handler)
    # INFO always reaches the handler (audit records from `workflow.logger` are INFO); the
    # handler's filter drops what is below `level` and is not an audit record.
    root.setLevel(min(numeric, logging.INFO))
    audit_logger.setLevel(logging.INFO)
    _INSTALLED.handler = handler

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def reset_logging() -> None:
    """Undo `configure_logging` (for tests): our handler goes, levels and structlog's defaults
    come back."""
    root = logging.getLogger()
    if _INSTALLED.handler is not None:
        root.removeHandler(_INSTALLED.handler)
        if _INSTALLED.previous_root_level is not None:
            root.setLevel(_INSTALLED.previous_root_level)
        if _INSTALLED.previous_audit_level is not None:
            logging.getLogger(AUDIT_LOGGER).setLevel(_INSTALLED.previous_audit_level)
    _INSTALLED.handler = None
    structlog.reset_defaults()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --- emitting --------------------------------------------------------------------------------

_audit_logger = logging.getLogger(AUDIT_LOGGER)


def audit(event: str, /, **fields: Any) -> None:
    """One audit record: `event` (e.g. `tool.executed`) plus `fields`, `kind="audit"`.

    Goes through stdlib logging, so before `configure_logging` nothing is printed (stdlib's
    last-resort handler shows WARNING and up only): an unconfigured process leaks nothing."""
    _audit_logger.info(event, extra={"audit": fields})


def settings_secrets(settings: Any) -> list[str]:
    """The credentials a worker's settings hold, to pass as `configure_logging(secrets=...)`:
    every `*_api_key`/`*password*`/`*secret*`/`*token*` attribute, and the password in any
    `*_url`."""
    found: list[str] = []
    names: Sequence[str] = list(getattr(type(settings), "model_fields", None) or vars(settings))
    for name in names:
        value = getattr(settings, name, None)
        if not isinstance(value, str) or not value:
            continue
        if is_credential_key(name):
            found.append(value)
        elif name.endswith("_url"):
            match = re.search(r"://[^/\s:@]*:([^@\s/]+)@", value)
            if match:
                found.append(match.group(1))
    return found


def core_log_forwarding_runtime(core_level: str = "WARN") -> Runtime:
    """A temporalio `Runtime` that forwards the Rust core's logs to the stdlib logger
    `temporalio.core`, so they come out in our format too (pass it as
    `Client.connect(..., runtime=...)`; without it the core prints its own lines to stderr)."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level=core_level, other_level="ERROR"),
                forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
            )
        )
    )


def mask_url(url: str) -> str:
    """`url` with any password replaced by `***`, for error messages and logs."""
    head, sep, query = url.partition("?")
    at = head.rfind("@")
    if at >= 0:
        match = _USERINFO.match(head[: at + 1])
        if match:
            head = f"{match['scheme']}{match['user']}:***@{head[at + 1 :]}"
    return _QUERY_PASSWORD.sub(r"\1***", head + sep + query)
