"""`cardflow tasks` / `cardflow status` as a user runs them: a subprocess, a client of the console's API."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

from services.console.projector import SPEC as VIEWS
from services.console.views import load_task
from shared.events import new_event_id
from shared.settings import Settings
from tests.helpers.console_server import first_admin, issue_token, serving_console
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import T0, TaskStory

REPO_ROOT = Path(__file__).resolve().parents[3]


def env_for(settings: Settings | None, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env["CARDFLOW_DATA_DIR"] = str(data_dir)
    env["COLUMNS"] = "200"
    if settings is not None:
        env["CARDFLOW_DATABASE_URL"] = settings.database_dsn or ""
        env["CARDFLOW_REDIS_URL"] = settings.redis_url or ""
    return env | extra


async def cardflow(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, cwd=REPO_ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


async def test_tasks_json_and_status(fresh_settings: Settings, tmp_path: Path) -> None:
    waiting, running = TaskStory(new_event_id()), TaskStory(new_event_id(), start=T0 + timedelta(days=2))
    events = [waiting.submitted(idempotency_key="key-w"), waiting.readiness(False),
              running.submitted(name="run-me", project="proj-b", priority_class="core", gpus=4),
              running.readiness(True), running.matched(), running.granted(), running.started()]
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.publish(*events)

        async def projected() -> bool:
            view = await load_task(services.pool, running.task_id)
            return view is not None and view.state == "running" and await load_task(services.pool, waiting.task_id) is not None

        assert await services.wait_until(projected)
    reader = await issue_token(fresh_settings, await first_admin(fresh_settings), "reader", "auditor")
    with serving_console(fresh_settings) as url:
        await check_tasks_and_status(env_for(None, tmp_path, CARDFLOW_API_URL=url, CARDFLOW_TOKEN=reader), waiting, running)


async def check_tasks_and_status(env: dict[str, str], waiting: TaskStory, running: TaskStory) -> None:
    code, out, err = await cardflow(env, "tasks", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert isinstance(listed, list) and {t["id"] for t in listed} == {waiting.task_id, running.task_id}
    assert all({"id", "name", "idempotency_key", "state", "reason"} <= set(t) for t in listed)
    by_id = {t["id"]: t for t in listed}
    assert (by_id[waiting.task_id]["state"], by_id[waiting.task_id]["reason"]) == ("waiting_data", "data_not_ready")

    code, out, _ = await cardflow(env, "tasks", "--state", "running", "--json")
    assert [t["name"] for t in json.loads(out)] == ["run-me"]

    code, out, err = await cardflow(env, "status", "key-w", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert status["id"] == waiting.task_id and [h["type"] for h in status["history"]] == [
        "task.submitted", "task.readiness_changed"]
    code, out, err = await cardflow(env, "status", "run-me", "--json")  # by its name
    assert code == 0 and json.loads(out)["id"] == running.task_id, err
    code, out, err = await cardflow(env, "status", "key-w", "--lang", "zh")  # the story in Chinese
    assert code == 0, err
    for said in ("已提交", "数据就绪检查", "等待数据检查", "等待 1 个输入（已就绪 50%）"):  # event names, a line's sentence
        assert said in out, (said, out)
    code, out, err = await cardflow(env, "status", "key-w")
    assert code == 0 and "task.readiness_changed" in out and "数据" not in out, out

    code, out, err = await cardflow(env, "tasks", "--lang", "zh")
    assert code == 0, err
    assert "等待数据" in out and "运行中" in out

    # filters, and --state as the table prints it
    async def names(*args: str) -> list[str]:
        code, out, err = await cardflow(env, "tasks", *args, "--json")
        assert code == 0, err
        return sorted(t["name"] or t["id"] for t in json.loads(out))

    assert await names("--state", "waiting for data") == await names("--state", "等待数据") == ["train-llm"]
    assert await names("--project", "proj-b") == await names("--class", "core") == await names("--name", "run-*") == ["run-me"]
    assert await names("--since", (T0 + timedelta(days=1)).isoformat()) == ["run-me"]
    assert await names("--project", "proj-a", "--class", "core") == []
    code, _, err = await cardflow(env, "tasks", "--state", "stuck")
    assert code == 2 and "unknown state 'stuck'" in err and "'no card fits' (unmatchable)" in err

    code, out, err = await cardflow(env, "tasks")
    assert code == 0, err
    for column in ("Class", "GPUs", "Submitted (UTC)", "Elapsed", "core"):
        assert column in out

    code, _, err = await cardflow(env, "status", "NO-SUCH-TASK")
    assert code == 1 and "no task has the id, idempotency key or name 'NO-SUCH-TASK'" in err


async def test_clear_errors_without_an_api_or_without_a_token(fresh_settings: Settings, tmp_path: Path) -> None:
    code, _, err = await cardflow(env_for(None, tmp_path), "tasks")
    assert code == 1 and "no cardflow API to talk to" in err and "cardflow up" in err

    with serving_console(fresh_settings) as url:
        code, _, err = await cardflow(env_for(None, tmp_path, CARDFLOW_API_URL=url), "tasks", "--json")
    assert code == 3 and "not authenticated" in err and "no token configured" in err


async def test_console_command_serves_the_api_until_terminated(fresh_settings: Settings, tmp_path: Path) -> None:
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "console", "--port", str(port), cwd=REPO_ROOT,
        env=env_for(fresh_settings, tmp_path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            health = None
            for _ in range(600):  # up to ~60 s for the interpreter, migrations and uvicorn to start
                try:
                    health = await client.get("/healthz")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            assert health is not None and health.json() == {"status": "ok"}
            assert (await client.get("/v1/tasks")).status_code == 401
    finally:
        process.terminate()
        _, err = await process.communicate()
    # uvicorn shuts down gracefully, then re-raises the captured SIGTERM (exit status -15)
    assert process.returncode in (0, -15) and b"Traceback" not in err, err.decode()
