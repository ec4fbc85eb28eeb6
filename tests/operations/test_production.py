"""Production mode (`AGENTLOOP_ENV=production`): a worker refuses to start without signed
approvals and payload encryption, saying which setting to set; with both it serves. Secrets
come from files (`NAME_FILE`), as compose and Kubernetes mount them."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from temporalio.client import Client

from agentloop.runtime.codec import new_key
from agentloop.runtime.config import FILE_SUFFIX, VARIABLES, ConfigError, Settings, load_config
from agentloop.runtime.signing import new_private_key_pem
from agentloop.worker import PRODUCTION_BANNER, worker_parts
from tests.operations.test_cli import AGENTLOOP, agentloop, assert_no_traceback
from tests.operations.test_config import clean_env, problems_of, write
from tests.support import worker_env, worker_process


def approver_line(name: str) -> str:
    return f"{name}={new_private_key_pem()[1]}"


def test_a_setting_is_read_from_the_file_its_file_variable_names(tmp_path: Path) -> None:
    lines = [approver_line("ops"), approver_line("lead")]
    approvers = write(tmp_path / "approver_keys", "\n".join(lines) + "\n\n")
    codec = write(tmp_path / "codec_keys", f"k1:{new_key()}\n")
    loaded = load_config(
        {"AGENTLOOP_APPROVER_KEYS_FILE": approvers, "AGENTLOOP_CODEC_KEYS_FILE": codec}
    )
    assert sorted(loaded.settings.approvers().keys) == ["lead", "ops"]  # one line each
    ring = loaded.settings.codec_key_ring()
    assert ring is not None and ring.ids == ["k1"]
    assert loaded.sources["codec_keys"] == "env"


def test_no_file_variable_is_another_settings_variable() -> None:
    names = {variable.name for variable in VARIABLES.values()}
    assert not {f"{name}{FILE_SUFFIX}" for name in names} & names


def test_a_file_variable_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    (problem,) = problems_of({"AGENTLOOP_CODEC_KEYS_FILE": missing})
    assert problem.startswith(f"AGENTLOOP_CODEC_KEYS_FILE={missing!r}: no such file")
    codec = write(tmp_path / "codec_keys", f"k1:{new_key()}")
    (problem,) = problems_of(
        {"AGENTLOOP_CODEC_KEYS_FILE": codec, "AGENTLOOP_CODEC_KEYS": f"k2:{new_key()}"}
    )
    assert "AGENTLOOP_CODEC_KEYS and AGENTLOOP_CODEC_KEYS_FILE are both set" in problem
    # A malformed value from a file is checked like one from the environment.
    bad = write(tmp_path / "bad", "k1:short")
    (problem,) = problems_of({"AGENTLOOP_CODEC_KEYS_FILE": bad})
    assert problem.startswith("AGENTLOOP_CODEC_KEYS='k1:***': key 'k1' is")


def test_production_needs_approver_keys_and_codec_keys() -> None:
    assert Settings().production_problems() == []  # development: nothing demanded
    problems = Settings(env="production").production_problems()
    assert len(problems) == 2
    assert problems[0].startswith(
        "AGENTLOOP_ENV=production: AGENTLOOP_APPROVER_KEYS (or AGENTLOOP_APPROVER_KEYS_FILE)"
        " is not set: a production worker takes only signed approvals"
    )
    assert problems[1].startswith(
        "AGENTLOOP_ENV=production: AGENTLOOP_CODEC_KEYS (or AGENTLOOP_CODEC_KEYS_FILE) is not"
        " set: a production worker encrypts"
    )
    (only,) = Settings(env="production", codec_keys=f"k1:{new_key()}").production_problems()
    assert "AGENTLOOP_APPROVER_KEYS" in only
    ready = Settings(
        env="production", codec_keys=f"k1:{new_key()}", approver_keys=approver_line("a")
    )
    assert ready.production_problems() == []
    (problem,) = problems_of({"AGENTLOOP_ENV": "prod"})
    assert problem.startswith("AGENTLOOP_ENV='prod': expected development (the default) or")


async def test_a_worker_of_your_own_refuses_production_settings_without_the_keys(
    client: Client, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    settings = Settings(env="production", store_url=f"sqlite:///{store}")
    with pytest.raises(ConfigError, match="AGENTLOOP_APPROVER_KEYS"):
        async with worker_parts(client, settings):
            pass
    assert not store.exists()  # refused before anything opened


@pytest.mark.integration
async def test_a_production_worker_without_keys_refuses_to_start_saying_which(
    tmp_path: Path,
) -> None:
    for env in (
        clean_env(AGENTLOOP_ENV="production"),
        clean_env(AGENTLOOP_CONFIG=write(tmp_path / "agentloop.toml", 'env = "production"\n')),
    ):
        finished = await agentloop("worker", env=env, cwd=tmp_path)
        assert finished.returncode == 2, finished.explain()
        assert_no_traceback(finished)
        assert finished.stderr.startswith("invalid configuration (2 problems):")
        assert "AGENTLOOP_APPROVER_KEYS (or AGENTLOOP_APPROVER_KEYS_FILE) is not set" in (
            finished.stderr
        )
        assert "AGENTLOOP_CODEC_KEYS (or AGENTLOOP_CODEC_KEYS_FILE) is not set" in finished.stderr
        assert not (tmp_path / ".agentloop").exists()  # no store opened, nothing started

    only_codec = clean_env(AGENTLOOP_ENV="production", AGENTLOOP_CODEC_KEYS=f"k1:{new_key()}")
    finished = await agentloop("worker", env=only_codec, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert finished.stderr.startswith("invalid configuration: AGENTLOOP_ENV=production:")
    assert "AGENTLOOP_APPROVER_KEYS" in finished.stderr
    assert "AGENTLOOP_CODEC_KEYS" not in finished.stderr


@pytest.mark.integration
async def test_a_production_worker_with_both_keys_serves(
    client: Client, worker_settings: Settings, tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    env = {
        **worker_env(client, worker_settings, tmp_path / "store.db"),
        "AGENTLOOP_ENV": "production",
        "AGENTLOOP_CODEC_KEYS_FILE": write(secrets / "codec_keys", f"k1:{new_key()}\n"),
        "AGENTLOOP_APPROVER_KEYS_FILE": write(secrets / "approver_keys", approver_line("ops")),
    }
    # Ready once its polling line says it is a production worker.
    async with worker_process(env, (*AGENTLOOP, "worker"), PRODUCTION_BANNER) as worker:
        worker.send_signal(signal.SIGTERM)
        assert await worker.wait() == 0
