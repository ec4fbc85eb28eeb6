"""The checks of the settings' values (`config.VARIABLES`): each takes a present value and
returns what is wrong with it, or None. They read the files a setting names (PEM, pricing)
and import what tracing needs, so a worker refuses to start with a clear message instead of
failing later."""

from __future__ import annotations

import importlib
import json
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from agentloop.runtime.codec import KeyRing, KeyRingError
from agentloop.runtime.signing import ApproverKeys, SigningError, parse_names
from agentloop.runtime.start_signing import PrincipalSigning

OtelMode = Literal["off", "console", "global"]
"""`AGENTLOOP_OTEL`: no tracing; spans printed on stderr; spans into the process's own
OpenTelemetry TracerProvider (see `agentloop.runtime.tracing`)."""
RunMode = Literal["development", "production"]
"""`AGENTLOOP_ENV`: a production worker refuses to start without approval signing, payload
encryption and the workers' shared stream key (`Settings.production_problems`); `agentloop
dev` is always development."""
SandboxMode = Literal["off", "on"]
"""`AGENTLOOP_WORKFLOW_SANDBOX`: whether workers (and `agentloop replay`) run AgentRun inside
Temporal's workflow sandbox (see "Changing workflow code safely" in docs/guides/upgrading.md for
why it is off by default)."""
OTEL_MODULES = ("opentelemetry.sdk.trace", "temporalio.contrib.opentelemetry")
"""What tracing imports: the `otel` extra."""

Check = Callable[[Any], "str | None"]


def check_host_port(value: str) -> str | None:
    expected = "expected host:port, e.g. localhost:7233"
    if "://" in value:
        return f"{expected} (no scheme: drop {value.split('://')[0]}://)"
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        return expected
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            return expected
    elif ":" in host:
        return f"{expected} (an IPv6 host goes in brackets, e.g. [::1]:7233)"
    if any(c.isspace() or c in "/?#@" for c in host):
        return expected
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"port {port!r} is not a number from 1 to 65535: {expected}"
    return None


def check_store_url(value: str) -> str | None:
    """The URLs `agentloop.store.open_store` accepts, checked without opening anything."""
    expected = (
        "expected sqlite:///PATH, a file path, or postgresql://USER:PASSWORD@HOST:PORT/DB"
        " (postgres:// too)"
    )
    if value.startswith("sqlite:///"):
        return None if value.removeprefix("sqlite:///") else f"no path after sqlite:///: {expected}"
    if value.startswith(("postgresql://", "postgres://")):
        return None
    if "://" in value:
        return f"unsupported scheme: {expected}"
    return None


def http_url_check(example: str) -> Check:
    def check(value: str) -> str | None:
        expected = f"expected an http(s) URL, e.g. {example}"
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return expected
        try:
            parts.port  # noqa: B018 -- raises on a port that is not a number in range
        except ValueError:
            return f"its port is not a number from 0 to 65535: {expected}"
        return None

    return check


def check_webhooks(value: str) -> str | None:
    """`URL[,URL...]`, each an http(s) URL."""
    check = http_url_check("https://hooks.example.com/agentloop")
    for number, url in enumerate((u.strip() for u in value.split(",")), start=1):
        problem = check(url) if url else "empty"
        if problem:
            return f"webhook {number}: {problem}"
    return None


def check_positive_number(value: Any) -> str | None:
    expected = "expected a positive number of seconds, e.g. 30"
    if isinstance(value, bool):
        return expected
    try:
        number = float(value)
    except (TypeError, ValueError):
        return expected
    return None if math.isfinite(number) and number > 0 else expected


def check_inbox_key(value: str) -> str | None:
    try:
        key = bytes.fromhex(value.strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        return "expected 64 hex digits, as `agentloop keys inbox` prints them"
    return None


def whole_number_check(minimum: int, example: int) -> Check:
    """A whole number of at least `minimum`."""
    expected = f"expected a whole number, {minimum} or more, e.g. {example}"

    def check(value: Any) -> str | None:
        if isinstance(value, bool):
            return expected
        try:
            number = int(str(value))
        except ValueError:
            return expected
        return None if number >= minimum else expected

    return check


check_count = whole_number_check(0, 1000)
check_slots = whole_number_check(1, 100)
"""A worker's slots for one kind of task: 0 would never run any, so at least 1."""
check_port = whole_number_check(1, 9464)


def check_pricing_file(value: str) -> str | None:
    shape = 'a JSON object {"model-prefix": [input, output]} in USD per million tokens'
    text, unreadable = read_text(value)
    if unreadable:
        return f"{unreadable}: expected {shape}"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return f"not valid JSON ({exc}): expected {shape}"
    if not isinstance(data, dict):
        return f"expected {shape}, not a JSON {type(data).__name__}"
    for prefix, prices in data.items():
        if not (
            isinstance(prices, list) and len(prices) == 2 and all(_is_price(p) for p in prices)
        ):
            return (
                f"the prices of {prefix!r} are {json.dumps(prices)}: expected {shape},"
                ' e.g. {"gpt-4o": [2.5, 10.0]}'
            )
    return None


def check_pem_file(value: str) -> str | None:
    text, unreadable = read_text(value)
    if unreadable:
        return f"{unreadable}: expected the path of a PEM file"
    if "-----BEGIN" not in text:
        return "not a PEM file (no -----BEGIN line): expected the path of a PEM file"
    return None


def check_codec_keys(value: str) -> str | None:
    try:
        KeyRing.parse(value)
    except KeyRingError as exc:
        return str(exc)
    return None


def check_operators(value: str) -> str | None:
    try:
        parse_names(value)
    except SigningError as exc:
        return str(exc)
    return None


def check_approver_keys(value: str) -> str | None:
    try:
        ApproverKeys.parse(value)
    except SigningError as exc:
        return str(exc)
    return None


TENANT_MAP_SHAPE = 'expected a JSON object of user -> tenants, e.g. {"alice": ["acme"]}'


def parse_tenant_map(value: str) -> dict[str, list[str]]:
    """`inbox_tenants`: which tenants' runs each inbox user sees and decides; raises
    ValueError saying what is wrong."""
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}): {TENANT_MAP_SHAPE}") from None
    if not isinstance(data, dict):
        raise ValueError(TENANT_MAP_SHAPE)
    for user, tenants in data.items():
        if not isinstance(tenants, list) or not all(isinstance(t, str) for t in tenants):
            raise ValueError(f"user {user!r}: not a list of tenant names: {TENANT_MAP_SHAPE}")
    return data


