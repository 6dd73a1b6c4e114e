"""The `redis-cli XADD` examples of docs/ingest.md work when pasted into a shell."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from redis.asyncio import Redis

from services.intake.service import SPEC as INTAKE
from shared.settings import Settings
from tests.helpers.delivery_support import REPO_ROOT
from tests.helpers.running_services import RunningServices
from tests.integration.intake.harness import deadletters, published_events

DOC = REPO_ROOT / "docs" / "ingest.md"
REDIS_CLI = shutil.which("redis-cli") or str(Path(sys.executable).parent / "redis-cli")


def xadd_examples() -> list[str]:
    """Every shell command of the doc that XADDs to cf:ingest (continuation lines joined)."""
    commands = re.findall(r"^(redis-cli [^\n]*XADD cf:ingest(?:[^\n]*\\\n)*[^\n]*)$", DOC.read_text(), re.M)
    return [command.replace("\\\n", " ") for command in commands]


@pytest.mark.skipif(not Path(REDIS_CLI).exists(), reason="no redis-cli binary")
async def test_the_documented_entries_do_what_the_doc_says(fresh_settings: Settings, redis: Redis) -> None:
    examples = xadd_examples()
    assert len(examples) == 3
    url = (fresh_settings.redis_url or "").replace("redis://:", "redis://default:")  # as the doc says for redis-cli 6
    env = {**os.environ, "CARDFLOW_REDIS_URL": url, "PATH": f"{Path(REDIS_CLI).parent}:{os.environ['PATH']}"}
    for command in examples:
        shell = await asyncio.create_subprocess_exec("bash", "-c", command, env=env, stdout=asyncio.subprocess.PIPE)
        output, _ = await shell.communicate()
        assert shell.returncode == 0 and re.fullmatch(rb"\d+-\d+\n", output), output

    with_upstream = fresh_settings.model_copy(update={"ingest_upstreams": ("training-pipeline",)})  # as the doc says
    async with RunningServices(with_upstream, INTAKE) as services:

        async def settled() -> bool:
            return len(await published_events(redis)) == 2 and len(await deadletters(redis)) == 1

        assert await services.wait_until(settled)

    submitted, signalled = sorted(await published_events(redis), key=lambda event: event.type != "task.submitted")
    assert (submitted.type, submitted.actor, submitted.data.idempotency_key) == (
        "task.submitted", "upstream:training-pipeline", "nightly-2024-06-01-llm",
    )  # fmt: skip
    assert (signalled.type, signalled.subject) == ("data.ready_signalled", "data/eval-suite@12")
    [dead] = await deadletters(redis)
    assert "names no task intake knows" in dead.error  # the cancel example names a made-up task
