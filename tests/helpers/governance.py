"""Helpers for governance tests on the running system: the policy in force, tokens, a webhook receiver.

    await set_policy(system, "approvals.rules=[{name: big, gpu_hours_above: 2}]")   # a new policy version
    tokens = await issue_tokens(system.settings, {"rita": ("reviewer", None)})         # {"root": ..., "rita": ...}
    with WebhookReceiver(fail_first=1) as hook: ...hook.url... hook.bodies            # a real HTTP server
    result = cli(url, token, "quota", "list"); json_of(cli(url, token, "queue", "--json"))  # the CLI in-process
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from typer.testing import CliRunner, Result

from services.cli.main import app
from services.config.store import ConfigStore
from services.identity.bootstrap import bootstrap_admin
from services.identity.tokens import TokenRequest, create_token
from services.common.runtime import Emitter
from shared.config import POLICY
from shared.delivery.db import create_pool
from shared.identity import Role
from shared.settings import Settings
from shared.storage import open_object_store


async def policy_seeded(system: Any) -> bool:
    return bool(await system.pool.fetchval("SELECT to_regclass('config.versions') IS NOT NULL")) and bool(
        await system.pool.fetchval("SELECT 1 FROM config.versions WHERE name = 'policy'"))


async def set_policy(system: Any, *assignments: str, reason: str = "test") -> int:
    """Set `key.path=value`s on the policy in force (the config service must have seeded it); the new version."""
    await system.wait_for(lambda s: policy_seeded(s), timeout=60, what="the config service to seed the policy")
    async with open_object_store(system.settings) as objects:
        store = ConfigStore(system.pool, objects, "config/test")  # type: ignore[arg-type]
        change = await store.set(POLICY, list(assignments), base=None, actor="user:test", reason=reason)
    return change.record.version


async def issue_tokens(settings: Settings, holders: Mapping[str, tuple[str, str | None]]) -> dict[str, str]:
    """A first admin `root` and a token per holder (name -> (role, project)); name -> secret."""
    secrets = {"root": (await bootstrap_admin(settings.database_dsn or "", "root")).secret}
    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=2)
    try:
        for name, (role, project) in holders.items():
            async with pool.acquire() as conn, conn.transaction():
                issued = await create_token(conn, Emitter("identity", "test/1", "user:root"),
                                            TokenRequest(name=name, role=Role(role), project=project, reason="test"))
            secrets[name] = issued.secret
    finally:
        await pool.close()
    return secrets


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


class WebhookReceiver:
    """An HTTP server on a free port that records every JSON POST; the first `fail_first` get a 500."""

    def __init__(self, fail_first: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused = 0
        self._fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if receiver.refused < receiver._fail_first:
                    receiver.refused += 1
                    self.send_response(500)
                else:
                    receiver.bodies.append(body)
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:  # quiet
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def __enter__(self) -> WebhookReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True, name="webhook-receiver").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def cli(url: str, token: str, *args: str) -> Result:
    """`cardflow ARGS` in this process, against the served console. It runs in the test's thread: the
    in-process services pause meanwhile (their log lines would otherwise land in its captured output)."""
    env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token, "CARDFLOW_TOKEN_FILE": None, "COLUMNS": "220"}
    return CliRunner().invoke(app, list(args), env=env)


async def cli_beside(url: str, token: str, *args: str) -> Result:
    """`cli` in a thread, so the in-process services go on meanwhile (a command whose endpoint waits
    for a lock a paused service holds, like a quota change, would otherwise wait for ever)."""
    return await asyncio.to_thread(cli, url, token, *args)


def json_of(result: Result) -> Any:
    """The JSON a command printed. The console (and, with `cli_beside`, the services) log from this
    process, so their lines can land in the captured stdout around the command's own output: decode
    the first JSON value that starts a line, ignoring what follows it."""
    lines = result.stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(("{", "[")))
    value, _ = json.JSONDecoder().raw_decode("\n".join(lines[start:]))
    return value
