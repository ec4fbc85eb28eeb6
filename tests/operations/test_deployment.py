"""The docker-compose deployment, checked by structure: no Docker engine is needed (nor used).

The compose file is read as YAML and interpolated the way `docker compose` does for the
`${VAR}`, `${VAR:-default}` forms it uses, so the worker's environment is fed to the real
`Settings.from_env`: a renamed variable on either side fails here, not in production.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import yaml
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from agentloop.demo.services import ExampleService
from agentloop.runtime.codec import EncryptionCodec, new_key
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.dev_server import free_port
from agentloop.worker import PRODUCTION_BANNER
from tests.cli.test_cli import AGENTLOOP, process_env
from tests.live import Servers
from tests.support import banner_process, worker_process

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

SERVICES = {
    "postgresql",
    "agentloop-store-init",
    "temporal",
    "temporal-ui",
    "example-service",
    "worker",
    "codec-server",
    "inbox",
}
LONG_RUNNING_RESTART = {"always", "unless-stopped", "on-failure"}
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
PROVIDER_BASE_URLS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
SECRET_NAME = re.compile(r"PASSWORD|PWD|SECRET|TOKEN|API_KEY")


# --- helpers --------------------------------------------------------------------------------


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def services() -> dict[str, dict[str, Any]]:
    found = load_compose()["services"]
    assert isinstance(found, dict)
    return found


SUBSTITUTION = re.compile(
    r"\$\$|\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
)


def interpolate(value: str, host_env: Mapping[str, str]) -> str:
    """Compose's variable substitution for the forms this file uses (no nesting)."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("braced") or match.group("bare")
        op, arg = match.group("op"), match.group("arg") or ""
        current = host_env.get(name)
        if op == ":-":
            return current if current else arg
        if op == "-":
            return arg if current is None else current
        if (op == ":?" and not current) or (op == "?" and current is None):
            raise KeyError(f"{name} is required: {arg}")
        return current or ""

    return SUBSTITUTION.sub(substitute, value)


def environment(service: Mapping[str, Any]) -> dict[str, str | None]:
    """A service's `environment`, map or list form, uninterpolated (None: pass-through)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in env)
        return {name: value for name, value in pairs}
    return {name: None if value is None else str(value) for name, value in env.items()}


def container_env(service: Mapping[str, Any], host_env: Mapping[str, str]) -> dict[str, str]:
    """What the container sees when compose runs with `host_env`."""
    result: dict[str, str] = {}
    for name, value in environment(service).items():
        if value is None:
            if name in host_env:
                result[name] = host_env[name]
        else:
            result[name] = interpolate(value, host_env)
    return result


def one_time_step(project: Path) -> Path:
    """The deploying guide's one-time step, in `project` (where the compose file would be): the
    codec key, an approver's public line (from the real `agentloop keys new`), the workers'
    stream key and the inbox's key derived from it (`agentloop keys inbox`) in ./secrets."""
    secrets = project / "secrets"
    secrets.mkdir(mode=0o700)
    (secrets / "codec_keys").write_text(f"k1:{new_key()}\n")
    (secrets / "stream_key").write_text(f"{base64.b64encode(os.urandom(32)).decode()}\n")
    made = subprocess.run(
        [*AGENTLOOP, "keys", "new", "ops", "--dir", str(project)],
        capture_output=True,
        text=True,
        check=True,
    )
    (secrets / "approver_keys").write_text(made.stdout)
    derived = subprocess.run(
        [*AGENTLOOP, "keys", "inbox"],
        capture_output=True,
        text=True,
        check=True,
        env={**process_env(), "AGENTLOOP_STREAM_KEY_FILE": str(secrets / "stream_key")},
    )
    (secrets / "inbox_key").write_text(derived.stdout)
    return secrets


def secret_files(project: Path) -> dict[str, Path]:
    """Each declared secret's file, for the compose file placed in `project`."""
    declared = load_compose().get("secrets") or {}
    return {name: project / spec["file"] for name, spec in declared.items()}


