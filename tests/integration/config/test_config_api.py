"""The change path over HTTP against real PostgreSQL and S3 (the CLI's calls): show/apply/set/history/
diff/rollback with who and why, refusals that write nothing, templates, exports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from services.common.runtime import prepare_schema
from services.config.seeding import seed_documents
from services.config.service import SPEC as CONFIG
from services.console.app import create_app
from services.identity.bootstrap import bootstrap_admin
from shared.delivery.db import create_pool
from shared.settings import Settings
from tests.helpers.delivery_support import unique

pytestmark = pytest.mark.integration


@asynccontextmanager
async def console(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    """The console app in-process, the documents seeded, and an admin, an operator and a submitter token.

    Its buckets have a prefix of their own (CARDFLOW_S3_BUCKET_PREFIX), so other tests' versions of
    policy.yaml in the shared S3 server are not this installation's (the history lists strays).
    """
    settings = settings.model_copy(update={"s3_bucket_prefix": f"{unique('t').replace('_', '-')}-"})
    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=2)
    try:
        await prepare_schema(pool, CONFIG)
    finally:
        await pool.close()
    app = create_app(settings, board_snapshots=False)
    async with app.router.lifespan_context(app):
        await seed_documents(app.state.config_store, actor="service:config")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            root = (await bootstrap_admin(settings.database_dsn or "", "root")).secret
            tokens = {"root": root}
            for name, role in (("ops-alice", "operator"), ("sub-bob", "submitter")):
                answer = await client.post("/v1/tokens", json={"name": name, "role": role},
                                           headers={"authorization": f"Bearer {root}"})
                tokens[name] = answer.json()["secret"]
            yield client, {name: f"Bearer {secret}" for name, secret in tokens.items()}


async def test_show_edit_apply_history_diff_rollback_with_who_and_why(fresh_settings: Settings) -> None:
    async with console(fresh_settings) as (client, auth):
        alice = {"authorization": auth["ops-alice"]}
        shown = (await client.get("/v1/config/show", params={"name": "policy"}, headers=alice)).json()
        edited = (shown["header"] + shown["content"]).replace("  default: 0.1", "  default: 0.2")
        applied = await client.post("/v1/config/apply", headers=alice, json={
            "name": "policy", "content": edited, "reason": "bursts of core work next week"})
        stale = await client.post("/v1/config/apply", headers=alice, json={
            "name": "policy", "content": edited.replace("default: 0.2", "default: 0.3"), "reason": "from an old show"})
        setting = await client.post("/v1/config/set", headers=alice, json={
            "name": "policy", "assignments": ["preemption.after_s=120"], "reason": "core waits less"})
        back = await client.post("/v1/config/rollback", headers=alice, json={
            "name": "policy", "version": 1, "reason": "the launch slipped"})
        history = (await client.get("/v1/config/history", params={"name": "policy"}, headers=alice)).json()
        diff = (await client.get("/v1/config/diff", params={"name": "policy", "old": 1, "new": 2}, headers=alice)).json()
        v1 = (await client.get("/v1/config/show", params={"name": "policy", "version": 1}, headers=alice)).json()
        now = (await client.get("/v1/config/show", params={"name": "policy"}, headers=alice)).json()

    assert applied.status_code == 201 and applied.json()["version"] == 2 and applied.json()["base_version"] == 1
    assert stale.status_code == 409 and "based on version 1, but version 2 by user:ops-alice" in stale.json()["detail"]
    assert setting.status_code == 201 and back.status_code == 201
    assert [(v["version"], v["actor"], v["action"], v["reason"]) for v in history["versions"]] == [
        (1, "service:config", "seeded", history["versions"][0]["reason"]),
        (2, "user:ops-alice", "applied", "bursts of core work next week"),
        (3, "user:ops-alice", "set", "core waits less"),
        (4, "user:ops-alice", "rolled_back", "the launch slipped"),
    ]
    assert all(v["sha256"] and v["s3_version_id"] and v["at"] for v in history["versions"])
    assert history["uncommitted_s3_versions"] == []
    assert "-  default: 0.1\n+  default: 0.2" in diff["diff"]
    assert now["version"] == 4 and now["content"] == v1["content"] and now["rolled_back_to"] == 1


async def test_unauthenticated_or_under_privileged_changes_are_refused_and_nothing_is_written(fresh_settings: Settings) -> None:
    async with console(fresh_settings) as (client, auth):
        body = {"name": "policy", "assignments": ["headroom.default=0.5"], "reason": "sneaky"}
        anonymous = await client.post("/v1/config/set", json=body)
        submitter = await client.post("/v1/config/set", json=body, headers={"authorization": auth["sub-bob"]})
        no_reason = await client.post("/v1/config/set", json=body | {"reason": ""}, headers={"authorization": auth["ops-alice"]})
        bad = await client.post("/v1/config/set", json=body | {"assignments": ["headroom.default=5", "queue.oder=fifo"]},
                                headers={"authorization": auth["ops-alice"]})
        history = (await client.get("/v1/config/history", params={"name": "policy"},
                                    headers={"authorization": auth["sub-bob"]})).json()

    assert anonymous.status_code == 401 and submitter.status_code == 403 and "operator" in submitter.json()["detail"]
    assert no_reason.status_code == 422
    assert bad.status_code == 422 and {p["field"] for p in bad.json()["problems"]} == {"headroom.default", "queue.oder"}
    assert [v["version"] for v in history["versions"]] == [1]


async def test_templates_over_http_and_the_task_list_export(fresh_settings: Settings) -> None:
    async with console(fresh_settings) as (client, auth):
        alice = {"authorization": auth["ops-alice"]}
        made = await client.post("/v1/config/apply", headers=alice, json={
            "name": "templates/eval", "content": "defaults: {project: eval, gpus: 1}\n", "reason": "nightly evals"})
        listed = (await client.get("/v1/config/documents", params={"kind": "template"}, headers=alice)).json()
        no_reason = await client.post("/v1/exports", headers=alice, json={})
        exported = await client.post("/v1/exports", headers=alice, json={"reason": "hand-over to the night shift"})
        exports = (await client.get("/v1/exports", headers=alice)).json()

    assert made.status_code == 201 and [(t["name"], t["version"]) for t in listed] == [("templates/eval", 1)]
    assert exported.status_code == 201, exported.text
    keys = [o["key"].rsplit("/", 1)[1] for o in exported.json()["objects"]]
    assert keys == ["tasks.csv", "demand.csv", "tasks.json", "demand.json"]
    assert all(o["version_id"] for o in exported.json()["objects"])
    assert exported.json()["objects"][0]["key"].startswith("exports/20")
    assert [e["export_id"] for e in exports] == [exported.json()["export_id"]] and exports[0]["actor"] == "user:ops-alice"
    assert exports[0]["reason"] == "hand-over to the night shift" and no_reason.status_code == 422
