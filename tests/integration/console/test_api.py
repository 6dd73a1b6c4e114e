"""The HTTP API and web page against real servers: intake's commands behind POST, views behind GET,
a token on every /v1 route (docs/identity.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from services.console.projector import SPEC as VIEWS
from services.intake.service import SPEC as INTAKE
from services.readiness.service import SPEC as READINESS
from shared.settings import Settings
from tests.helpers.console_server import console_client, first_admin, issue_token
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import a_submission


@asynccontextmanager
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The console app in-process, signed in as `alice`, a submitter of proj-a (a_submission's project)."""
    alice = await issue_token(settings, await first_admin(settings), "alice", "submitter", "proj-a")
    async with console_client(settings, alice) as client:
        yield client


async def test_post_valid_duplicate_key_and_invalid(fresh_settings: Settings) -> None:
    async with api(fresh_settings) as client:
        first = await client.post("/v1/tasks", json=a_submission(idempotency_key="nightly-1"))
        assert first.status_code == 201, first.text
        assert first.json()["created"] is True
        again = await client.post("/v1/tasks", json=a_submission(idempotency_key="nightly-1"))
        assert again.status_code == 200
        assert again.json() == {"task_id": first.json()["task_id"], "created": False}
        conflict = await client.post("/v1/tasks", json=a_submission(idempotency_key="nightly-1", name="renamed"))
        assert conflict.status_code == 409
        assert conflict.json()["problems"][0]["field"] == "idempotency_key"

        invalid = await client.post("/v1/tasks", json=a_submission(gpus=0, profile="quantum", colour="blue"))
        assert invalid.status_code == 422
        problems = invalid.json()["problems"]
        assert {p["field"] for p in problems} == {"gpus", "profile", "colour"}
        assert all(p["expected"] for p in problems)
        assert {p["value"] for p in problems if p["field"] == "gpus"} == {0}
        assert invalid.json()["task_id"]

        not_json = await client.post("/v1/tasks", content=b"{oops", headers={"content-type": "application/json"})
        assert not_json.status_code == 422
        assert not_json.json()["problems"][0]["field"] == "(whole input)"


async def test_submitted_task_is_projected_listed_and_cancellable(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, INTAKE, VIEWS) as services, api(fresh_settings) as client:
        created = await client.post("/v1/tasks", json=a_submission(name="eval-7"), headers={"x-cardflow-actor": "user:mallory"})
        task_id = created.json()["task_id"]
        rejected = await client.post("/v1/tasks", json=a_submission(gpus=-1))
        rejected_id = rejected.json()["task_id"]

        async def projected() -> bool:
            found = [await client.get(f"/v1/tasks/{i}") for i in (task_id, rejected_id)]
            return all(r.status_code == 200 for r in found)

        assert await services.wait_until(projected)
        task = (await client.get(f"/v1/tasks/{task_id}")).json()
        assert (task["name"], task["state"], task["submitted_by"]) == ("eval-7", "submitted", "user:alice")
        assert (await client.get(f"/v1/tasks/{rejected_id}")).json()["state"] == "rejected"
        listed = (await client.get("/v1/tasks", params={"state": "rejected"})).json()
        assert [t["id"] for t in listed] == [rejected_id]

        cancel = await client.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "wrong dataset"})
        assert cancel.status_code == 202

        async def cancel_shown() -> bool:
            return (await client.get(f"/v1/tasks/{task_id}")).json()["reason"] == "cancel_requested"

        assert await services.wait_until(cancel_shown)
        history = (await client.get(f"/v1/tasks/{task_id}/history")).json()["history"]
        assert [h["type"] for h in history] == ["task.submitted", "task.cancel_requested"]
        assert [h["actor"] for h in history] == ["user:alice", "user:alice"]  # the token's holder, not the header


async def test_unknown_ids_answer_404_with_a_clear_message(fresh_settings: Settings) -> None:
    async with api(fresh_settings) as client:
        missing = await client.get("/v1/tasks/NO-SUCH-TASK")
        assert missing.status_code == 404 and "NO-SUCH-TASK" in missing.json()["detail"]
        assert (await client.post("/v1/tasks/NO-SUCH-TASK/cancel")).status_code == 404
        assert (await client.get("/v1/tasks", params={"state": "sleeping"})).status_code == 422


async def test_board_fleet_health_openapi_and_page(fresh_settings: Settings) -> None:
    async with api(fresh_settings) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/v1/fleet")).json() == {"nodes": [], "card_types": []}
        unavailable = await client.get("/v1/board")
        assert unavailable.status_code == 503 and "readiness" in unavailable.json()["detail"]

        openapi = (await client.get("/openapi.json")).json()
        assert {"/v1/tasks", "/v1/tasks/{task_id}", "/v1/tasks/{task_id}/cancel", "/v1/board", "/v1/fleet"} <= set(openapi["paths"])
        body = openapi["paths"]["/v1/tasks"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/TaskSubmission"}
        assert "priority_class" in openapi["components"]["schemas"]["TaskSubmission"]["properties"]
        assert "DatasetRef" in openapi["components"]["schemas"]
        assert (await client.get("/docs")).status_code == 200

        home = await client.get("/")
        assert home.status_code == 307 and home.headers["location"] == "/board"
        assert (await client.get("/?task=T1&lang=zh")).headers["location"] == "/tasks/T1?lang=zh"
        for path in ("/board", "/queue", "/fleet", "/quotas", "/ledger", "/tasks", "/board/history"):
            page = await client.get(path, params={"lang": "zh"})
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), path
            html = page.text
            assert 'lang="zh-CN"' in html and "数据就绪看板" in html and "队列" in html and "算力集群" in html, path
            assert "http://" not in html.replace("http://www.w3.org", ""), f"{path}: no external resources (no CDN)"
        assert page.cookies.get("cardflow_lang") == "zh"
        assert "text/css" in (await client.get("/static/console.css")).headers["content-type"]


async def test_board_lists_tasks_waiting_on_data(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, INTAKE, READINESS) as services, api(fresh_settings) as client:
        body = a_submission(name="needs-data", inputs=["s3://cardflow-test-absent/never/there.parquet"])
        task_id = (await client.post("/v1/tasks", json=body)).json()["task_id"]

        async def on_board() -> bool:
            response = await client.get("/v1/board")
            return response.status_code == 200 and any(
                row["task_id"] == task_id and row["status"] == "waiting" for row in response.json()["tasks"]
            )

        assert await services.wait_until(on_board)
        board = (await client.get("/v1/board")).json()
        [row] = [r for r in board["tasks"] if r["task_id"] == task_id]
        assert row["missing_inputs"] == ["s3://cardflow-test-absent/never/there.parquet"]
        assert board["waiting"] >= 1