def with_secrets(
    service: Mapping[str, Any], env: Mapping[str, str], project: Path
) -> dict[str, str]:
    """`env` with each `/run/secrets/NAME` (where compose mounts the service's secrets) read
    from NAME's file in `project` instead."""
    files = secret_files(project)
    mounted = {f"/run/secrets/{name}": str(files[name]) for name in service.get("secrets") or []}
    return {name: mounted.get(value, value) for name, value in env.items()}


def dependencies(service: Mapping[str, Any]) -> dict[str, str]:
    """depends_on as {service: condition}; the short list form means service_started."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def image_reference(image: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference."""
    rest, _, digest = image.partition("@")
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = rest.rsplit(":", 1)
        return repository, tag, digest or None
    return rest, None, digest or None


def published_container_ports(service: Mapping[str, Any]) -> set[int]:
    ports: set[int] = set()
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    return ports


def host_mounts(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(source, container path) of each volume entry, short or long syntax."""
    mounts = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            mounts.append((str(entry.get("source", "")), str(entry["target"])))
        else:
            source, target = str(entry).split(":")[:2]
            mounts.append((source, target))
    return mounts


def healthcheck_text(service: Mapping[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(str(part) for part in test)


def one_shot_services(all_services: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """Services others wait on to *finish* (service_completed_successfully)."""
    return {
        dep
        for service in all_services.values()
        for dep, condition in dependencies(service).items()
        if condition == "service_completed_successfully"
    }


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, arguments = line.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Dockerfile ends in a continuation line"
    return instructions


def exec_or_shell_words(arguments: str) -> list[str]:
    """A CMD/ENTRYPOINT's words, from either the JSON (exec) or the shell form."""
    if arguments.startswith("["):
        words = yaml.safe_load(arguments)  # a JSON array is YAML too
        assert isinstance(words, list)
        return [str(word) for word in words]
    return arguments.split()


# --- the compose file -----------------------------------------------------------------------


def test_the_compose_file_has_every_service() -> None:
    assert set(services()) >= SERVICES


def test_every_image_is_pinned_to_a_tag() -> None:
    for name, service in services().items():
        image = service.get("image")
        assert image, f"{name}: no image (a built service is tagged too)"
        _, tag, digest = image_reference(image)
        assert tag or digest, f"{name}: {image} has no tag"
        assert tag != "latest", f"{name}: {image} floats"
        assert "$" not in image, f"{name}: {image} depends on the host environment"


def test_the_images_are_the_official_ones_at_supported_versions() -> None:
    all_services = services()
    repository, tag, _ = image_reference(all_services["postgresql"]["image"])
    assert repository == "postgres"
    assert tag and re.match(r"^1[2-9]\b", tag), f"PostgreSQL major version not pinned: {tag}"
    repository, tag, _ = image_reference(all_services["temporal"]["image"])
    assert repository == "temporalio/auto-setup"
    assert tag and re.fullmatch(r"1\.[23]\d\.\d+", tag), tag
    repository, tag, _ = image_reference(all_services["temporal-ui"]["image"])
    assert repository == "temporalio/ui"
    assert tag and re.fullmatch(r"2\.\d+\.\d+", tag), tag


def test_the_frontend_and_the_ui_are_published() -> None:
    all_services = services()
    assert 7233 in published_container_ports(all_services["temporal"])
    assert 8080 in published_container_ports(all_services["temporal-ui"])


def test_startup_order_is_postgresql_then_temporal_then_worker_without_cycles() -> None:
    all_services = services()
    graph = {name: dependencies(service) for name, service in all_services.items()}
    for name, deps in graph.items():
        assert set(deps) <= set(graph), f"{name} depends on an unknown service"
        assert name not in deps

    state: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert state.get(name) != "visiting", f"dependency cycle: {' -> '.join((*path, name))}"
        if state.get(name) == "done":
            return
        state[name] = "visiting"
        for dep in graph[name]:
            visit(dep, (*path, name))
        state[name] = "done"

    for name in graph:
        visit(name, ())

    assert graph["temporal"].get("postgresql") == "service_healthy"
    assert graph["worker"].get("temporal") == "service_healthy"
    assert graph["temporal-ui"].get("temporal") == "service_healthy"
    assert graph["agentloop-store-init"].get("postgresql") == "service_healthy"
    assert graph["worker"].get("agentloop-store-init") == "service_completed_successfully"
    for name, deps in graph.items():
        for dep, condition in deps.items():
            if condition == "service_healthy":
                assert "healthcheck" in all_services[dep], f"{name} waits on {dep}'s health"


def test_every_service_has_a_restart_policy() -> None:
    all_services = services()
    one_shot = one_shot_services(all_services)
    for name, service in all_services.items():
        policy = str(service.get("restart", ""))
        if name in one_shot:
            # Restarting a job that compose waits on to finish would race with that wait.
            assert policy == "no", f"{name}: a one-shot job says restart: 'no' explicitly"
        else:
            assert policy.split(":")[0] in LONG_RUNNING_RESTART, f"{name}: restart {policy!r}"


def test_postgresql_temporal_and_example_service_have_healthchecks() -> None:
    all_services = services()
    assert "pg_isready" in healthcheck_text(all_services["postgresql"])
    temporal_check = healthcheck_text(all_services["temporal"])
    assert "temporal operator cluster health" in temporal_check
    assert "temporal:7233" in temporal_check
    assert "/_control/health" in healthcheck_text(all_services["example-service"])


async def test_the_example_service_healthcheck_asks_a_route_the_service_serves(
    tmp_path: Path,
) -> None:
    service = services()["example-service"]
    url = re.search(r"http://[^'\" ]+", healthcheck_text(service))
    assert url, "no URL in the example service's healthcheck"
    check = urlsplit(url.group(0))
    command = [str(word) for word in service["command"]]
    assert command[:3] == ["python", "-m", "agentloop.demo.services.app"]
    assert command[command.index("--port") + 1] == str(check.port)
    assert command[command.index("--host") + 1] == "0.0.0.0"

    example = ExampleService(tmp_path / "example.db")
    base_url = await example.start(host="127.0.0.1", port=0)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(base_url.rstrip("/") + check.path) as response,
        ):
            assert response.status == 200
    finally:
        await example.stop()


