"""`cardflow deadletter list|show|replay|purge` live: dead entries made by intake, an operator's
token, each replay and purge recorded as an event with its actor and reason."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from redis.asyncio import Redis
from typer.testing import CliRunner, Result

from services.cli.main import app
from services.intake.service import SPEC as INTAKE
from shared.delivery.db import create_pool
from shared.names import DEADLETTER_STREAM, INGEST_STREAM
from shared.settings import Settings, get_settings
from tests.helpers.console_server import serving_console
from tests.helpers.running_services import RunningServices

runner = CliRunner()
CLEARED = ("CARDFLOW_API_URL", "CARDFLOW_TOKEN", "CARDFLOW_TOKEN_FILE", "CARDFLOW_DATABASE_URL", "CARDFLOW_REDIS_URL")


def cardflow(*args: str, **env: str) -> Result:
    environment: dict[str, str | None] = {key: None for key in CLEARED} | {"COLUMNS": "200"} | env
    get_settings.cache_clear()  # commands that read settings must see this call's environment, not an earlier test's
    return runner.invoke(app, list(args), env=environment)


async def make_dead_letters(settings: Settings, count: int) -> None:
    """Entries intake can never read (no `type`): it dead-letters each at once."""
    async with RunningServices(settings, INTAKE) as services:
        for n in range(count):
            await services.redis.xadd(INGEST_STREAM, {"payload": json.dumps({"n": n})})

        async def all_dead() -> bool:
            return await services.redis.xlen(DEADLETTER_STREAM) == count

        assert await services.wait_until(all_dead)


async def recorded(settings: Settings, event_type: str) -> list[dict]:
    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=1)
    try:
        rows = await pool.fetch("SELECT body FROM intake.outbox WHERE type = $1 ORDER BY position", event_type)
    finally:
        await pool.close()
    return [json.loads(row["body"]) for row in rows]


async def test_operators_list_show_replay_and_purge_dead_letters(fresh_settings: Settings, tmp_path: Path) -> None:
    await make_dead_letters(fresh_settings, 3)
    first, second, third = await asyncio.to_thread(operate, fresh_settings, tmp_path)  # CLI commands call asyncio.run

    redis = Redis.from_url(fresh_settings.redis_url or "")
    try:
        assert await redis.xlen(DEADLETTER_STREAM) == 0
        replays = await recorded(fresh_settings, "deadletter.replayed")
        purges = await recorded(fresh_settings, "deadletter.purged")
        again = [fields for entry_id, fields in await redis.xrange(INGEST_STREAM)
                 if entry_id.decode() == replays[0]["data"]["replayed_as"]]  # fmt: skip
    finally:
        await redis.aclose()
    assert again == [{b"payload": json.dumps({"n": 0}).encode()}]  # the original fields, byte for byte
    assert [(e["actor"], e["data"]["deadletter_id"], e["data"]["reason"]) for e in replays] == [("user:ops", first, "intake fixed")]
    assert [(e["actor"], e["data"]["deadletter_id"], e["data"]["reason"]) for e in purges] == [
        ("user:ops", second, "junk from a test client"), ("user:ops", third, "clean-up"),
    ]


def operate(settings: Settings, tmp_path: Path) -> tuple[str, str, str]:
    """What an operator types, checked line by line; returns the three dead-letter ids."""
    boot = cardflow("token", "bootstrap", "root", "--reason", "first admin",
                    CARDFLOW_DATABASE_URL=settings.database_dsn or "", CARDFLOW_DATA_DIR=str(tmp_path))  # fmt: skip
    assert boot.exit_code == 0, boot.output
    root = boot.stdout.strip()
    with serving_console(settings) as url:
        made = [cardflow("token", "create", name, "--role", role, CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
                for name, role in (("ops", "operator"), ("sam", "submitter"))]  # fmt: skip
        assert [result.exit_code for result in made] == [0, 0], [result.output for result in made]
        ops, sam = (result.stdout.strip() for result in made)
        as_ops = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": ops}

        refused = cardflow("deadletter", "list", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=sam)
        assert refused.exit_code == 3 and "needs role operator" in refused.stderr

        listed = cardflow("deadletter", "list", "--json", **as_ops)
        assert listed.exit_code == 0, listed.output
        rows = json.loads(listed.stdout)
        assert [(r["stream"], r["group"], r["reason"]) for r in rows] == [("cf:ingest", "intake", "invalid")] * 3
        first, second, third = (row["deadletter_id"] for row in rows)
        table = cardflow("deadletter", "list", **as_ops)
        assert "dead letters (3)" in table.stdout and "invalid" in table.stdout
        in_chinese = cardflow("deadletter", "list", "--lang", "zh", **as_ops)
        assert "死信（3 条）" in in_chinese.stdout and "无法解析" in in_chinese.stdout and "消费组" in in_chinese.stdout

        shown = cardflow("deadletter", "show", first, **as_ops)
        assert shown.exit_code == 0 and "original payload" in shown.stdout and '{"n": 0}' in shown.stdout
        shown_zh = cardflow("deadletter", "show", first, "--lang", "zh", **as_ops)
        assert shown_zh.exit_code == 0 and "原字段 payload" in shown_zh.stdout and "投递次数" in shown_zh.stdout

        no_reason = cardflow("deadletter", "replay", first, **as_ops)
        assert no_reason.exit_code == 2 and "--reason" in no_reason.output
        replayed = cardflow("deadletter", "replay", first, "--reason", "intake fixed", **as_ops)
        assert replayed.exit_code == 0, replayed.output
        assert "replayed" in replayed.stdout and "onto cf:ingest" in replayed.stdout
        again = cardflow("deadletter", "replay", first, "--reason", "twice", **as_ops)
        assert again.exit_code == 1 and f"no dead-letter entry '{first}'" in again.stderr

        purged = cardflow("deadletter", "purge", second, "--reason", "junk from a test client", **as_ops)
        assert purged.exit_code == 0 and "purged 1 dead-letter entry" in purged.stdout
        before = datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="seconds")
        neither = cardflow("deadletter", "purge", "--reason", "clean-up", "--lang", "zh", **as_ops)
        assert neither.exit_code == 2 and "二者选一" in neither.output
        swept = cardflow("deadletter", "purge", "--before", before, "--reason", "clean-up", "--lang", "zh", **as_ops)
        assert swept.exit_code == 0 and "已删除 1 条死信" in swept.stdout
        unknown = cardflow("deadletter", "show", "1-0", **as_ops)
        assert unknown.exit_code == 1 and "no dead-letter entry" in unknown.stderr
    return first, second, third