def check_tenant_map(value: str) -> str | None:
    try:
        parse_tenant_map(value)
    except ValueError as exc:
        return str(exc)
    return None


def check_otel(value: str) -> str | None:
    """Also whether tracing can work in this process: the `otel` extra is installed and, for
    `global`, a TracerProvider is set (like a file that must exist, this is checked where the
    settings are loaded)."""
    if value not in get_args(OtelMode):
        return (
            "expected off, console (spans printed on stderr) or global (the process's"
            " OpenTelemetry TracerProvider)"
        )
    if value == "off":
        return None
    try:
        for module in OTEL_MODULES:
            importlib.import_module(module)
    except ImportError:
        return "tracing needs the OpenTelemetry packages: pip install 'agentloop[otel]'"
    if value == "global" and not _tracer_provider_is_set():
        return (
            "no OpenTelemetry TracerProvider is set in this process: run under"
            " opentelemetry-instrument (exporters configured by the OTEL_* variables), or set"
            " one with opentelemetry.trace.set_tracer_provider() before loading the settings;"
            " or use console"
        )
    return None


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def check_log_level(value: str) -> str | None:
    """A level `logging` knows by name, in any case."""
    if not isinstance(logging.getLevelName(value.upper()), int):
        return f"expected one of {', '.join(LOG_LEVELS)}"
    return None


def check_run_mode(value: str) -> str | None:
    if value not in get_args(RunMode):
        return (
            "expected development (the default) or production (workers refuse to start"
            " without approver keys, codec keys and the stream key)"
        )
    return None


def check_principal_signing(value: str) -> str | None:
    if value not in get_args(PrincipalSigning):
        return (
            "expected required (every run needs a starter's signature of its principal) or"
            " optional (only a signature that is given is checked)"
        )
    return None


PublishMode = Literal["on", "off"]
FailedRunsMode = Literal["fail", "complete"]
"""`AGENTLOOP_FAILED_RUNS`: a run that ends `failed` fails its workflow (the result in the
failure's details, the default), or completes it with the result (as earlier builds did)."""


def check_failed_runs(value: str) -> str | None:
    if value not in get_args(FailedRunsMode):
        return (
            "expected fail (a run ending failed is a failed workflow, the default) or complete"
            " (its workflow completes with the result, as earlier builds did)"
        )
    return None


def check_verification_rule(value: str) -> str | None:
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        return "expected all, or task family names separated by commas"
    return None


def check_publish_mode(value: str) -> str | None:
    if value not in get_args(PublishMode):
        return "expected on (runs publish what they do on their stream, the default) or off"
    return None


def check_redactors(value: str) -> str | None:
    from agentloop.redaction import PATTERNS, redactor_names

    unknown = [n for n in redactor_names(value) if n not in PATTERNS]
    if unknown:
        known = ", ".join(PATTERNS)
        return f"no redactor {', '.join(unknown)}: expected none, or names from {known}"
    return None


def check_sandbox_mode(value: str) -> str | None:
    if value not in get_args(SandboxMode):
        return "expected off (AgentRun runs unsandboxed, the default) or on (in Temporal's sandbox)"
    return None


def _tracer_provider_is_set() -> bool:
    from opentelemetry import trace

    # Until a provider is set, OpenTelemetry hands out a proxy that drops every span.
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _is_price(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def check_scripts_dir(value: str) -> str | None:
    if not Path(value).is_dir():
        return "no such folder: expected a folder of script files (*.json, *.toml)"
    return None


def read_text(path: str) -> tuple[str, str | None]:
    """`(the file's text, None)`, or `("", why it cannot be read)`."""
    file = Path(path)
    if not file.exists():
        return "", "no such file"
    if not file.is_file():
        return "", "not a file"
    try:
        return file.read_text(encoding="utf-8"), None
    except OSError as exc:
        return "", f"cannot read it ({exc.strerror or exc})"
    except UnicodeDecodeError:
        return "", "not a text file"


_MODULE_SOURCE = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$")


def check_tool_modules(value: str) -> str | None:
    """`module[:attribute],...`; whether each imports is checked when the worker loads them."""
    wrong = [
        s.strip() for s in value.split(",") if s.strip() and not _MODULE_SOURCE.match(s.strip())
    ]
    if wrong:
        return f"expected module[:attribute],... (e.g. my_team.tools), not {', '.join(wrong)}"
    return None
