"""`cardflow submit` / `cardflow cancel` as a user runs them (a subprocess), against intake and the
console's task view running in-process on real servers."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import yaml
from redis.asyncio import Redis

from services.console.projector import SPEC as VIEWS
from services.intake.service import SPEC as INTAKE
from shared.names import INGEST_STREAM
from shared.settings import Settings
from tests.helpers.delivery_support import REPO_ROOT
from tests.helpers.running_services import RunningServices
from tests.integration.intake.harness import a_submission, published_events


async def cardflow(settings: Settings, *args: str) -> tuple[int, str]:
    """Run `cardflow ARGS` with the test's backends; its exit code and output."""
    env = {
        **os.environ,
        "CARDFLOW_REDIS_URL": settings.redis_url or "",
        "CARDFLOW_DATABASE_URL": settings.database_dsn or "",
        "PYTHONPATH": str(REPO_ROOT),
        "COLUMNS": "200",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, cwd=REPO_ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode()


async def test_submitting_a_file_twice_creates_each_task_once(
    fresh_settings: Settings, redis: Redis, tmp_path: Path
) -> None:
    file = tmp_path / "tasks.yaml"
    file.write_text(yaml.safe_dump([a_submission("keyed", idempotency_key="mine-1"), a_submission("keyless")]))

    first = await cardflow(fresh_settings, "submit", str(file))
    again = await cardflow(fresh_settings, "submit", str(file))
    async with RunningServices(fresh_settings, INTAKE) as services:

        async def all_read() -> bool:
            return len(await redis.xrange(INGEST_STREAM)) == 4 and len(await published_events(redis)) == 2

        assert await services.wait_until(all_read)

    assert first[0] == 0 and again[0] == 0, first[1] + again[1]
    assert "keyless" in first[1] and "mine-1" in first[1]
    payloads = [json.loads(fields[b"payload"]) for _, fields in await redis.xrange(INGEST_STREAM)]
    keys = [p["idempotency_key"] for p in payloads]
    assert keys[0] == keys[2] == "mine-1" and keys[1] == keys[3] and keys[1].startswith("cli-")
    submitted = await published_events(redis, "task.submitted")
    assert sorted(e.data.idempotency_key for e in submitted) == sorted(["mine-1", keys[1]])
    assert all(e.actor.startswith("user:") for e in submitted)


async def test_wait_reports_a_rejected_task_and_exits_non_zero(fresh_settings: Settings, tmp_path: Path) -> None:
    file = tmp_path / "bad.json"
    file.write_text(json.dumps(a_submission("bad", gpus=0)))
    async with RunningServices(fresh_settings, INTAKE, VIEWS):
        code, output = await cardflow(fresh_settings, "submit", str(file), "--wait", "--timeout", "120")

    assert code == 1, output
    assert "rejected" in output and "gpus" in output


async def test_cancel_writes_a_task_cancel_entry(fresh_settings: Settings, redis: Redis) -> None:
    code, output = await cardflow(fresh_settings, "cancel", "01TASK", "--reason", "wrong data", "--actor", "user:ops")

    assert code == 0, output
    [(_, fields)] = await redis.xrange(INGEST_STREAM)
    assert fields[b"type"] == b"task.cancel" and fields[b"actor"] == b"user:ops"
    assert json.loads(fields[b"payload"]) == {"task_id": "01TASK", "reason": "wrong data"}


async def test_an_unreadable_file_is_refused_before_anything_is_sent(
    fresh_settings: Settings, redis: Redis, tmp_path: Path
) -> None:
    file = tmp_path / "broken.json"
    file.write_text("[{]")
    code, output = await cardflow(fresh_settings, "submit", str(file))
    assert code == 2 and "not valid JSON" in output
    assert await redis.xlen(INGEST_STREAM) == 0

