"""Configuration: environment over `AGENTLOOP_CONFIG`'s TOML file over defaults, every value
checked at start with one error naming each bad variable, secrets never printed, and
`agentloop config` / `agentloop worker` as real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.service import TLSConfig

from agentloop.runtime.config import (
    CONFIG_FILE_VARIABLE,
    VARIABLES,
    ConfigError,
    Settings,
    load_config,
)
from agentloop.runtime.config_variables import mask_secret
from agentloop.runtime.dev_server import free_port
from tests.cli.test_cli import agentloop, assert_no_traceback, process_env

PEM_CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
OPENAI_KEY = "sk-proj-Zq8vX2mN4pL7rT1wY5uK9sE3hG6jD0aF"
ANTHROPIC_KEY = "sk-ant-api03-Hk2Lm9Qw4Er7Ty1Ui8Op3As6Df0GhJkL"
TEMPORAL_KEY = "eyJhbGciOiJFUzI1NiJ9.tmprl-key-Wq3Er5Ty7Ui9"
DB_PASSWORD = "pg-Secr3t-pass"


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def problems_of(env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        Settings.load(env)
    return caught.value.problems


# --- loading ------------------------------------------------------------------------------


def test_every_settings_field_has_one_variable() -> None:
    assert set(VARIABLES) == set(Settings.model_fields)
    names = [v.name for v in VARIABLES.values()]
    assert len(set(names)) == len(names)
    assert CONFIG_FILE_VARIABLE not in names


def test_defaults_without_environment_or_file() -> None:
    loaded = load_config({})
    assert loaded.settings == Settings()
    assert set(loaded.sources.values()) == {"default"}
    assert loaded.settings.tls_config() is None


def test_environment_wins_over_the_file_and_the_file_over_defaults(tmp_path: Path) -> None:
    config = write(
        tmp_path / "agentloop.toml",
        'temporal_address = "file-host:7233"\n'
        'task_queue = "from-file"\n'
        "tool_http_timeout_seconds = 12.5\n",
    )
    env = {CONFIG_FILE_VARIABLE: config, "TEMPORAL_ADDRESS": "env-host:7234"}
    loaded = load_config(env)
    assert loaded.settings.temporal_address == "env-host:7234"
    assert loaded.settings.task_queue == "from-file"
    assert loaded.settings.tool_http_timeout_seconds == 12.5
    assert loaded.settings.temporal_namespace == "default"
    assert loaded.sources["temporal_address"] == "env"
    assert loaded.sources["task_queue"] == "file"
    assert loaded.sources["temporal_namespace"] == "default"
    assert Settings.from_env(env) == loaded.settings
    assert Settings.load(env) == loaded.settings


def test_empty_values_count_as_unset(tmp_path: Path) -> None:
    config = write(tmp_path / "agentloop.toml", 'task_queue = "from-file"\nui_url = ""\n')
    env = {
        CONFIG_FILE_VARIABLE: config,
        "AGENT_LOOP_TASK_QUEUE": "",
        "TEMPORAL_ADDRESS": "",
        "OPENAI_BASE_URL": "  ",
        "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS": "",
    }
    loaded = load_config(env)
    assert loaded.settings.task_queue == "from-file"
    assert loaded.sources["task_queue"] == "file"
    assert loaded.settings.temporal_address == "localhost:7233"
    assert loaded.settings.openai_base_url is None
    assert loaded.settings.ui_url == "http://localhost:8233"
    assert loaded.sources["ui_url"] == "default"
    assert load_config({CONFIG_FILE_VARIABLE: ""}).file is None


def test_an_unknown_file_key_is_named_with_the_file(tmp_path: Path) -> None:
    config = write(tmp_path / "agentloop.toml", 'tempral_address = "x:1"\nTASK_QUEUE = "q"\n')
    problems = problems_of({CONFIG_FILE_VARIABLE: config})
    assert len(problems) == 2
    assert all(config in p for p in problems)
    assert "unknown key 'tempral_address'" in problems[0]
    assert "did you mean 'temporal_address'" in problems[0]
    # Unknown keys are refused however lenient the caller is.
    with pytest.raises(ConfigError, match="tempral_address"):
        Settings.from_env({CONFIG_FILE_VARIABLE: config})


def test_an_environment_variable_name_as_file_key_points_at_the_field(tmp_path: Path) -> None:
    config = write(tmp_path / "agentloop.toml", 'AGENTLOOP_STORE_URL = "x.db"\n')
    (problem,) = problems_of({CONFIG_FILE_VARIABLE: config})
    assert "'AGENTLOOP_STORE_URL'" in problem and "'store_url'" in problem


def test_bad_toml_is_named_with_the_file(tmp_path: Path) -> None:
    config = write(tmp_path / "agentloop.toml", "temporal_address = localhost:7233\n")
    (problem,) = problems_of({CONFIG_FILE_VARIABLE: config})
    assert config in problem and "invalid TOML" in problem


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.toml")
    (problem,) = problems_of({CONFIG_FILE_VARIABLE: missing})
    assert CONFIG_FILE_VARIABLE in problem and missing in problem and "no such file" in problem


def test_a_file_value_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    config = write(
        tmp_path / "agentloop.toml",
        'temporal_address = 7233\ntool_http_timeout_seconds = true\nstore_url = ["a"]\n',
    )
    problems = problems_of({CONFIG_FILE_VARIABLE: config})
    assert len(problems) == 3
    assert all(config in p for p in problems)
    assert "temporal_address must be a string" in problems[0]
    assert "tool_http_timeout_seconds must be a number or a string" in problems[1]
    assert "store_url must be a string, not a TOML array" in problems[2]


def test_a_date_in_an_mcp_server_table_is_named_not_a_crash(tmp_path: Path) -> None:
    config = write(
        tmp_path / "agentloop.toml",
        '[mcp_servers.tickets]\nurl = "https://tickets.internal/mcp"\n'
        "[mcp_servers.tickets.headers]\nX-Since = 2026-01-01\n",
    )
    for load in (Settings.load, Settings.from_env):
        with pytest.raises(ConfigError) as caught:
            load({CONFIG_FILE_VARIABLE: config})
        (problem,) = caught.value.problems
        assert problem == (
            f"{config} (AGENTLOOP_CONFIG): mcp_servers.tickets.headers.X-Since is a TOML"
            " date/time, which no setting takes: write it as a string (in quotes)"
        )


def test_a_bad_value_from_the_file_names_the_variable_the_key_and_the_file(
    tmp_path: Path,
) -> None:
    config = write(tmp_path / "agentloop.toml", 'temporal_address = "localhost"\n')
    (problem,) = problems_of({CONFIG_FILE_VARIABLE: config})
    assert problem.startswith("TEMPORAL_ADDRESS='localhost' (temporal_address in ")
    assert config in problem and "expected host:port" in problem


def test_from_env_checks_types_but_not_files_or_formats(tmp_path: Path) -> None:
    # An environment for another machine: its files need not exist here.
    env = {"AGENTLOOP_PRICING_FILE": "/etc/agentloop/pricing.json", "TEMPORAL_ADDRESS": "t"}
    assert Settings.from_env(env).pricing_file == "/etc/agentloop/pricing.json"
    with pytest.raises(ConfigError, match="AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS='soon'"):
        Settings.from_env({"AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS": "soon"})
    with pytest.raises(ConfigError, match=r"AGENTLOOP_OTEL='jaeger'.*'off', 'console' or 'global'"):
        Settings.from_env({"AGENTLOOP_OTEL": "jaeger"})


# --- checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("TEMPORAL_ADDRESS", "localhost", "expected host:port, e.g. localhost:7233"),
        ("TEMPORAL_ADDRESS", "nonsense", "expected host:port"),
        ("TEMPORAL_ADDRESS", "localhost:99999", "port '99999' is not a number from 1 to 65535"),
        ("TEMPORAL_ADDRESS", "localhost:0", "not a number from 1 to 65535"),
        ("TEMPORAL_ADDRESS", "localhost:abc", "not a number from 1 to 65535"),
        ("TEMPORAL_ADDRESS", ":7233", "expected host:port"),
        ("TEMPORAL_ADDRESS", "http://localhost:7233", "no scheme"),
        ("TEMPORAL_ADDRESS", "::1:7233", "brackets"),
        (
            "AGENTLOOP_STORE_URL",
            "mysql://db/x",
            "expected sqlite:///PATH, a file path, or postgres",
        ),
        ("AGENTLOOP_STORE_URL", "sqlite:///", "no path after sqlite:///"),
        ("AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS", "0", "a positive number"),
        ("AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS", "-5", "a positive number"),
        ("AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS", "soon", "a positive number"),
        ("AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS", "inf", "a positive number"),
        ("AGENTLOOP_STICKY_TIMEOUT_SECONDS", "0", "a positive number"),
        ("AGENTLOOP_MAX_CACHED_WORKFLOWS", "-1", "a whole number, 0 or more"),
        ("AGENTLOOP_MAX_CONCURRENT_ACTIVITIES", "0", "a whole number, 1 or more, e.g. 100"),
        ("AGENTLOOP_MAX_CONCURRENT_ACTIVITIES", "2.5", "a whole number, 1 or more"),
        ("AGENTLOOP_MAX_CONCURRENT_WORKFLOW_TASKS", "many", "a whole number, 1 or more"),
        ("AGENTLOOP_PRICING_FILE", "/no/such/pricing.json", "no such file"),
        ("AGENTLOOP_EXAMPLE_SERVICE_URL", "127.0.0.1:8787", "expected an http(s) URL"),
        ("OPENAI_BASE_URL", "ftp://api.example.com", "expected an http(s) URL"),
        ("ANTHROPIC_BASE_URL", "https://", "expected an http(s) URL"),
        ("AGENTLOOP_UI_URL", "http://localhost:99999", "port is not a number"),
        ("TEMPORAL_TLS_CA", "/no/such/ca.pem", "no such file"),
        ("AGENTLOOP_OTEL", "jaeger", "expected off, console (spans printed on stderr) or global"),
        ("AGENTLOOP_OTEL", "on", "expected off, console"),
        ("AGENTLOOP_WORKFLOW_SANDBOX", "yes", "expected off (AgentRun runs unsandboxed"),
        ("AGENTLOOP_LOG_LEVEL", "LOUD", "expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("AGENTLOOP_REDACT", "card_number,phone", "no redactor phone: expected none, or names"),
    ],
)
def test_each_bad_value_is_named_with_its_variable_and_the_fix(
    variable: str, value: str, expected: str
) -> None:
    (problem,) = problems_of({variable: value})
    assert problem.startswith(f"{variable}={value!r}: "), problem
    assert expected in problem, problem


def test_the_example_message_reads_as_documented() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.load({"TEMPORAL_ADDRESS": "localhost"})
    assert str(caught.value) == (
        "invalid configuration: TEMPORAL_ADDRESS='localhost': expected host:port,"
        " e.g. localhost:7233"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"gpt-x": 3}', "the prices of 'gpt-x'"),
        ('{"gpt-x": [1]}', "the prices of 'gpt-x'"),
        ('{"gpt-x": [1, "two"]}', "the prices of 'gpt-x'"),
        ('{"gpt-x": [1, -2]}', "the prices of 'gpt-x'"),
    ],
)
def test_a_pricing_file_of_the_wrong_shape_is_named(
    tmp_path: Path, content: str, expected: str
) -> None:
    pricing = write(tmp_path / "pricing.json", content)
    (problem,) = problems_of({"AGENTLOOP_PRICING_FILE": pricing})
    assert problem.startswith(f"AGENTLOOP_PRICING_FILE={pricing!r}: ")
    assert expected in problem


def test_a_directory_is_not_a_pricing_file(tmp_path: Path) -> None:
    (problem,) = problems_of({"AGENTLOOP_PRICING_FILE": str(tmp_path)})
    assert "not a file" in problem


def test_every_problem_is_listed_in_one_error() -> None:
    problems = problems_of(
        {
            "TEMPORAL_ADDRESS": "localhost",
            "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS": "-1",
            "OPENAI_BASE_URL": "api.openai.com",
        }
    )
    assert [p.split("=")[0] for p in problems] == [
        "TEMPORAL_ADDRESS",
        "OPENAI_BASE_URL",
        "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS",
    ]


def test_good_values_pass(tmp_path: Path) -> None:
    pricing = write(tmp_path / "pricing.json", '{"priced-": [1000, 1000.5], "free": [0, 0]}')
    for address in ("localhost:7233", "10.0.0.5:1", "[::1]:7233", "ns.acct.tmprl.cloud:7233"):
        assert Settings.load({"TEMPORAL_ADDRESS": address}).temporal_address == address
    for store in ("sqlite:///x.db", "sqlite:////abs/x.db", "x.db", "postgres://u:p@h:5432/db"):
        assert Settings.load({"AGENTLOOP_STORE_URL": store}).store_url == store
    settings = Settings.load(
        {
            "AGENTLOOP_PRICING_FILE": pricing,
            "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS": "2.5",
            "OPENAI_BASE_URL": "https://gateway.example/v1",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:8788/anthropic",
            "AGENTLOOP_UI_URL": "http://localhost:8080",
            "AGENTLOOP_EXAMPLE_SERVICE_URL": "http://example-service:8787",
        }
    )
    assert settings.tool_http_timeout_seconds == 2.5
    sticky = Settings.load({"AGENTLOOP_STICKY_TIMEOUT_SECONDS": "2.5"}).sticky_timeout_seconds
    assert sticky == 2.5
    slots = Settings.load({"AGENTLOOP_MAX_CONCURRENT_ACTIVITIES": "20"})
    assert (slots.max_concurrent_activities, slots.max_concurrent_workflow_tasks) == (20, None)
    config = write(tmp_path / "slots.toml", "max_concurrent_workflow_tasks = 8\n")
    assert Settings.load({CONFIG_FILE_VARIABLE: config}).max_concurrent_workflow_tasks == 8
    assert Settings.load({"AGENTLOOP_OTEL": "console"}).otel == "console"
    config = write(tmp_path / "agentloop.toml", 'otel = "console"\n')
    assert Settings.load({CONFIG_FILE_VARIABLE: config}).otel == "console"
    assert Settings.load({"AGENTLOOP_LOG_LEVEL": "warning"}).log_level == "warning"
    config = write(tmp_path / "logs.toml", 'log_level = "DEBUG"\n')
    assert Settings.load({CONFIG_FILE_VARIABLE: config}).log_level == "DEBUG"


# --- masking ------------------------------------------------------------------------------


def test_secrets_show_only_their_last_four_characters() -> None:
    assert mask_secret(OPENAI_KEY) == f"sk-…{OPENAI_KEY[-4:]}"
    assert mask_secret(TEMPORAL_KEY) == f"…{TEMPORAL_KEY[-4:]}"
    assert mask_secret("scripted") == "***"  # too short to show any of it


def test_no_secret_appears_in_the_printed_configuration(tmp_path: Path) -> None:
    config = write(tmp_path / "agentloop.toml", f'anthropic_api_key = "{ANTHROPIC_KEY}"\n')
    store_url = f"postgresql://agentloop:{DB_PASSWORD}@db:5432/agentloop"
    loaded = load_config(
        {
            CONFIG_FILE_VARIABLE: config,
            "OPENAI_API_KEY": OPENAI_KEY,
            "TEMPORAL_API_KEY": TEMPORAL_KEY,
            "AGENTLOOP_STORE_URL": store_url,
            "OPENAI_BASE_URL": f"https://user:{DB_PASSWORD}@gateway.example/v1",
        }
    )
    assert loaded.settings.openai_api_key == OPENAI_KEY  # masked in output only
    text = "\n".join(loaded.lines()) + json.dumps(loaded.as_json())
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, TEMPORAL_KEY, DB_PASSWORD):
        assert secret not in text
    lines = loaded.lines()
    assert f"OPENAI_API_KEY=sk-…{OPENAI_KEY[-4:]} (env)" in lines
    assert f"ANTHROPIC_API_KEY=sk-…{ANTHROPIC_KEY[-4:]} (file)" in lines
    assert "AGENTLOOP_STORE_URL=postgresql://agentloop:***@db:5432/agentloop (env)" in lines
    assert OPENAI_KEY not in repr(loaded.settings)


def test_no_password_appears_in_an_error(tmp_path: Path) -> None:
    problems = problems_of(
        {
            "AGENTLOOP_STORE_URL": f"mysql://agentloop:{DB_PASSWORD}@db/agentloop",
            "OPENAI_BASE_URL": f"ftp://user:{DB_PASSWORD}@gateway.example",
        }
    )
    assert len(problems) == 2
    assert DB_PASSWORD not in "\n".join(problems)


# --- TLS ----------------------------------------------------------------------------------


def test_tls_certificate_and_key_go_together(tmp_path: Path) -> None:
    cert = write(tmp_path / "client.pem", PEM_CERT)
    key = write(tmp_path / "client.key", PEM_KEY)
    for env in ({"TEMPORAL_TLS_CERT": cert}, {"TEMPORAL_TLS_KEY": key}):
        problems = problems_of(env)
        assert any("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY" in p for p in problems), problems
    with pytest.raises(ConfigError, match="TEMPORAL_TLS_KEY"):
        Settings(temporal_tls_cert=cert).tls_config()

    settings = Settings.load({"TEMPORAL_TLS_CERT": cert, "TEMPORAL_TLS_KEY": key})
    tls = settings.tls_config()
    assert isinstance(tls, TLSConfig)
    assert tls.client_cert == PEM_CERT.encode()
    assert tls.client_private_key == PEM_KEY.encode()
    assert tls.server_root_ca_cert is None


def test_tls_files_must_exist_and_be_pem(tmp_path: Path) -> None:
    key = write(tmp_path / "client.key", PEM_KEY)
    not_pem = write(tmp_path / "client.der", "binary-ish")
    missing = str(tmp_path / "missing.pem")
    problems = problems_of({"TEMPORAL_TLS_CERT": missing, "TEMPORAL_TLS_KEY": key})
    assert problems == [
        f"TEMPORAL_TLS_CERT={missing!r}: no such file: expected the path of a PEM file"
    ]
    (problem,) = problems_of({"TEMPORAL_TLS_CERT": not_pem, "TEMPORAL_TLS_KEY": key})
    assert problem.startswith("TEMPORAL_TLS_CERT=") and "not a PEM file" in problem


def test_a_ca_alone_verifies_the_server(tmp_path: Path) -> None:
    ca = write(tmp_path / "ca.pem", PEM_CERT)
    tls = Settings.load({"TEMPORAL_TLS_CA": ca}).tls_config()
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == PEM_CERT.encode()
    assert tls.client_cert is None and tls.client_private_key is None


def test_an_api_key_alone_leaves_tls_to_the_sdk_default() -> None:
    settings = Settings.load({"TEMPORAL_API_KEY": TEMPORAL_KEY})
    assert settings.temporal_api_key == TEMPORAL_KEY
    assert settings.tls_config() is None  # Client.connect turns TLS on for an API key


# --- real processes -----------------------------------------------------------------------

_ALL_VARIABLES = {CONFIG_FILE_VARIABLE, *(v.name for v in VARIABLES.values())}


def clean_env(**overrides: str) -> dict[str, str]:
    """This environment without any agentloop setting, plus `overrides`."""
    env = {k: v for k, v in process_env().items() if k not in _ALL_VARIABLES}
    return {**env, **overrides}


@pytest.mark.integration
async def test_agentloop_config_prints_each_setting_and_its_source(tmp_path: Path) -> None:
    config = write(
        tmp_path / "agentloop.toml",
        f'task_queue = "from-file"\nanthropic_api_key = "{ANTHROPIC_KEY}"\n',
    )
    env = clean_env(
        AGENTLOOP_CONFIG=config,
        OPENAI_API_KEY=OPENAI_KEY,
        TEMPORAL_API_KEY=TEMPORAL_KEY,
        AGENTLOOP_STORE_URL=f"postgresql://agentloop:{DB_PASSWORD}@db:5432/agentloop",
        TEMPORAL_ADDRESS="temporal.internal:7233",
    )
    finished = await agentloop("config", env=env, cwd=tmp_path)
    assert finished.returncode == 0, finished.explain()
    assert_no_traceback(finished)
    lines = finished.stdout.splitlines()
    assert len(lines) == len(VARIABLES) + 1, finished.explain()
    assert f"AGENTLOOP_CONFIG={config} (env)" in lines
    assert "TEMPORAL_ADDRESS=temporal.internal:7233 (env)" in lines
    assert "AGENT_LOOP_TASK_QUEUE=from-file (file)" in lines
    assert "TEMPORAL_NAMESPACE=default (default)" in lines
    assert f"OPENAI_API_KEY=sk-…{OPENAI_KEY[-4:]} (env)" in lines
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, TEMPORAL_KEY, DB_PASSWORD):
        assert secret not in finished.stdout + finished.stderr

    as_json = await agentloop("config", "--json", env=env, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.explain()
    document = json.loads(as_json.stdout)
    assert set(document) == {line.split("=", 1)[0] for line in lines}
    assert document["AGENT_LOOP_TASK_QUEUE"] == {"value": "from-file", "source": "file"}
    assert document["AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS"] == {"value": 30.0, "source": "default"}
    assert document["OPENAI_BASE_URL"] == {"value": None, "source": "default"}
    assert document["OPENAI_API_KEY"]["value"].endswith(OPENAI_KEY[-4:])
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, TEMPORAL_KEY, DB_PASSWORD):
        assert secret not in as_json.stdout + as_json.stderr


@pytest.mark.integration
async def test_agentloop_config_exits_2_naming_every_problem(tmp_path: Path) -> None:
    env = clean_env(TEMPORAL_ADDRESS="localhost", AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS="0")
    for args in (("config",), ("config", "--json")):
        finished = await agentloop(*args, env=env, cwd=tmp_path)
        assert finished.returncode == 2, finished.explain()
        assert_no_traceback(finished)
        assert finished.stdout == ""
        assert "TEMPORAL_ADDRESS='localhost': expected host:port" in finished.stderr
        assert "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS='0'" in finished.stderr


@pytest.mark.integration
async def test_worker_with_a_bad_address_exits_2_naming_the_variable(tmp_path: Path) -> None:
    env = clean_env(TEMPORAL_ADDRESS="nonsense")
    finished = await agentloop("worker", env=env, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert "TEMPORAL_ADDRESS='nonsense'" in finished.stderr, finished.explain()
    assert "host:port" in finished.stderr
    assert not (tmp_path / ".agentloop").exists()  # nothing was started, no store opened


@pytest.mark.integration
async def test_connecting_commands_and_dev_check_before_starting(tmp_path: Path) -> None:
    config = write(tmp_path / "agentloop.toml", 'temporal_adress = "localhost:7233"\n')
    status = await agentloop(
        "status", "some-id", env=clean_env(AGENTLOOP_CONFIG=config), cwd=tmp_path
    )
    assert status.returncode == 2, status.explain()
    assert_no_traceback(status)
    assert config in status.stderr and "temporal_adress" in status.stderr

    state = tmp_path / "state"
    ports = [str(free_port()) for _ in range(4)]
    dev = await agentloop(
        "dev",
        *("--port", ports[0], "--ui-port", ports[1]),
        *("--example-port", ports[2], "--provider-port", ports[3]),
        "--state-dir",
        str(state),
        env=clean_env(AGENTLOOP_PRICING_FILE=str(tmp_path / "missing.json")),
        cwd=tmp_path,
    )
    assert dev.returncode == 2, dev.explain()
    assert_no_traceback(dev)
    assert "AGENTLOOP_PRICING_FILE=" in dev.stderr and "no such file" in dev.stderr
    assert not state.exists()  # nothing was started


def test_skipped_fields_are_not_checked() -> None:
    # `agentloop dev` runs its own server and services: what it replaces is not checked.
    env = {"TEMPORAL_ADDRESS": "nonsense", "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS": "0"}
    problems = problems_of(env)
    assert len(problems) == 2
    with pytest.raises(ConfigError) as caught:
        load_config(env, skip={"temporal_address"})
    assert [p.split("=")[0] for p in caught.value.problems] == [
        "AGENTLOOP_TOOL_HTTP_TIMEOUT_SECONDS"
    ]