def test_named_volumes_are_declared_and_hold_the_data() -> None:
    data = load_compose()
    declared = set(data.get("volumes") or {})
    all_services = data["services"]
    for name, service in all_services.items():
        for source, _ in host_mounts(service):
            if source and not source.startswith((".", "/", "~", "$")):
                assert source in declared, f"{name} mounts undeclared volume {source}"
            elif source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
    postgres_mounts = dict((t, s) for s, t in host_mounts(all_services["postgresql"]))
    assert postgres_mounts.get("/var/lib/postgresql/data") in declared
    example_mounts = dict((t, s) for s, t in host_mounts(all_services["example-service"]))
    command = [str(word) for word in all_services["example-service"]["command"]]
    db_path = PurePosixPath(command[command.index("--db") + 1])
    assert example_mounts.get(str(db_path.parent)) in declared, "the example data is not kept"


def test_the_worker_environment_configures_settings_from_env(tmp_path: Path) -> None:
    all_services = services()
    one_time_step(tmp_path)
    worker = all_services["worker"]
    worker_env = with_secrets(worker, container_env(worker, host_env={}), tmp_path)
    settings = Settings.load(worker_env)

    assert settings.temporal_address == "temporal:7233"
    assert settings.task_queue == "agent-loop"
    assert settings.temporal_namespace == "default"

    store = urlsplit(settings.store_url)
    assert store.scheme in ("postgresql", "postgres")
    assert store.hostname == "postgresql" and store.hostname in all_services
    assert (store.port or 5432) == 5432
    postgres_env = container_env(all_services["postgresql"], host_env={})
    assert store.username == postgres_env["POSTGRES_USER"]
    assert store.password == postgres_env["POSTGRES_PASSWORD"]
    init_env = container_env(all_services["agentloop-store-init"], host_env={})
    assert store.path == "/" + init_env["AGENTLOOP_DB"] == "/agentloop"

    example = urlsplit(settings.example_service_url)
    assert example.hostname == "example-service" and example.hostname in all_services
    command = [str(word) for word in all_services["example-service"]["command"]]
    assert str(example.port) == command[command.index("--port") + 1]


