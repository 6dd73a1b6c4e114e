"""The HTTP API against hostile clients, served by uvicorn as users reach it: no 500 for any body,
415 for what is not JSON, no dropped connection under concurrent clients, and a reused
idempotency key with a different body is a 409 that says so."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import asyncpg
import httpx

from shared.settings import Settings
from tests.helpers.console_server import bearer, first_admin
from tests.reliability.hostile import HOSTILE, HTTP_HOSTILE, a_valid
from tests.reliability.http_server import served_console

JSON = {"content-type": "application/json"}


async def tasks_stored(settings: Settings) -> int:
    conn = await asyncpg.connect(settings.database_dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM intake.tasks"))
    finally:
        await conn.close()


async def test_no_body_gets_a_500_and_every_rejection_names_its_problem(
    fresh_settings: Settings, data_dir_factory: Callable[[], Path]
) -> None:
    token = await first_admin(fresh_settings)
    with served_console(fresh_settings, data_dir_factory()) as url:
        async with httpx.AsyncClient(base_url=url, timeout=120, headers=bearer(token)) as http:
            answers = {label: await http.post("/v1/tasks", content=body, headers=JSON) for label, body in HTTP_HOSTILE.items()}
            plain = await http.post("/v1/tasks", content=a_valid("as text"), headers={"content-type": "text/plain"})
            bad_ids = [await http.get(f"/v1/tasks/{task_id}") for task_id in ("%00", "%ED%A0%80", "x" * 5000)]
            cancel = await http.post("/v1/tasks/T1/cancel", json={"reason": "\u0000"})
    statuses = {label: answer.status_code for label, answer in answers.items()}
    assert all(400 <= status < 500 for status in statuses.values()), statuses
    for hostile in HOSTILE:
        fields = [p["field"] for p in answers[hostile.label].json()["problems"]]
        assert any(f == hostile.field or f.startswith(hostile.field + "[") for f in fields), (hostile.label, fields)
    assert statuses["two megabytes"] == 413
    assert plain.status_code == 415 and "application/json" in plain.json()["detail"]
    assert all(400 <= r.status_code < 500 for r in bad_ids), [r.status_code for r in bad_ids]
    assert 400 <= cancel.status_code < 500, cancel.text
    assert await tasks_stored(fresh_settings) == 0


async def test_eight_concurrent_clients_mixing_hostile_and_valid_bodies_lose_nothing(
    fresh_settings: Settings, data_dir_factory: Callable[[], Path]
) -> None:
    """Issue 15: ~40 connections dropped and 4 of 80 valid submissions never became tasks. The
    cause: a 500 made uvicorn close the kept-alive connection, and the next request a client sent
    on it was lost. Each client here alternates valid and hostile bodies on one connection."""
    outcomes: Counter[str] = Counter()
    hostile_bodies = list(HTTP_HOSTILE.values())
    token = await first_admin(fresh_settings)

    async def client(number: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120, headers=bearer(token)) as http:
            for i in range(10):
                for body in (a_valid(f"client-{number}-{i}").encode(), hostile_bodies[(number * 10 + i) % len(hostile_bodies)]):
                    try:
                        answer = await http.post("/v1/tasks", content=body, headers=JSON)
                        outcomes[str(answer.status_code)] += 1
                    except httpx.TransportError as error:
                        outcomes[type(error).__name__] += 1

    with served_console(fresh_settings, data_dir_factory()) as url:
        await asyncio.gather(*(client(n) for n in range(8)))
    assert outcomes["201"] == 80, outcomes
    assert set(outcomes) <= {"201", "413", "422"}, outcomes
    assert await tasks_stored(fresh_settings) == 80


async def test_a_reused_idempotency_key_with_a_different_body_is_a_conflict(
    fresh_settings: Settings, data_dir_factory: Callable[[], Path]
) -> None:
    body = json.loads(a_valid("nightly"))
    token = await first_admin(fresh_settings)
    with served_console(fresh_settings, data_dir_factory()) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=bearer(token)) as http:
            first = await http.post("/v1/tasks", json={**body, "idempotency_key": "nightly-1"})
            same = await http.post("/v1/tasks", json={**body, "idempotency_key": "nightly-1"})
            other = await http.post("/v1/tasks", json={**body, "idempotency_key": "nightly-1", "gpus": 2})
    assert first.status_code == 201 and same.status_code == 200
    assert same.json()["task_id"] == first.json()["task_id"]
    assert other.status_code == 409, other.text
    [problem] = other.json()["problems"]
    assert problem["field"] == "idempotency_key" and first.json()["task_id"] in problem["expected"]
    assert await tasks_stored(fresh_settings) == 1
