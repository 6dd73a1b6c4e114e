"""`cardflow doctor`, `cardflow endpoints` and `cardflow up` against real servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from redis import Redis as SyncRedis
from typer.testing import CliRunner

from services.cli.main import app
from shared.embedded import Endpoints
from shared.embedded.processes import free_ports
from shared.events import new_event_id

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(autouse=True)
def no_backend_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("CARDFLOW_")]:
        monkeypatch.delenv(key)


def secrets_of(endpoints: Endpoints) -> list[str]:
    """The secret parts of the endpoints: passwords in URLs and the S3 keys."""
    passwords = [url.rsplit("@", 1)[0].rsplit(":", 1)[1] for url in (endpoints.redis_url, endpoints.database_url)]
    return [*passwords, endpoints.s3_access_key, endpoints.s3_secret_key]


def test_doctor_passes_when_every_backend_answers(backends: Endpoints) -> None:
    result = runner.invoke(app, ["doctor"], env=backends.as_env())

    assert result.exit_code == 0, result.output
    assert "all backends reachable" in result.output
    assert f"cardflow {version('cardflow')} (Python " in result.output
    assert not [secret for secret in secrets_of(backends) if secret in result.output]
    in_chinese = runner.invoke(app, ["doctor", "--lang", "zh"], env=backends.as_env())
    assert in_chinese.exit_code == 0 and "所有后端均可连接" in in_chinese.output, in_chinese.output
    assert "cardflow 体检" in in_chinese.output and "条目数" in in_chinese.output and "发件箱行数" in in_chinese.output


def test_doctor_passes_as_a_service_login_that_may_not_read_the_config_schema(backends: Endpoints) -> None:
    """The gate's role connects only: doctor (the compose and Kubernetes healthcheck) says so, not a traceback."""
    env = backends.as_env() | {"CARDFLOW_REDIS_URL": backends.redis_url_for("gate"),
                               "CARDFLOW_DATABASE_URL": backends.database_url_for("gate")}  # fmt: skip
    env = {key: value for key, value in env.items() if key not in ("CARDFLOW_REDIS_USERS_FILE", "CARDFLOW_POSTGRES_ROLES_FILE")}
    assert "cardflow_gate" in env["CARDFLOW_DATABASE_URL"]
    admin = SyncRedis.from_url(backends.redis_url)
    foreign_stream = f"cf:doctor-{new_event_id()}"  # a cf:* stream the gate's Redis user may not read
    admin.xadd(foreign_stream, {"x": "1"})
    try:
        result = runner.invoke(app, ["doctor"], env=env)
    finally:
        admin.delete(foreign_stream)
        admin.close()

    assert result.exit_code == 0, result.output
    words = " ".join(result.output.split())
    assert "may not read the config schema" in words and "may not read every stream" in words


def test_doctor_names_the_unreachable_backend(backends: Endpoints) -> None:
    (closed_port,) = free_ports(1)
    env = backends.as_env() | {"CARDFLOW_REDIS_URL": f"redis://:hunter2@127.0.0.1:{closed_port}/0"}

    result = runner.invoke(app, ["doctor"], env=env)

    assert result.exit_code == 1
    assert "redis unreachable" in result.stderr
    assert "postgres" not in result.stderr and "s3" not in result.stderr
    assert "hunter2" not in result.output


def test_doctor_names_what_is_not_configured(data_dir_factory: Callable[[], Path]) -> None:
    result = runner.invoke(app, ["doctor", "--data-dir", str(data_dir_factory())])

    assert result.exit_code == 1
    for name in ("redis", "postgres", "s3"):
        assert f"{name} not configured" in result.stderr
    in_chinese = runner.invoke(app, ["doctor", "--data-dir", str(data_dir_factory()), "--lang", "zh"])
    assert in_chinese.exit_code == 1 and "尚未就绪" in in_chinese.stderr and "redis 未配置" in in_chinese.stderr


def test_doctor_finds_the_running_instance_by_data_dir(backends: Endpoints) -> None:
    assert backends.data_dir is not None
    result = runner.invoke(app, ["doctor", "--data-dir", backends.data_dir])

    assert result.exit_code == 0, result.output
    assert "instance" in result.output


def test_endpoints_exports_backend_secrets_only_when_asked(backends: Endpoints) -> None:
    assert backends.data_dir is not None
    shown = runner.invoke(app, ["endpoints", "--data-dir", backends.data_dir, "--show-secrets"])
    assert shown.exit_code == 0, shown.output
    assert Endpoints.from_shell(shown.stdout) == backends

    hidden = runner.invoke(app, ["endpoints", "--data-dir", backends.data_dir])
    assert hidden.exit_code == 0, hidden.output
    assert not any(secret in hidden.stdout for secret in secrets_of(backends))
    assert f"export CARDFLOW_DATA_DIR={backends.data_dir}" in hidden.stdout
    assert "# CARDFLOW_REDIS_URL=redis://:***@" in hidden.stdout and "# CARDFLOW_S3_SECRET_KEY=***" in hidden.stdout
    assert "no console runs on this instance yet" in hidden.stdout  # backends only: no API to point at


def test_endpoints_fails_without_a_running_instance(data_dir_factory: Callable[[], Path]) -> None:
    result = runner.invoke(app, ["endpoints", "--data-dir", str(data_dir_factory())])

    assert result.exit_code == 1
    assert "no cardflow instance is running" in result.stderr
    assert result.stdout == ""


@pytest.fixture
def running_up(data_dir_factory: Callable[[], Path]) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """`cardflow up` in a child process, waited for until it says it runs."""
    data_dir = data_dir_factory()
    up = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(data_dir)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("CARDFLOW_")} | {"COLUMNS": "200"},
    )  # fmt: skip
    assert up.stdout is not None
    lines = []
    for line in iter(up.stdout.readline, ""):
        lines.append(line)
        if line.startswith("Running."):
            break
    assert lines and lines[-1].startswith("Running."), "".join(lines)
    yield up, data_dir
    if up.poll() is None:
        up.kill()
        up.wait()


def test_up_serves_until_sigterm_and_a_second_shell_connects(running_up: tuple[subprocess.Popen[str], Path]) -> None:
    up, data_dir = running_up
    cardflow = f"{sys.executable} -m services.cli.main"
    second_shell = (f'eval "$({cardflow} endpoints --data-dir {data_dir})" && {cardflow} doctor && {cardflow} whoami'
                    f" && {cardflow} submit examples/minimal.json && {cardflow} token list")

    shell = subprocess.run(["bash", "-c", second_shell], cwd=REPO, capture_output=True, text=True, env={
        k: v for k, v in os.environ.items() if not k.startswith("CARDFLOW_")
    } | {"COLUMNS": "200"})  # fmt: skip
    token_file = data_dir / "admin.token"
    token_mode = token_file.stat().st_mode & 0o777
    up.send_signal(signal.SIGTERM)
    rest, _ = up.communicate(timeout=60)

    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert ": role admin (API http://127.0.0.1:" in shell.stdout  # whoami: the local admin token
    assert "created" in shell.stdout and "local admin of the embedded instance" in shell.stdout
    assert token_mode == 0o600
    assert up.returncode == 0, rest
    assert "Stopped." in rest
    assert sorted(p.name for p in (data_dir / "run").iterdir()) == ["owner.lock"]
