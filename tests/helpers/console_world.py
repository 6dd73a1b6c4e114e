"""A running system with a workload that leaves every kind of console page something to show.

    async with console_world(settings, data_dir) as world:
        world.base_url        # the console (uvicorn, in-process) on a free port
        world.task_id("dedup-corpus")

What it holds once ready (agents at 3600x: one estimated hour takes one second):
- running: `pretrain-70b` (core, 8 x H100, for minutes) and `embed-long` (opportunistic, L40S);
- finished: six short evals on L40S (so the ledger has cost and output), `tokenize-wiki` after its
  dataset was announced ~3 s late (so the last-days board has a wait);
- waiting: `dedup-corpus` for an S3 prefix that never appears, `finetune-13b` for H100 capacity,
  `asr-train` held by the `speech` quota (5 GPU-hours), `vision-embed` held because the `vision`
  quota expires (in 2 days) before its estimated end, `giant-moe` for a card with 200 GB;
- quota accounts: `speech` (used up), `vision` (expiring within 15 days), `llm` (plenty);
- the `policy` and `cards` documents' first versions (seeded by the config service), so the Config page has a history;
- tokens (`world.tokens`): `root` (admin), `planner` (operator), `speech-dev` (submitter of
  project speech), `reviewer` (reviewer), `auditor` (auditor).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn

import httpx

from services.common.runtime import Emitter
from services.console.app import create_app
from services.identity.bootstrap import bootstrap_admin
from services.ledger.quotas import grant_quota
from shared.task_view import TaskView
from shared.settings import Settings
from tests.helpers.system import RunningSystem, running_system

TIME_SCALE = 3600.0
MISSING_PREFIX = "s3://cardflow-console-world/corpus/2026-11/"


def _task(name: str, project: str, cls: str, gpus: int, hours: float, **extra: Any) -> dict[str, Any]:
    return {"idempotency_key": f"world-{name}", "name": name, "project": project, "priority_class": cls, "gpus": gpus,
            "estimate_gpu_hours": hours, "profile": "compute", "output_unit": "samples", **extra}  # fmt: skip


WORKLOAD: tuple[dict[str, Any], ...] = (
    _task("pretrain-70b", "llm", "core", 8, 4000, min_vram_gb=80, priority=10),
    _task("finetune-13b", "llm", "standard", 8, 3000, min_vram_gb=80),
    _task("embed-long", "research", "opportunistic", 4, 2000, min_vram_gb=40),
    *(_task(f"eval-{i}", "llm" if i % 2 else "research", "standard", 1 + i % 2, 2 + i, min_vram_gb=24) for i in range(6)),
    _task("dedup-corpus", "research", "standard", 2, 8, inputs=[MISSING_PREFIX]),
    _task("tokenize-wiki", "research", "standard", 1, 2, inputs=[{"dataset": "wiki", "version": "3"}]),
    _task("asr-train", "speech", "standard", 4, 40, min_vram_gb=24),
    _task("vision-embed", "vision", "standard", 4, 800, min_vram_gb=24),
    _task("giant-moe", "research", "standard", 8, 400, min_vram_gb=200),
)  # fmt: skip


@dataclass
class ConsoleWorld:
    system: RunningSystem
    base_url: str
    ids: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def task_id(self, name: str) -> str:
        return self.ids[name]


def _settled(system: RunningSystem) -> bool:
    """Every task is where the module docstring says (by name)."""
    want: dict[str, Callable[[TaskView], bool]] = {
        "pretrain-70b": lambda v: v.state.value == "running",
        "embed-long": lambda v: v.state.value == "running",
        "tokenize-wiki": lambda v: v.state.value == "succeeded",
        "dedup-corpus": lambda v: v.state.value == "waiting_data",
        "finetune-13b": lambda v: v.reason in {"no_capacity", "reserved", "behind_reservation", "queued"},
        "asr-train": lambda v: v.reason == "quota_exhausted",
        "vision-embed": lambda v: v.reason == "quota_expires",
        "giant-moe": lambda v: v.state.value == "unmatchable",
        **{f"eval-{i}": (lambda v: v.state.value == "succeeded") for i in range(6)},
    }
    return all((view := system.task_by_name(name)) is not None and check(view) for name, check in want.items())


async def _grant_quotas(system: RunningSystem, now: datetime) -> None:
    emitter = Emitter("ledger", "tests/console-world", "user:quota-admin")
    await system.wait_for(lambda s: s.pool.fetchval("SELECT to_regclass('ledger.quotas') IS NOT NULL"), what="ledger tables")
    grants = [("speech", 5.0, 60), ("vision", 5000.0, 2), ("llm", 1_000_000.0, 90)]
    async with system.pool.acquire() as conn, conn.transaction():
        for project, hours, days in grants:
            await grant_quota(conn, emitter, project=project, gpu_hours=hours, valid_from=now - timedelta(days=1),
                              valid_to=now + timedelta(days=days), account_id=f"{project}-2026q4")  # fmt: skip


@contextlib.asynccontextmanager
async def serve_console(settings: Settings) -> AsyncIterator[str]:
    """The console app under uvicorn on a free loopback port, in this event loop."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=30)
        sock.close()


@contextlib.asynccontextmanager
async def console_world(settings: Settings, data_dir: Path) -> AsyncIterator[ConsoleWorld]:
    async with running_system(settings, data_dir) as system:
        await _grant_quotas(system, datetime.now(UTC))
        system.start_agent("h100-a", "H100x8", time_scale=TIME_SCALE)
        system.start_agent("l40s-a", "L40Sx8", time_scale=TIME_SCALE)
        await system.wait_for(lambda s: len(s.of_type("node.registered")) >= 2, what="both agents registered")
        await system.submit(list(WORKLOAD))
        await asyncio.sleep(3)  # tokenize-wiki waits for its dataset for a while
        await system.signal_data_ready("wiki", "3")
        await system.wait_for(_settled, timeout=120, what="the console world's tasks in place")
        async with serve_console(settings) as base_url:
            ids = {view.name: view.id for view in system.views.values() if view.name}
            yield ConsoleWorld(system, base_url, ids, await _issue_tokens(settings, base_url))


TOKENS = (("planner", "operator", None), ("speech-dev", "submitter", "speech"), ("reviewer", "reviewer", None),
          ("auditor", "auditor", None))


async def _issue_tokens(settings: Settings, base_url: str) -> dict[str, str]:
    """A first admin, then one token per role the tests act as (through the API, like an admin would)."""
    root = (await bootstrap_admin(settings.database_dsn or "", "root")).secret
    tokens = {"root": root}
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {root}"}) as client:
        for name, role, project in TOKENS:
            answer = await client.post("/v1/tokens", json={"name": name, "role": role, "project": project})
            answer.raise_for_status()
            tokens[name] = answer.json()["secret"]
    return tokens
