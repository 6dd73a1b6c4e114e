"""Issue 16 item 6: the readiness board says what a task waits for, not only its data. Tasks whose
data is ready but that are held on quota, wait for an approval or fit no card type are grouped
under those blockers — never shown as "can run now" — by `cardflow board` (table, JSON, 中文) and
by the console's /board page alike."""

from __future__ import annotations

import json
import os
import sys
import asyncio

import httpx

from services.console.projector import SPEC as VIEWS
from services.console.views import load_task
from services.identity.bootstrap import bootstrap_admin
from shared.events import new_event_id
from shared.settings import Settings
from tests.helpers.console_world import serve_console
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import TaskStory


async def cardflow(url: str, token: str, *args: str) -> tuple[int, str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env |= {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token, "COLUMNS": "250"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


def ready_then(story: TaskStory, name: str, *last: str) -> list:  # type: ignore[type-arg]
    events = [story.submitted(name=name), story.readiness(True, missing=(), fraction=1.0)]
    if "unmatchable" in last:
        return [*events, story.unmatchable()]
    return [*events, story.matched(), story.queued(), *(story.held(reason, f"{name} waits: {reason}") for reason in last)]


async def test_board_groups_data_ready_tasks_by_what_holds_them_in_the_cli_and_on_the_page(fresh_settings: Settings) -> None:
    quota, approval, no_card, runnable = (TaskStory(new_event_id()) for _ in range(4))
    events = [*ready_then(quota, "held-on-quota", "quota_exhausted"), *ready_then(approval, "needs-approval", "not_approved"),
              *ready_then(no_card, "too-big", "unmatchable"), *ready_then(runnable, "can-go")]  # fmt: skip
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.publish(*events)

        async def projected() -> bool:
            views = [await load_task(services.pool, s.task_id) for s in (quota, approval, no_card, runnable)]
            return all(v is not None and v.state.value in {"held", "unmatchable", "queued"} for v in views)

        assert await services.wait_until(projected)
    async with serve_console(fresh_settings) as url:
        token = (await bootstrap_admin(fresh_settings.database_dsn or "", "root")).secret
        code, out, err = await cardflow(url, token, "board", "--json")
        assert code == 0, err
        groups = {g["kind"]: [t["name"] for t in g["tasks"]] for g in json.loads(out)["groups"]}
        assert groups["quota"] == ["held-on-quota"] and groups["approval"] == ["needs-approval"]
        assert groups["no_card"] == ["too-big"] and groups["runnable"] == ["can-go"]

        code, table, err = await cardflow(url, token, "board")
        assert code == 0, err
        for title, name in (("quota", "held-on-quota"), ("approval", "needs-approval"), ("no card fits", "too-big"),
                            ("can run now", "can-go")):  # fmt: skip
            assert title in table and name in table
        code, zh, err = await cardflow(url, token, "board", "--lang", "zh")
        assert code == 0 and "等待审批" in zh and "无可用卡型" in zh and "配额" in zh, err

        async with httpx.AsyncClient(base_url=url, cookies={"cardflow_session": token}, timeout=60) as client:
            page = (await client.get("/board?lang=en")).text
    for group, name in (("quota", "held-on-quota"), ("approval", "needs-approval"), ("no_card", "too-big"), ("runnable", "can-go")):
        section = page.split(f'id="group-{group}"', 1)[1].split('id="group-', 1)[0]
        assert name in section, f"{name} not under {group} on the /board page"
