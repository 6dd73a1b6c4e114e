"""API tokens against real PostgreSQL and Redis: bootstrap, create, 401/403, revoke, and their events."""

from __future__ import annotations

import asyncpg
import pytest
from redis.asyncio import Redis

from services.identity.bootstrap import AdminExists, bootstrap_admin
from shared.delivery.wire import extract_body
from shared.events import parse_event
from shared.names import producer_stream
from shared.settings import Settings
from tests.helpers.console_server import bearer, console_client
from tests.helpers.running_services import poll_until


async def count(settings: Settings, sql: str) -> int:
    conn = await asyncpg.connect(settings.database_dsn)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


async def test_first_admin_bootstrap_happens_once(fresh_settings: Settings) -> None:
    first = await bootstrap_admin(fresh_settings.database_dsn or "", "root", "first admin of the test")
    assert first.secret.startswith("cfk_") and first.token.role == "admin" and first.token.created_by == "system:bootstrap"
    with pytest.raises(AdminExists, match="an active admin token exists already"):
        await bootstrap_admin(fresh_settings.database_dsn or "", "mallory")
    stored = await count(fresh_settings, f"SELECT count(*) FROM identity.tokens WHERE secret_sha256 = '{first.secret}'")
    assert stored == 0, "the secret itself is never stored"


async def test_tokens_roles_refusals_and_revocation(fresh_settings: Settings) -> None:
    root = (await bootstrap_admin(fresh_settings.database_dsn or "", "root")).secret
    async with console_client(fresh_settings) as client:
        nobody = await client.get("/v1/whoami")
        assert nobody.status_code == 401 and nobody.headers["www-authenticate"] == "Bearer"
        assert "no token" in nobody.json()["detail"]
        wrong = await client.get("/v1/whoami", headers=bearer("cfk_not-a-real-token"))
        assert wrong.status_code == 401 and "not valid" in wrong.json()["detail"]

        created = await client.post("/v1/tokens", headers=bearer(root),
                                    json={"name": "alice", "role": "submitter", "project": "nlp", "reason": "joins nlp"})  # fmt: skip
        assert created.status_code == 201, created.text
        alice = created.json()["secret"]
        me = (await client.get("/v1/whoami", headers=bearer(alice))).json()
        assert me == {"name": "alice", "role": "submitter", "project": "nlp", "actor": "user:alice"}

        tokens_before = await count(fresh_settings, "SELECT count(*) FROM identity.tokens")
        outbox_before = await count(fresh_settings, "SELECT count(*) FROM identity.outbox")
        refused = await client.post("/v1/tokens", headers=bearer(alice), json={"name": "eve", "role": "admin"})
        assert refused.status_code == 403
        assert refused.json()["detail"] == (
            "forbidden: this needs role admin; token 'alice' (submitter for project nlp) does not have it"
        )
        assert (await client.get("/v1/tokens", headers=bearer(alice))).status_code == 403
        assert await count(fresh_settings, "SELECT count(*) FROM identity.tokens") == tokens_before
        assert await count(fresh_settings, "SELECT count(*) FROM identity.outbox") == outbox_before

        scoped_admin = await client.post("/v1/tokens", headers=bearer(root), json={"name": "x", "role": "admin", "project": "nlp"})
        assert scoped_admin.status_code == 422 and "every project" in scoped_admin.text
        bad_name = await client.post("/v1/tokens", headers=bearer(root), json={"name": "has space", "role": "auditor"})
        assert bad_name.status_code == 422 and "1-64 characters" in bad_name.text

        listed = (await client.get("/v1/tokens", headers=bearer(root))).json()
        assert [(t["name"], t["role"], t["project"]) for t in listed] == [("root", "admin", None), ("alice", "submitter", "nlp")]
        assert all("secret" not in t and t["hint"].startswith("cfk_") for t in listed)

        revoked = await client.post("/v1/tokens/alice/revoke", headers=bearer(root), json={"reason": "left the team"})
        assert revoked.status_code == 200 and [t["name"] for t in revoked.json()["revoked"]] == ["alice"]
        assert (await client.get("/v1/whoami", headers=bearer(alice))).status_code == 401
        again = await client.post("/v1/tokens/alice/revoke", headers=bearer(root), json={})
        assert again.status_code == 404 and "nothing revoked" in again.json()["detail"]
        everything = (await client.get("/v1/tokens", headers=bearer(root), params={"include_revoked": True})).json()
        assert [t["revoked_by"] for t in everything] == [None, "user:root"]

        redis = Redis.from_url(fresh_settings.redis_url or "")
        try:
            async def relayed() -> list:
                entries = await redis.xrange(producer_stream("identity"))  # its relay's own stream (the gate forwards it)
                return [parse_event(extract_body(fields)) for _, fields in entries] if len(entries) >= 3 else []

            events = await poll_until(relayed)
        finally:
            await redis.aclose()
    assert [(e.type, e.actor, e.data.name) for e in events] == [
        ("token.created", "system:bootstrap", "root"), ("token.created", "user:root", "alice"),
        ("token.revoked", "user:root", "alice"),
    ]  # fmt: skip
    assert events[1].data.role == "submitter" and events[1].data.project == "nlp" and events[2].data.reason == "left the team"