def test_the_worker_follows_the_host_environment(tmp_path: Path) -> None:
    host = {
        "POSTGRES_USER": "ops",
        "POSTGRES_PASSWORD": "s3cret",
        "OPENAI_API_KEY": "sk-from-host",
        "ANTHROPIC_API_KEY": "ak-from-host",
        "OPENAI_BASE_URL": "https://gateway.example/v1",
        "AGENT_LOOP_TASK_QUEUE": "agents-eu",
    }
    all_services = services()
    one_time_step(tmp_path)
    worker = all_services["worker"]
    settings = Settings.from_env(with_secrets(worker, container_env(worker, host), tmp_path))
    assert settings.openai_api_key == "sk-from-host"
    assert settings.anthropic_api_key == "ak-from-host"
    assert settings.openai_base_url == "https://gateway.example/v1"
    assert settings.task_queue == "agents-eu"
    store = urlsplit(settings.store_url)
    assert (store.username, store.password) == ("ops", "s3cret")
    temporal_env = container_env(all_services["temporal"], host)
    assert (temporal_env["POSTGRES_USER"], temporal_env["POSTGRES_PWD"]) == ("ops", "s3cret")


def test_provider_keys_come_from_the_host_and_base_urls_stay_unset_unless_given() -> None:
    worker = environment(services()["worker"])
    for name in PROVIDER_KEYS:
        assert worker.get(name) == f"${{{name}:-}}", f"{name} must be ${{{name}:-}}"
    for name in PROVIDER_BASE_URLS:
        # `${X:-}` would set an empty string, which the official clients take as the base URL
        # instead of their default: pass-through (no value) leaves it unset.
        assert name in worker and worker[name] is None, f"{name} must be a bare pass-through"
    unset = container_env(services()["worker"], host_env={})
    assert not any(unset.get(name) for name in PROVIDER_KEYS)
    assert not any(name in unset for name in PROVIDER_BASE_URLS)


def test_no_secret_is_written_in_the_file() -> None:
    defaults: set[str] = set()
    for name, service in services().items():
        for variable, value in environment(service).items():
            if value is None or not SECRET_NAME.search(variable):
                continue
            match = re.fullmatch(r"\$\{(\w+)(?::-(.*))?\}", value)
            assert match, f"{name}.{variable} is a literal, not a ${{VAR}} substitution"
            if match.group(2):
                defaults.add(match.group(2))
        store_url = environment(service).get("AGENTLOOP_STORE_URL")
        if store_url:
            userinfo = re.match(r"postgres(?:ql)?://(\$\{[^}]*\}):(\$\{[^}]*\})@", store_url)
            assert userinfo, f"the store URL's user and password are not substituted: {store_url}"
            password = re.fullmatch(r"\$\{POSTGRES_PASSWORD:-([^}]*)\}", userinfo.group(2))
            assert password, store_url
            defaults.add(password.group(1))
    # One local-only default for the PostgreSQL password, the same everywhere; nothing else.
    assert len(defaults) == 1, defaults
    assert "local" in defaults.pop()


