"""Production mode (`AGENTLOOP_ENV=production`): a worker refuses to start without signed
approvals, payload encryption and the workers' shared stream key, saying which setting to set;
with all three it serves. Secrets come from files (`NAME_FILE`), as compose and Kubernetes
mount them. Development keeps one stream key drawn per process."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from temporalio.client import Client

from agentloop import stream_seals
from agentloop.runtime.codec import new_key
from agentloop.runtime.config import FILE_SUFFIX, VARIABLES, ConfigError, Settings, load_config
from agentloop.runtime.signing import new_private_key_pem
from agentloop.worker import PRODUCTION_BANNER, install_stream_key, worker_parts
from tests.cli.test_cli import AGENTLOOP, agentloop, assert_no_traceback
from tests.operations.test_config import clean_env, problems_of, write
from tests.support import STREAM_KEY, worker_env, worker_process


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


def test_production_needs_approver_keys_codec_keys_and_the_stream_key() -> None:
    assert Settings().production_problems() == []  # development: nothing demanded
    problems = Settings(env="production").production_problems()
    assert len(problems) == 3
    assert problems[0].startswith(
        "AGENTLOOP_ENV=production: AGENTLOOP_APPROVER_KEYS (or AGENTLOOP_APPROVER_KEYS_FILE)"
        " is not set: a production worker takes only signed approvals"
    )
    assert problems[1].startswith(
        "AGENTLOOP_ENV=production: AGENTLOOP_CODEC_KEYS (or AGENTLOOP_CODEC_KEYS_FILE) is not"
        " set: a production worker encrypts"
    )
    assert problems[2].startswith(
        "AGENTLOOP_ENV=production: AGENTLOOP_STREAM_KEY (or AGENTLOOP_STREAM_KEY_FILE) is not"
        " set: a production worker's model text shows on its run's stream only when sealed"
    )
    assert "openssl rand -base64 32" in problems[2] and "no client" in problems[2]
    keys = {"codec_keys": f"k1:{new_key()}", "stream_key": STREAM_KEY}
    (only,) = Settings(env="production", **keys).production_problems()
    assert "AGENTLOOP_APPROVER_KEYS" in only
    keys["approver_keys"] = approver_line("a")
    assert Settings(env="production", **keys).production_problems() == []
    (only,) = Settings(env="production", **{**keys, "stream_key": " "}).production_problems()
    assert only.startswith("AGENTLOOP_ENV=production: AGENTLOOP_STREAM_KEY")  # blank: unset
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
        assert finished.stderr.startswith("invalid configuration (3 problems):")
        for name in ("AGENTLOOP_APPROVER_KEYS", "AGENTLOOP_CODEC_KEYS", "AGENTLOOP_STREAM_KEY"):
            assert f"{name} (or {name}_FILE) is not set" in finished.stderr
        assert not (tmp_path / ".agentloop").exists()  # no store opened, nothing started

    # With the other two keys, the stream key alone is named.
    without_stream_key = clean_env(
        AGENTLOOP_ENV="production",
        AGENTLOOP_CODEC_KEYS=f"k1:{new_key()}",
        AGENTLOOP_APPROVER_KEYS=approver_line("ops"),
    )
    finished = await agentloop("worker", env=without_stream_key, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert finished.stderr.startswith(
        "invalid configuration: AGENTLOOP_ENV=production: AGENTLOOP_STREAM_KEY"
        " (or AGENTLOOP_STREAM_KEY_FILE) is not set"
    ), finished.explain()
    assert "openssl rand -base64 32" in finished.stderr
    assert "AGENTLOOP_CODEC_KEYS" not in finished.stderr
    assert "AGENTLOOP_APPROVER_KEYS" not in finished.stderr


@pytest.mark.integration
async def test_a_production_worker_with_the_three_keys_serves(
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
    # The stream key from its file too, as compose mounts it.
    env["AGENTLOOP_STREAM_KEY_FILE"] = write(
        secrets / "stream_key", env.pop("AGENTLOOP_STREAM_KEY")
    )
    # Ready once its polling line says it is a production worker.
    async with worker_process(env, (*AGENTLOOP, "worker"), PRODUCTION_BANNER) as worker:
        worker.send_signal(signal.SIGTERM)
        assert await worker.wait() == 0


def test_development_keeps_one_stream_key_drawn_per_process() -> None:
    """Without `AGENTLOOP_STREAM_KEY` (development, `agentloop dev`: one worker process) every
    worker of the process seals and checks with the one key drawn first; a configured key is
    the one every worker holding it derives."""
    before = stream_seals.worker_key()
    try:
        stream_seals._installed.clear()  # as if no worker had started: the first one draws
        install_stream_key(Settings())
        drawn = stream_seals.worker_key()
        assert drawn is not None and len(drawn) == 32
        install_stream_key(Settings())  # another worker of the same process
        assert stream_seals.worker_key() == drawn
        install_stream_key(Settings(stream_key=STREAM_KEY))
        assert stream_seals.worker_key() == stream_seals.derived_key(STREAM_KEY) != drawn
    finally:
        stream_seals._installed[:] = [] if before is None else [before]
