"""The real (subprocess) runner on fake GPUs against real Redis: env, logs, status file, exit codes, SIGTERM/SIGKILL."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from redis.asyncio import Redis

from agent_support import Dispatcher, finished, of_type, running_agent, wait_for_reports
from services.agent.build import AgentOptions
from shared.settings import Settings

AGENT = "real-a1"

SHOW_ENV_AND_CHECKPOINT = textwrap.dedent(
    """
    import json, os
    for key in ("CUDA_VISIBLE_DEVICES", "CARDFLOW_TASK_ID", "CARDFLOW_LEASE_ID", "CARDFLOW_RESUME_FROM", "MY_SETTING"):
        print(f"{key}={os.environ.get(key)}")
    print("leaked=" + ",".join(k for k in os.environ if k in ("CARDFLOW_REDIS_URL", "CARDFLOW_DATA_DIR")))
    status = os.environ["CARDFLOW_STATUS_FILE"]
    assert os.path.dirname(status) == os.environ["CARDFLOW_CHECKPOINT_DIR"]
    with open(status + ".tmp", "w") as f:
        json.dump({"progress": 1.0, "output_units": 640, "checkpoint": "file://ckpt/final", "checksum": "sha256:ab"}, f)
    os.replace(status + ".tmp", status)
    """
)

FAIL_WITH_3 = "import sys; print('loss went NaN', flush=True); sys.exit(3)"

# Writes a status file once its SIGTERM handler is installed, so the test knows it is ready.
SIGTERM_TASK = textwrap.dedent(
    """
    import json, os, signal, sys, time
    status = os.environ["CARDFLOW_STATUS_FILE"]
    def write(progress, checkpoint=None):
        with open(status + ".tmp", "w") as f:
            json.dump({"progress": progress, "checkpoint": checkpoint}, f)
        os.replace(status + ".tmp", status)
    def on_term(signum, frame):
        if os.environ.get("MODE") == "ignore":
            print("ignoring SIGTERM", flush=True)
            return
        write(0.3, "file://ckpt/at-sigterm")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    write(0.2)
    while True:
        time.sleep(0.05)
    """
)


def real_options(tmp_path: Path, **overrides: object) -> AgentOptions:
    fields = {
        "agent_id": AGENT,
        "fake_gpus": 2,
        "card_type": "T4",
        "heartbeat_s": 0.2,
        "checkpoint_root": tmp_path / "ckpt",
        "log_dir": tmp_path / "logs",
        **overrides,
    }
    return AgentOptions(**fields)  # type: ignore[arg-type]


async def test_runs_python_with_the_cardflow_env_and_reports_status_and_exit_0(
    fresh_settings: Settings, redis: Redis, tmp_path: Path
) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, real_options(tmp_path)):
        await dispatcher.grant("L1", "T1", (1,), fencing_token=9, command=[sys.executable, "-c", SHOW_ENV_AND_CHECKPOINT],
                               env={"MY_SETTING": "on"}, resume_from="file://ckpt/earlier")
        found = await wait_for_reports(redis, finished("L1"))
    registered = of_type(found, "report.registered")[0]
    assert (registered.data.mode, registered.data.card_type, len(registered.data.gpus)) == ("real", "T4", 2)
    (done,) = of_type(found, "report.finished", "L1")
    assert (done.data.exit_code, done.data.output_units, done.data.error, done.data.fencing_token) == (0, 640.0, None, 9)
    (checkpoint,) = of_type(found, "report.checkpointed", "L1")
    assert (checkpoint.data.checkpoint_uri, checkpoint.data.checksum, checkpoint.data.progress) == (
        "file://ckpt/final", "sha256:ab", 1.0
    )
    log = (tmp_path / "logs" / "T1.L1.log").read_text()
    for line in ("CUDA_VISIBLE_DEVICES=1", "CARDFLOW_TASK_ID=T1", "CARDFLOW_LEASE_ID=L1",
                 "CARDFLOW_RESUME_FROM=file://ckpt/earlier", "MY_SETTING=on", "leaked=\n"):
        assert line in log, log
    assert (tmp_path / "ckpt" / "T1").is_dir()


async def test_a_failing_command_reports_its_exit_code_and_last_output(
    fresh_settings: Settings, redis: Redis, tmp_path: Path
) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, real_options(tmp_path)):
        await dispatcher.grant("L1", "T1", (0,), command=[sys.executable, "-c", FAIL_WITH_3])
        await dispatcher.grant("L2", "T2", (1,), command=f"'{sys.executable}' -c 'import sys; sys.exit(0)'")  # shell form
        found = await wait_for_reports(redis, lambda r: all(finished(x)(r) for x in ("L1", "L2")))
    (failed,) = of_type(found, "report.finished", "L1")
    assert failed.data.exit_code == 3 and "exit code 3" in failed.data.error and "loss went NaN" in failed.data.error
    (shell,) = of_type(found, "report.finished", "L2")
    assert shell.data.exit_code == 0


async def test_a_grant_without_a_command_ends_at_once_without_an_exit_code(
    fresh_settings: Settings, redis: Redis, tmp_path: Path
) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, real_options(tmp_path)):
        await dispatcher.grant("L1", "T1", (0,))
        found = await wait_for_reports(redis, finished("L1"))
    (done,) = of_type(found, "report.finished", "L1")
    assert done.data.exit_code is None and "no command" in done.data.error


async def test_preempt_sends_sigterm_and_a_cooperative_task_checkpoints_and_exits(
    fresh_settings: Settings, redis: Redis, tmp_path: Path
) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, real_options(tmp_path)):
        await dispatcher.grant("L1", "T1", (0,), fencing_token=2, command=[sys.executable, "-c", SIGTERM_TASK])
        await wait_for_reports(redis, lambda r: bool(of_type(r, "report.progress", "L1")))
        await dispatcher.preempt("L1", "T1", token=2, grace_s=30.0)
        found = await wait_for_reports(redis, finished("L1"))
    (checkpoint,) = of_type(found, "report.checkpointed", "L1")
    (done,) = of_type(found, "report.finished", "L1")
    assert checkpoint.data.checkpoint_uri == "file://ckpt/at-sigterm" and checkpoint.data.progress == 0.3
    assert done.data.exit_code == 0 and done.data.error.startswith("preempted")
    assert found.index(checkpoint) < found.index(done)


async def test_revoke_kills_a_task_that_ignores_sigterm_after_the_grace_period(
    fresh_settings: Settings, redis: Redis, tmp_path: Path
) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, real_options(tmp_path, grace_s=0.5)):
        await dispatcher.grant("L1", "T1", (0,), fencing_token=2, command=[sys.executable, "-c", SIGTERM_TASK],
                               env={"MODE": "ignore"})
        await wait_for_reports(redis, lambda r: bool(of_type(r, "report.progress", "L1")))
        await dispatcher.revoke("L1", "T1", 2, grace_s=600.0)  # --grace 0.5 overrides the command's grace
        found = await wait_for_reports(redis, finished("L1"))
    (done,) = of_type(found, "report.finished", "L1")
    assert done.data.exit_code is None
    assert done.data.error.startswith("revoked: cancelled") and "killed by SIGKILL" in done.data.error
    assert "ignoring SIGTERM" in done.data.error  # the log's tail