def test_temporal_uses_postgresql_and_the_mounted_dynamic_config() -> None:
    all_services = services()
    temporal = all_services["temporal"]
    env = container_env(temporal, host_env={})
    assert env["DB"] == "postgres12"
    assert env["DB_PORT"] == "5432"
    assert env["POSTGRES_SEEDS"] == "postgresql"
    postgres_env = container_env(all_services["postgresql"], host_env={})
    assert env["POSTGRES_USER"] == postgres_env["POSTGRES_USER"]
    assert env["POSTGRES_PWD"] == postgres_env["POSTGRES_PASSWORD"]

    # DYNAMIC_CONFIG_FILE_PATH is relative to TEMPORAL_HOME (/etc/temporal) in the image.
    in_container = PurePosixPath("/etc/temporal") / env["DYNAMIC_CONFIG_FILE_PATH"]
    for source, target in host_mounts(temporal):
        if in_container.is_relative_to(target):
            on_host = ROOT / source / in_container.relative_to(target)
            break
    else:
        pytest.fail(f"{in_container} is not mounted from deploy/")
    assert on_host.resolve().is_relative_to(ROOT / "deploy")
    config = yaml.safe_load(on_host.read_text())
    assert isinstance(config, dict) and config
    for key, entries in config.items():
        assert isinstance(entries, list) and entries, key
        for entry in entries:
            assert set(entry) <= {"value", "constraints"} and "value" in entry, key


def test_workers_run_in_production_mode_with_the_keys_as_secrets(tmp_path: Path) -> None:
    data = load_compose()
    worker = data["services"]["worker"]
    env = container_env(worker, host_env={})
    assert env["AGENTLOOP_ENV"] == "production"
    assert {"codec_keys", "approver_keys", "stream_key"} <= set(worker["secrets"])
    assert env["AGENTLOOP_CODEC_KEYS_FILE"] == "/run/secrets/codec_keys"
    assert env["AGENTLOOP_APPROVER_KEYS_FILE"] == "/run/secrets/approver_keys"
    assert env["AGENTLOOP_STREAM_KEY_FILE"] == "/run/secrets/stream_key"
    for name, service in data["services"].items():
        if name != "worker":
            # Whoever holds the stream key can seal text as the model's: workers only.
            assert "stream_key" not in (service.get("secrets") or []), name
            assert not any("STREAM_KEY" in variable for variable in environment(service)), name
    for name, spec in data["secrets"].items():
        # Made by the one-time step, in a folder the image never holds.
        assert PurePosixPath(spec["file"]).parent == PurePosixPath("secrets"), (name, spec)

    # Before the one-time step (blank files) the workers refuse to start, naming each key.
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for file in secret_files(tmp_path).values():
        file.write_text("\n")
    with pytest.raises(ConfigError) as refused:
        Settings.load(with_secrets(worker, env, tmp_path)).check_production()
    assert len(refused.value.problems) == 3
    assert "AGENTLOOP_APPROVER_KEYS" in refused.value.problems[0]
    assert "AGENTLOOP_CODEC_KEYS" in refused.value.problems[1]
    assert "AGENTLOOP_STREAM_KEY" in refused.value.problems[2]

    for file in secret_files(tmp_path).values():
        file.unlink()
    secrets.rmdir()
    one_time_step(tmp_path)
    settings = Settings.load(with_secrets(worker, env, tmp_path))
    assert settings.production_problems() == []
    assert list(settings.approvers().keys) == ["ops"]
    assert settings.stream_key == (secrets / "stream_key").read_text().strip()


