"""The console process (`cardflow console`): the HTTP API v1, its OpenAPI, and the web console.

    app = create_app(settings)        # serve with uvicorn; tests use httpx's ASGI transport

- `/v1/...`: the API (`services.console.api`); OpenAPI at `/openapi.json`, Swagger UI at `/docs` and
  ReDoc at `/redoc`, their scripts served from the installed `fastapi-offline` package (no CDN).
- `/board`, `/queue`, `/fleet`, `/quotas`, `/ledger`, `/tasks`, `/tasks/{id}`: the web console,
  server-rendered pages in English / 中文 (`services.console.pages`; no build step, no CDN);
  `/static/`: its stylesheet and script.
- `/healthz`: 200 when PostgreSQL answers, else 503.
- `/metrics`: Prometheus metrics of the system's state (`services.observability.system_state`).

At start-up the process applies the `views`, `intake` and `identity` schema migrations (idempotent
and serialised, like every service start), so the API works before those services first ran; the
views fill once the views service (`cardflow service views`) runs. The console owns schema
`identity` (API tokens, `services.identity`) and relays its outbox while it runs. With an object store configured
it also writes the readiness board to the reports bucket once a day
(`services.console.snapshots.run_daily_board_snapshots`; `board_snapshots=False` turns that off).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from redis.asyncio import Redis

from services.common.runtime import prepare_schema
from services.console.api import router
from services.console.auth import authenticate, install_permission_handler
from services.console.request_guard import RequestGuard, document_guarded_answers, validation_error_handler
from services.console.labels import all_labels
from services.console.pages.routes import SignInRequired, sign_in_redirect
from services.console.pages.accountability import router as accountability_pages_router
from services.console.pages.routes import router as pages_router
from services.console.projector import SPEC as VIEWS_SPEC
from services.config.service import SPEC as CONFIG_SPEC
from services.config.service import open_config_store
from services.console.routes import config as config_routes
from services.console.routes import agents, quota_grants, routes_router, tokens
from services.console.routes.agents import finish_unenrolments_of
from services.console.snapshots import run_daily_board_snapshots
from services.identity.tokens import IDENTITY_SPEC
from services.identity.tokens import SCHEMA as IDENTITY_SCHEMA
from services.intake.service import SPEC as INTAKE_SPEC
from services.observability.system_state import metrics_endpoint
from services.ledger.service import SPEC as LEDGER_SPEC
from shared.delivery.db import close_pool, create_pool
from shared.delivery.relay import OutboxRelay
from shared.settings import Settings
from shared.submission import TaskSubmission

STATIC = Path(__file__).parent / "static"


def create_app(settings: Settings, *, board_snapshots: bool = True) -> FastAPI:
    """The console's ASGI app; connections open in its lifespan (never at import time)."""
    if not settings.database_dsn:
        raise RuntimeError("CARDFLOW_DATABASE_URL is not set (see `cardflow endpoints`)")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(settings.database_dsn or "")
        resources = contextlib.AsyncExitStack()
        try:
            for spec in (VIEWS_SPEC, INTAKE_SPEC, IDENTITY_SPEC, CONFIG_SPEC, LEDGER_SPEC):
                await prepare_schema(pool, spec)
            app.state.pool = pool
            app.state.settings = settings
            app.state.producer = f"console/{settings.instance}-{os.getpid()}"
            app.state.config_store = await open_config_store(pool, settings, app.state.producer, resources)
            await finish_unenrolments_of(app)  # unenrolments whose record failed before a stop
            daily = None
            if board_snapshots and settings.s3_endpoint:
                daily = asyncio.create_task(run_daily_board_snapshots(pool, settings), name="board-snapshots")
            async with identity_relay(pool, settings.redis_url):
                yield
            if daily is not None:
                daily.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await daily
        finally:
            await resources.aclose()
            await close_pool(pool)

    app = FastAPIOffline(  # /docs and /redoc load Swagger UI / ReDoc from the package, not a CDN
        title="cardflow API",
        version="1",
        summary="Submit GPU tasks, watch their state and why they wait, see the readiness board and the fleet.",
        lifespan=lifespan,
    )
    install_permission_handler(app)
    app.add_middleware(RequestGuard)  # hostile /v1 input: a 4xx naming it before any route runs
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    config_routes.install(app)
    signed_in = [Depends(authenticate)]  # every /v1 route but /v1/labels: 401 without a valid token
    app.include_router(router, dependencies=signed_in)
    app.include_router(routes_router, dependencies=signed_in)
    app.include_router(tokens.router)
    app.include_router(agents.router)
    app.include_router(quota_grants.router)
    app.include_router(pages_router)
    app.include_router(accountability_pages_router)
    app.add_exception_handler(SignInRequired, sign_in_redirect)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_api_route("/healthz", healthz, methods=["GET"], summary="200 when the database answers")
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"], include_in_schema=False)  # Prometheus
    app.add_api_route("/v1/labels", labels, methods=["GET"], summary="Console labels in English and Chinese")
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


@asynccontextmanager
async def identity_relay(pool: asyncpg.Pool, redis_url: str | None) -> AsyncIterator[None]:
    """Publish the identity outbox (token events) while the app runs; the console owns that schema.
    Without Redis (a console reading a database only) the events wait in the outbox."""
    if not redis_url:
        yield
        return
    redis = Redis.from_url(redis_url)
    stop = asyncio.Event()
    relay = asyncio.create_task(OutboxRelay(pool, redis, IDENTITY_SCHEMA).run(stop), name="identity-relay")
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(relay, return_exceptions=True)
        await redis.aclose()


async def healthz(request: Request) -> JSONResponse:
    try:
        await request.app.state.pool.fetchval("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy; report it
        return JSONResponse({"status": "unhealthy", "database": repr(exc)}, status_code=503)
    return JSONResponse({"status": "ok"})


async def labels() -> dict[str, Any]:
    return all_labels()


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the submission schema v1 (the POST body, validated by intake, not FastAPI)
    and the answers every /v1 operation may give (`document_guarded_answers`)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    submission = TaskSubmission.model_json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(submission.pop("$defs", {}))
    components["TaskSubmission"] = submission
    document_guarded_answers(schema)
    app.openapi_schema = schema
    return schema
