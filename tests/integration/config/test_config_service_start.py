"""The config service as it runs, against real Redis, PostgreSQL and S3: its daily export fires by
itself (its clock moved from one day to the next, no waiting a day), and the demo's policy is a
recorded change that a later start without --demo takes back."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from services.cli.main import app
from services.config.seeding import warn_ignored_env_knobs
from services.config.service import ConfigServiceSettings, DemoSettings, make_spec
from services.config.store import ConfigStore
from services.console.projector import SPEC as VIEWS
from services.dispatcher.config import DispatcherConfig
from services.intake.service import SPEC as INTAKE
from shared.names import REPORTS_BUCKET
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.console_server import bearer, first_admin, serving_console
from tests.helpers.moved_clock import MovedClock
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import a_submission

pytestmark = pytest.mark.integration

# Days of their own, so no other test's export shares these keys in the (shared) reports bucket.
YESTERDAY_EARLY = datetime(2031, 3, 14, 5, 0, tzinfo=UTC)
YESTERDAY = datetime(2031, 3, 14, 7, 30, tzinfo=UTC)
TODAY = datetime(2031, 3, 15, 6, 10, tzinfo=UTC)
NOT_A_DEMO = DemoSettings(time_scale=None)


def cli(*args: str, url: str, token: str) -> str:
    env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token, "CARDFLOW_TOKEN_FILE": None, "COLUMNS": "220"}
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


async def test_the_daily_export_fires_by_itself_and_yesterdays_list_sits_beside_todays(fresh_settings: Settings) -> None:
    clock = MovedClock(YESTERDAY_EARLY)
    config = make_spec(ConfigServiceSettings(hour_utc=6, check_s=0.1), demo=NOT_A_DEMO, clock=clock)
    with serving_console(fresh_settings) as url:
        root = await first_admin(fresh_settings)
        async with RunningServices(fresh_settings, INTAKE, VIEWS, config) as services, \
                httpx.AsyncClient(base_url=url, headers=bearer(root), timeout=60) as client:  # fmt: skip

            async def submit(name: str) -> str:
                answer = await client.post("/v1/tasks", json=a_submission(name=name))
                assert answer.status_code == 201, answer.text
                return answer.json()["task_id"]

            async def in_views(count: int) -> bool:
                return len(await services.fetch("SELECT id FROM views.tasks")) >= count

            async def daily(day: str) -> list[Any]:
                return await services.fetch("SELECT * FROM config.exports WHERE trigger = 'daily' AND day = $1::date",
                                            datetime.fromisoformat(day).date())  # fmt: skip

            first = [await submit("eval-a"), await submit("eval-b")]
            assert await services.wait_until(lambda: in_views(2))
            asked = clock.asked
            assert await services.wait_until(lambda: _true(clock.asked >= asked + 3))  # the loop ran, before 06:00 UTC
            assert await services.fetch("SELECT 1 FROM config.exports") == []

            clock.now = YESTERDAY  # 07:30: due
            assert await services.wait_until(lambda: daily("2031-03-14"))
            third = await submit("eval-c")
            assert await services.wait_until(lambda: in_views(3))
            asked = clock.asked
            assert await services.wait_until(lambda: _true(clock.asked >= asked + 3))
            assert len(await services.fetch("SELECT 1 FROM config.exports")) == 1  # once a day, not once a check

            clock.now = TODAY
            assert await services.wait_until(lambda: daily("2031-03-15"))

        listed = cli("export", "--list", "--json", url=url, token=root)
        table = cli("export", "--list", url=url, token=root)
        table_zh = cli("export", "--list", "--lang", "zh", url=url, token=root)

    exports = {row["day"]: row for row in _json(listed)}
    assert set(exports) == {"2031-03-14", "2031-03-15"}
    assert {(row["trigger"], row["actor"], row["tasks"]) for row in exports.values()} == {
        ("daily", "system:daily-export", 2), ("daily", "system:daily-export", 3)}
    assert exports["2031-03-14"]["tasks"] == 2 and exports["2031-03-15"]["tasks"] == 3
    assert {row["reason"] for row in exports.values()} == {"the daily export (due from 06:00 UTC)"}
    assert "exports/2031-03-14/tasks.csv" in table and "exports/2031-03-15/tasks.csv" in table
    assert table.index("2031-03-15") < table.index("2031-03-14")  # newest first
    assert "已有导出（2 个）" in table_zh and "每日" in table_zh and "触发" in table_zh, table_zh
    async with open_object_store(fresh_settings) as store:
        tasks_of = {}
        for day, row in exports.items():
            (tasks_csv,) = [o for o in row["objects"] if o["key"] == f"exports/{day}/tasks.csv"]
            stored = await store.get(REPORTS_BUCKET, tasks_csv["key"], version_id=tasks_csv["version_id"])
            tasks_of[day] = {r["task_id"] for r in csv.DictReader(io.StringIO(stored.body.decode()))}
        listing = {o.key for o in await store.list_keys(REPORTS_BUCKET, "exports/2031-03-1")}
    assert tasks_of == {"2031-03-14": set(first), "2031-03-15": {*first, third}}
    assert {f"exports/{day}/{name}" for day in exports for name in ("tasks.csv", "tasks.json", "demand.csv", "demand.json")} <= listing


async def _true(value: bool) -> bool:
    return value


def _json(text: str) -> list[dict[str, Any]]:
    return json.loads(text)


async def policy_history(services: RunningServices) -> list[tuple[int, str, str, str]]:
    rows = await services.fetch("SELECT version, actor, action, reason, content FROM config.versions WHERE name = 'policy' ORDER BY version")
    return [(row["version"], row["actor"], row["action"], row["reason"]) for row in rows]


async def grace_in_force(services: RunningServices) -> float:
    content = (await services.fetch("SELECT content FROM config.versions WHERE name = 'policy' ORDER BY version DESC LIMIT 1"))[0]["content"]
    return float(yaml.safe_load(content)["preemption"]["after_s"])


async def test_a_demo_start_records_its_policy_and_the_next_start_without_demo_takes_it_back(fresh_settings: Settings) -> None:
    quiet = ConfigServiceSettings(daily=False)
    async with RunningServices(fresh_settings) as services:
        services.start_service("config", make_spec(quiet, demo=DemoSettings(time_scale=360)))
        assert await services.wait_until(lambda: _has_versions(services, 2))
        await services.stop_service("config")
        assert await grace_in_force(services) == pytest.approx(1.67)

        services.start_service("config", make_spec(quiet, demo=DemoSettings(time_scale=360)))  # a restart mid-demo
        await services.stop_service("config")
        assert len(await policy_history(services)) == 2  # nothing new: the demo's values are in force

        services.start_service("config", make_spec(quiet, demo=NOT_A_DEMO))
        assert await services.wait_until(lambda: _has_versions(services, 3))
        await services.stop_service("config")
        history = await policy_history(services)
        assert await grace_in_force(services) == 600.0

        services.start_service("config", make_spec(quiet, demo=NOT_A_DEMO))
        await services.stop_service("config")
        assert await policy_history(services) == history  # taken back once

    (v1, v2, v3) = history
    assert v1[1:3] == ("service:config", "seeded") and "no CARDFLOW_DISPATCHER_* overrides" in v1[3]
    assert v2[1:3] == ("system:demo", "set")
    assert v2[3].startswith("cardflow up --demo: the demo's agents run 360x faster") and "600 → 1.67" in v2[3]
    assert v3[1:3] == ("system:demo", "set") and v3[3].startswith("a start without --demo") and "1.67 → 600" in v3[3]


async def test_dispatcher_knobs_that_disagree_with_the_document_in_force_are_named_in_a_warning(fresh_settings: Settings) -> None:
    quiet = ConfigServiceSettings(daily=False)
    async with RunningServices(fresh_settings) as services:
        services.start_service("config", make_spec(quiet, demo=NOT_A_DEMO))
        assert await services.wait_until(lambda: _has_versions(services, 1))
        await services.stop_service("config")
        async with open_object_store(fresh_settings) as objects:
            store = ConfigStore(services.pool, objects, "config/test")  # type: ignore[arg-type]
            assert await warn_ignored_env_knobs(store, DispatcherConfig()) is None
            warning = await warn_ignored_env_knobs(store, DispatcherConfig(preempt_after_s=120))
    assert warning is not None
    assert warning.startswith("CARDFLOW_DISPATCHER_POLICY=cardflow, CARDFLOW_DISPATCHER_PREEMPT_AFTER_S=120.0 set, but policy version 1")
    assert "cardflow config set policy" in warning


async def _has_versions(services: RunningServices, count: int) -> bool:
    return len(await services.fetch("SELECT 1 FROM config.versions WHERE name = 'policy'")) >= count