async def test_the_worker_starts_as_compose_runs_it_in_production(
    tmp_path: Path, servers: Servers
) -> None:
    """The worker service's command with its environment and the one-time step's secrets, on
    this test's Temporal (a SQLite store: no PostgreSQL here): it serves as a production
    worker, the three keys read from the mounted files."""
    worker = services()["worker"]
    command = [interpolate(str(word), {}) for word in worker["command"]]
    assert command == ["agentloop", "worker"]
    one_time_step(tmp_path)
    env = with_secrets(worker, container_env(worker, host_env={}), tmp_path)
    env.update(
        TEMPORAL_ADDRESS=servers.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=f"compose-worker-{tmp_path.name}",
        AGENTLOOP_STORE_URL=f"sqlite:///{tmp_path / 'store.db'}",
        AGENTLOOP_EXAMPLE_SERVICE_URL=servers.service.base_url,
        # A free port for the metrics compose serves on 9464: tests may run side by side.
        AGENTLOOP_METRICS_PORT=str(free_port()),
    )
    async with worker_process(env, (*AGENTLOOP, *command[1:]), PRODUCTION_BANNER) as process:
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0


async def test_the_codec_server_decrypts_history_for_the_ui(tmp_path: Path) -> None:
    all_services = services()
    one_time_step(tmp_path)
    codec, ui = all_services["codec-server"], all_services["temporal-ui"]
    command = [interpolate(str(word), {}) for word in codec["command"]]
    assert command[:2] == ["agentloop", "codec-server"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    port = int(command[command.index("--port") + 1])
    assert published_host_ports(codec) == {port: "127.0.0.1"}, "the codec server decrypts"
    assert "codec_keys" in codec["secrets"]
    assert dependencies(ui).get("codec-server") == "service_started"

    # The UI's browser calls the codec server's published address, from the UI's origin.
    endpoint = container_env(ui, host_env={})["TEMPORAL_CODEC_ENDPOINT"]
    assert endpoint == f"http://localhost:{port}"
    ui_url = Settings.from_env(
        with_secrets(all_services["worker"], container_env(all_services["worker"], {}), tmp_path)
    ).ui_url
    assert urlsplit(ui_url).port in published_host_ports(ui)
    assert command[command.index("--origin") + 1] == ui_url

    # The real codec server with the compose environment and the workers' keys decrypts what
    # a worker encrypted, for that origin.
    command[command.index("--port") + 1] = str(free_port())
    command[command.index("--host") + 1] = "127.0.0.1"
    env = with_secrets(codec, container_env(codec, host_env={}), tmp_path)
    ring = Settings.load(env).codec_key_ring()
    assert ring is not None
    sealed = EncryptionCodec.from_ring(ring).encrypt(
        Payload(metadata={"encoding": b"json/plain"}, data=b'"secret"')
    )
    ready = "agentloop codec-server on "
    async with banner_process([*AGENTLOOP, *command[1:]], ready, env={**process_env(), **env}) as (
        _,
        banner,
    ):
        url = banner.split(ready)[1].split()[0]
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{url}/decode",
                json={"payloads": [json_format.MessageToDict(sealed)]},
                headers={"Origin": ui_url},
            ) as response,
        ):
            assert response.status == 200, await response.text()
            assert response.headers["Access-Control-Allow-Origin"] == ui_url
            (decoded,) = (await response.json())["payloads"]
    assert base64.b64decode(decoded["data"]) == b'"secret"'


