"""Serve the console app (HTTP API + web page) on a free port in a background thread, or in-process.

    with serving_console(settings) as url:            # "http://127.0.0.1:<port>", answering /healthz
        result = CliRunner().invoke(app, ["tasks"], env={"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token})

For tests of CLI commands, which are clients of the API: the command runs in the test's process
(typer's CliRunner, no interpreter start-up), the server on uvicorn in a thread with its own event
loop, so a synchronous command may block while the server answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx

import uvicorn

from services.console.app import create_app
from services.console.auth import SESSION_COOKIE
from services.identity.bootstrap import bootstrap_admin
from shared.settings import Settings

START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serving_console(settings: Settings) -> Iterator[str]:
    """The console app on uvicorn in a thread; yields its base URL once it accepts requests."""
    port = free_port()
    app = create_app(settings, board_snapshots=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), name=f"console-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the console did not start within {START_TIMEOUT_S:g} s (thread alive: {thread.is_alive()})")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextlib.asynccontextmanager
async def console_client(settings: Settings, token: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The console app with its lifespan run, reached in-process through httpx (no port, no thread).
    With `token`, every request carries it (bearer header and the pages' session cookie); otherwise
    pass one per request: `headers=bearer(token)`."""
    app = create_app(settings, board_snapshots=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        signed = {"headers": bearer(token), "cookies": {SESSION_COOKIE: token}} if token else {}
        async with httpx.AsyncClient(transport=transport, base_url="http://console", **signed) as client:
            yield client


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def first_admin(settings: Settings, name: str = "root") -> str:
    """The secret of a fresh database's first admin token (`cardflow token bootstrap`)."""
    return (await bootstrap_admin(settings.database_dsn or "", name)).secret


async def issue_token(settings: Settings, admin: str, name: str, role: str, project: str | None = None) -> str:
    """A new token's secret, created through the API by `admin`."""
    async with console_client(settings, admin) as client:
        answer = await client.post("/v1/tokens", json={"name": name, "role": role, "project": project})
    answer.raise_for_status()
    return answer.json()["secret"]
