"""Who may do what over HTTP, against real PostgreSQL: 401 everywhere without a token, 403 naming the
missing role with nothing written, project limits, and the actor always being the token's holder."""

from __future__ import annotations

import json
import re

import asyncpg

from services.common.runtime import prepare_schema
from services.config.service import SPEC as CONFIG
from services.config.store import ConfigStore
from services.intake.service import SPEC as INTAKE
from shared.config import template_document
from shared.delivery import create_pool
from shared.names import CONFIG_BUCKET
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.console_server import bearer, console_client, first_admin, issue_token
from tests.helpers.delivery_support import unique
from tests.helpers.task_events import a_submission

OPEN_PATHS = {"/v1/labels"}
WRITTEN = ("intake.tasks", "intake.rejections", "intake.outbox", "ledger.quotas", "ledger.outbox", "identity.outbox")


async def written(settings: Settings) -> dict[str, int]:
    """Row counts of every table a refused request must leave alone."""
    conn = await asyncpg.connect(settings.database_dsn)
    try:
        return {table: await conn.fetchval(f"SELECT count(*) FROM {table}") for table in WRITTEN}
    finally:
        await conn.close()


def quota(project: str = "proj-a", **extra: object) -> dict[str, object]:
    return {"project": project, "gpu_hours": 100, "valid_from": "2026-01-01T00:00:00Z",
            "valid_to": "2026-12-31T00:00:00Z", "reason": "Q4 budget", **extra}  # fmt: skip


async def test_every_v1_route_needs_a_token(fresh_settings: Settings) -> None:
    async with console_client(fresh_settings) as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
        checked = 0
        for path, methods in paths.items():
            if not path.startswith("/v1/") or path in OPEN_PATHS:
                continue
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            for method in methods:
                answer = await client.request(method.upper(), concrete, json={})
                assert answer.status_code == 401, f"{method.upper()} {path} answered {answer.status_code} without a token"
                checked += 1
        assert checked >= 15  # tasks, board, fleet, ledger, quotas, tokens, ...
        assert (await client.get("/v1/labels")).status_code == 200
        assert (await client.get("/healthz")).status_code == 200