async def test_the_inbox_runs_behind_a_proxy_taking_the_user_from_its_header(
    tmp_path: Path, client: Client
) -> None:
    """The inbox service as compose would run it (its command, its environment, the workers'
    codec keys), on this test's Temporal: the user is the proxy's header's, a request without
    it is refused, and its healthcheck asks a route it serves to anyone."""
    all_services = services()
    one_time_step(tmp_path)
    inbox = all_services["inbox"]
    command = [interpolate(str(word), {}) for word in inbox["command"]]
    assert command[:2] == ["agentloop", "inbox"]
    header = command[command.index("--auth-header") + 1]
    assert header == "X-Forwarded-User"
    assert command[command.index("--host") + 1] == "0.0.0.0"  # allowed: a proxy names users
    port = int(command[command.index("--port") + 1])
    assert published_host_ports(inbox) == {port: "127.0.0.1"}, "only a proxy may reach it"
    assert "codec_keys" in inbox["secrets"]  # it reads what the workers encrypt
    assert "inbox_key" in inbox["secrets"]  # it checks what the workers vouch for
    assert dependencies(inbox).get("temporal") == "service_healthy"
    found = re.search(r"http://[^'\" ]+", healthcheck_text(inbox))
    assert found, "no URL in the inbox's healthcheck"
    check = urlsplit(found.group(0))
    assert check.port == port

    env = with_secrets(inbox, container_env(inbox, host_env={}), tmp_path)
    env["TEMPORAL_ADDRESS"] = client.service_client.config.target_host
    env["AGENTLOOP_INBOX_TENANTS"] = '{"alice": ["default"]}'
    settings = Settings.load(env)
    assert settings.codec_key_ring() is not None
    assert settings.env == "production" and settings.inbox_problems() == []
    worker_env = container_env(all_services["worker"], host_env={})
    assert urlsplit(worker_env["AGENTLOOP_INBOX_URL"]).port == port  # the notices' links

    command[command.index("--port") + 1] = str(free_port())
    command[command.index("--host") + 1] = "127.0.0.1"
    ready = "agentloop inbox on "
    async with banner_process([*AGENTLOOP, *command[1:]], ready, env={**process_env(), **env}) as (
        _,
        banner,
    ):
        url = banner.split(ready)[1].split()[0]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/") as response:
                assert response.status == 401
            async with session.get(f"{url}/", headers={header: "alice"}) as response:
                assert response.status == 200
                assert "alice · default" in await response.text()
            async with session.get(f"{url}{check.path}") as response:
                assert response.status == 200


def published_host_ports(service: Mapping[str, Any]) -> dict[int, str]:
    """Host port -> the interface it is published on, for `IP:HOST:CONTAINER` entries."""
    published: dict[int, str] = {}
    for entry in service.get("ports") or []:
        ip, host, _ = str(entry).split(":")
        published[int(host)] = ip
    return published


def test_the_worker_scales_out() -> None:
    worker = services()["worker"]
    assert "container_name" not in worker, "a fixed name prevents --scale"
    assert not worker.get("ports"), "a published port prevents --scale"
    replicas = (worker.get("deploy") or {}).get("replicas", 1)
    assert isinstance(replicas, int) and replicas >= 1
    assert [str(word) for word in worker["command"]] == ["agentloop", "worker"]


def test_the_store_database_is_created_by_a_script_from_deploy() -> None:
    init = services()["agentloop-store-init"]
    mounts = dict((target, source) for source, target in host_mounts(init))
    command = [str(word) for word in init["command"]]
    script_in_container = PurePosixPath(command[-1])
    source = mounts[str(script_in_container.parent)]
    script = ROOT / source / script_in_container.name
    assert script.resolve().is_relative_to(ROOT / "deploy")
    text = script.read_text()
    assert "CREATE DATABASE" in text and "NOT EXISTS" in text, "must be idempotent"


