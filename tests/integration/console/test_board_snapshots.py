"""The readiness board as a daily record: snapshots in the reports bucket, and `cardflow board` as an API client."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import sys
from datetime import datetime

import httpx

from services.console.projector import SPEC as VIEWS
from services.console.snapshots import day_prefix
from services.intake.service import SPEC as INTAKE
from services.identity.bootstrap import bootstrap_admin
from services.readiness.service import SPEC as READINESS
from shared.names import REPORTS_BUCKET
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.console_world import serve_console
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import a_submission
from tests.helpers.system import settings_env

MISSING = "s3://cardflow-test-absent/board/never.parquet"


async def cardflow(settings: Settings, url: str, token: str, *args: str) -> tuple[int, str, str]:
    env = {**settings_env(settings), "COLUMNS": "200", "PATH": "/usr/bin:/bin", "CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


async def test_snapshots_are_versioned_html_and_csv_and_the_cli_prints_the_board(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, INTAKE, READINESS, VIEWS) as services, serve_console(fresh_settings) as url:
        admin = (await bootstrap_admin(fresh_settings.database_dsn or "", "root")).secret
        async with httpx.AsyncClient(base_url=url, timeout=60, headers={"authorization": f"Bearer {admin}"}) as client:
            issued = await client.post("/v1/tokens", json={"name": "planner", "role": "operator"})
            token = issued.json()["secret"]
            created = await client.post("/v1/tasks", json=a_submission(name="needs-board", inputs=[MISSING]))
            task_id = created.json()["task_id"]

            async def waiting_on_board() -> bool:
                board = (await client.get("/v1/board/groups")).json()
                data = next(g for g in board["groups"] if g["kind"] == "data")
                return any(t["id"] == task_id for t in data["tasks"])

            assert await services.wait_until(waiting_on_board)
            async with open_object_store(fresh_settings) as store:
                await store.ensure_bucket(REPORTS_BUCKET)
                anonymous = await client.post("/v1/board/snapshot", headers={"authorization": ""})
                assert anonymous.status_code == 401
                first = (await client.post("/v1/board/snapshot", json={"reason": "before the review"},
                                           headers={"authorization": f"Bearer {token}"})).json()  # fmt: skip
                second = (await client.post("/v1/board/snapshot")).json()
                assert {o["key"] for o in first["objects"]} == {o["key"] for o in second["objects"]}
                day = day_prefix(datetime.fromisoformat(first["taken_at"]))
                assert day.startswith("board/") and all(o["key"].startswith(day) for o in first["objects"])
                for before, after in zip(first["objects"], second["objects"]):
                    assert before["version_id"] != after["version_id"]  # a new version, the old one kept
                    versions = {v.version_id for v in await store.list_versions(REPORTS_BUCKET, before["key"])}
                    assert {before["version_id"], after["version_id"]} <= versions
                key = next(o for o in first["objects"] if o["key"].endswith(".csv"))
                stored = await store.get(REPORTS_BUCKET, key["key"], version_id=key["version_id"])
                rows = list(csv.DictReader(io.StringIO(stored.body.decode())))
                [row] = [r for r in rows if r["task_id"] == task_id]
                assert (row["blocker"], row["reason"], row["missing_inputs"]) == ("data", "data_not_ready", MISSING)
                assert stored.metadata["actor"] == "user:planner" and stored.metadata["reason"] == "before the review"
                zh = next(o for o in first["objects"] if o["key"].endswith(".zh.html"))
                page = (await store.get(REPORTS_BUCKET, zh["key"], version_id=zh["version_id"])).body.decode()
                assert "needs-board" in page and "等待数据" in page and "<script" not in page

            listed = (await client.get("/v1/board/snapshots")).json()
            assert any(item["key"] == key["key"] and item["versions"] >= 2 for item in listed)

        code, out, err = await cardflow(fresh_settings, url, token, "board")
        assert code == 0, err
        assert "needs-board" in out and "waiting for data" in out and MISSING in out
        code, out, err = await cardflow(fresh_settings, url, token, "board", "--lang", "zh", "--json")
        data = json.loads(out)
        assert data["counts"]["data"] >= 1
        [task] = [t for g in data["groups"] for t in g["tasks"] if t["id"] == task_id]
        assert task["sentence"] == f"等待 1 个输入（已就绪 0%）：{MISSING}"
        code, out, err = await cardflow(fresh_settings, url, token, "board", "--snapshot", "--reason", "cli check")
        assert code == 0 and "board.csv" in out and "version" in out, err
        code, out, err = await cardflow(fresh_settings, url, token, "board", "--snapshot", "--reason", "cli check", "--lang", "zh")
        assert code == 0 and "就绪看板" in out and "已写入" in out and "版本" in out and "written" not in out, err
        code, out, err = await cardflow(fresh_settings, url, "not-a-token", "board", "--snapshot")
        assert code == 3 and "token" in err, err