async def test_project_limits_and_roles_refuse_with_the_missing_role_and_write_nothing(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    alice = await issue_token(fresh_settings, admin, "alice", "submitter", "proj-a")
    bob = await issue_token(fresh_settings, admin, "bob", "submitter", "proj-b")
    audrey = await issue_token(fresh_settings, admin, "audrey", "auditor")
    ops_a = await issue_token(fresh_settings, admin, "ops-a", "operator", "proj-a")
    ops = await issue_token(fresh_settings, admin, "ops", "operator")
    async with console_client(fresh_settings) as client:
        bobs_task = (await client.post("/v1/tasks", json=a_submission(project="proj-b"), headers=bearer(bob))).json()["task_id"]
        before = await written(fresh_settings)

        refused = await client.post("/v1/tasks", json=a_submission(project="proj-b"), headers=bearer(alice))
        assert refused.status_code == 403
        assert refused.json()["detail"] == ("forbidden: this needs role submitter for project proj-b (or operator, admin);"
                                            " token 'alice' (submitter for project proj-a) does not have it")  # fmt: skip
        cancel = await client.post(f"/v1/tasks/{bobs_task}/cancel", json={"reason": "not yours"}, headers=bearer(alice))
        assert cancel.status_code == 403 and "project proj-b" in cancel.json()["detail"]
        auditor = await client.post("/v1/tasks", json=a_submission(), headers=bearer(audrey))
        assert auditor.status_code == 403 and "token 'audrey' (auditor)" in auditor.json()["detail"]
        assert (await client.post(f"/v1/tasks/{bobs_task}/cancel", headers=bearer(audrey))).status_code == 403
        for token in (alice, ops_a):
            granted = await client.post("/v1/quotas", json=quota(), headers=bearer(token))
            assert granted.status_code == 403 and "role operator" in granted.json()["detail"], granted.text
        assert "not limited to a project" in granted.json()["detail"]
        assert await written(fresh_settings) == before, "a refused request wrote something"

        assert (await client.post("/v1/tasks/NO-SUCH-TASK/cancel", headers=bearer(alice))).status_code == 404
        own = await client.post("/v1/tasks", json=a_submission(name="mine"), headers=bearer(alice))
        assert own.status_code == 201
        assert (await client.post(f"/v1/tasks/{bobs_task}/cancel", headers=bearer(ops_a))).status_code == 403
        assert (await client.post(f"/v1/tasks/{bobs_task}/cancel", json={"reason": "wrong data"}, headers=bearer(bob))).status_code == 202
        assert (await client.post(f"/v1/tasks/{own.json()['task_id']}/cancel", headers=bearer(ops))).status_code == 202
        granted = await client.post("/v1/quotas", json=quota(), headers=bearer(ops))
        assert granted.status_code == 201 and granted.json()["granted_by"] == "user:ops"
        backwards = await client.post("/v1/quotas", json=quota(valid_to="2025-01-01T00:00:00Z"), headers=bearer(ops))
        assert backwards.status_code == 422
        assert [p["loc"][-1] for p in backwards.json()["detail"] if "must be after valid_from" in p["msg"]] == ["valid_to"]

    actors = await events_by_type(fresh_settings)
    assert actors["task.submitted"] == ["user:bob", "user:alice"]
    assert actors["task.cancel_requested"] == ["user:bob", "user:ops"]
    assert actors["quota.granted"] == ["user:ops"]


async def events_by_type(settings: Settings) -> dict[str, list[str]]:
    """Type -> actors of the events intake and the ledger wrote to their outboxes, in order."""
    conn = await asyncpg.connect(settings.database_dsn)
    try:
        rows = await conn.fetch("SELECT type, body FROM (SELECT position, type, body FROM intake.outbox UNION ALL"
                                " SELECT position, type, body FROM ledger.outbox) o ORDER BY position")  # fmt: skip
    finally:
        await conn.close()
    actors: dict[str, list[str]] = {}
    for row in rows:
        actors.setdefault(row["type"], []).append(json.loads(row["body"])["actor"])
    return actors


async def test_a_forged_actor_header_changes_nothing_and_a_revoked_token_stops_at_once(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    alice = await issue_token(fresh_settings, admin, "alice", "submitter")
    async with console_client(fresh_settings) as client:
        forged = {**bearer(alice), "x-cardflow-actor": "user:root"}
        assert (await client.post("/v1/tasks", json=a_submission(), headers=forged)).status_code == 201
        assert (await client.get("/v1/tasks", headers=bearer(alice))).status_code == 200
        revoked = await client.post("/v1/tokens/alice/revoke", json={"reason": "laptop lost"}, headers=bearer(admin))
        assert revoked.status_code == 200
        after = await client.post("/v1/tasks", json=a_submission(name="after"), headers=bearer(alice))
        assert after.status_code == 401 and "not valid" in after.json()["detail"]
        assert (await client.get("/v1/tasks", headers=bearer(alice))).status_code == 401
    assert (await events_by_type(fresh_settings))["task.submitted"] == ["user:alice"]


async def test_the_project_a_template_sets_is_the_one_checked(fresh_settings: Settings) -> None:
    """A submitter of proj-a naming a template of project llm is refused: the check sees the submission
    as resolved, not only the fields the caller sent."""
    pool = await create_pool(fresh_settings.database_dsn or "")
    try:
        for spec in (INTAKE, CONFIG):
            await prepare_schema(pool, spec)
        async with open_object_store(fresh_settings) as objects:
            await objects.ensure_bucket(CONFIG_BUCKET)
            store = ConfigStore(pool, objects, "config/test", prefix=f"{unique('t')}/")
            await store.apply(template_document("llm-run"), LLM_TEMPLATE, base=None, actor="user:ops", reason="first")
    finally:
        await pool.close()
    admin = await first_admin(fresh_settings)
    alice = await issue_token(fresh_settings, admin, "alice", "submitter", "proj-a")
    lena = await issue_token(fresh_settings, admin, "lena", "submitter", "llm")
    async with console_client(fresh_settings) as client:
        before = await written(fresh_settings)
        refused = await client.post("/v1/tasks", json={"name": "sneaky", "template": "llm-run"}, headers=bearer(alice))
        assert refused.status_code == 403 and "role submitter for project llm" in refused.json()["detail"]
        assert await written(fresh_settings) == before
        allowed = await client.post("/v1/tasks", json={"name": "mine", "template": "llm-run"}, headers=bearer(lena))
        assert allowed.status_code == 201, allowed.text


LLM_TEMPLATE = """description: runs of the llm project
defaults:
  project: llm
  priority_class: standard
  gpus: 1
  estimate_gpu_hours: 1
  profile: compute
"""