def compose_command() -> list[str] | None:
    """`docker compose` (the plugin) or a standalone Compose v2 `docker-compose`, if any."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        probe = subprocess.run(
            [*command, "version", "--short"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0 and probe.stdout.strip().lstrip("v").startswith("2."):
            return command
    return None


def test_docker_compose_validates_the_file() -> None:
    command = compose_command()
    if command is None:
        pytest.skip(
            "no Docker Compose v2 here (neither the `docker compose` plugin nor a standalone "
            "`docker-compose` v2): the file is checked structurally only"
        )
    # `config` parses, interpolates and validates against the Compose schema; no engine needed.
    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", "")},
    )
    # Warnings count too (an unset variable, an obsolete key), and some wrappers of the binary
    # lose its exit code: a valid file prints nothing at all.
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


# --- the image ------------------------------------------------------------------------------


def test_the_base_image_is_a_pinned_slim_python() -> None:
    instructions = dockerfile_instructions()
    args: dict[str, str] = {}
    stages: set[str] = set()
    bases = []
    for keyword, arguments in instructions:
        if keyword == "ARG" and "=" in arguments:
            name, _, default = arguments.partition("=")
            args.setdefault(name.strip(), default.strip().strip("\"'"))
        elif keyword == "FROM":
            words = arguments.split()
            words = [word for word in words if not word.startswith("--platform")]
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], words[0])
            if len(words) >= 3 and words[1].upper() == "AS":
                stages.add(words[2])
            if image not in stages:
                bases.append(image)
    assert bases
    for image in bases:
        repository, tag, _ = image_reference(image)
        assert repository in ("python", "docker.io/library/python"), image
        assert tag and tag != "latest", image
        assert re.match(r"3\.1[12](\.\d+)?-slim", tag), f"{image}: not a slim Python 3.11/3.12"


def test_the_project_is_installed_at_build_time_without_dev_extras() -> None:
    runs = [arguments for keyword, arguments in dockerfile_instructions() if keyword == "RUN"]
    installs = [run for run in runs if re.search(r"\bpip install\b", run)]
    assert installs, "no `pip install` in a RUN step"
    # The project itself, with the optional tracing extra (AGENTLOOP_OTEL works in the image).
    project = re.compile(r"""pip install[^&;]*\s["']?\.(\[otel\])?["']?(\s|$)""")
    assert any(project.search(run) for run in installs)
    assert not any("[dev]" in run or "-e " in run for run in installs)
    copied = [
        arguments.split()[:-1]
        for keyword, arguments in dockerfile_instructions()
        if keyword == "COPY" and not arguments.startswith("--from")
    ]
    sources = {source for group in copied for source in group}
    assert {"pyproject.toml", "README.md", "agentloop"} <= sources  # README: pyproject's readme


def test_the_image_is_production_by_default() -> None:
    envs = " ".join(
        arguments for keyword, arguments in dockerfile_instructions() if keyword == "ENV"
    )
    assert re.search(r"(^|\s)AGENTLOOP_ENV=production(\s|$)", envs), envs


def test_the_image_runs_as_a_non_root_user() -> None:
    users = [arguments for keyword, arguments in dockerfile_instructions() if keyword == "USER"]
    assert users, "no USER: the container would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]


def test_the_image_runs_the_worker_and_downloads_nothing_at_start() -> None:
    instructions = dockerfile_instructions()
    entrypoint = [args for keyword, args in instructions if keyword == "ENTRYPOINT"]
    cmd = [args for keyword, args in instructions if keyword == "CMD"]
    assert entrypoint or cmd
    words = (exec_or_shell_words(entrypoint[-1]) if entrypoint else []) + (
        exec_or_shell_words(cmd[-1]) if cmd else []
    )
    assert words[:2] == ["agentloop", "worker"], words
    text = " ".join(words)
    for forbidden in ("curl", "wget", "pip install", "pip3 install", "apt-get"):
        assert forbidden not in text, f"{forbidden!r} at container start"


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        verdict = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            glob = pattern.removeprefix("!").strip("/").removeprefix("**/")
            parts = PurePosixPath(path).parts
            hit = fnmatch(path, glob) or any(
                fnmatch("/".join(parts[i:]), glob) or fnmatch(part, glob)
                for i, part in enumerate(parts)
            )
            if hit:
                verdict = not negated
        return verdict

    for path in (".venv", ".git", ".agentloop", ".pytest_cache", ".mypy_cache", ".ruff_cache"):
        assert ignored(path), f"{path} would be sent to the Docker daemon"
    assert ignored("agentloop/__pycache__")
    assert ignored(".env"), "a local .env (keys) would be sent to the Docker daemon"
    assert ignored("secrets/codec_keys"), "the one-time step's keys would be in the image"
    for path in ("pyproject.toml", "README.md", "agentloop/worker.py"):
        assert not ignored(path), f"{path} is needed by the build"
    assert not ignored("agentloop/demo/scripts/travel.json"), "package data is needed"
