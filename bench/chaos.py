"""Chaos run: the whole system under load while its parts are killed, hostile input, forgeries.

    .venv/bin/python bench/chaos.py                 # ~5 min; writes docs/RELIABILITY.md
    .venv/bin/python bench/chaos.py --tasks 60 --chaos-s 60 --out /tmp/chaos.md   # a short run

What it does, on a fresh data dir of its own (embedded Redis, PostgreSQL and S3, supervised):

1. starts every service, the console and three simulated GPU hosts as supervised processes
   (restarted with back-off when they die), with short lease timings so expiries happen in seconds;
2. hostile input: every hostile submission of `tests/reliability/hostile.py` through `cf:ingest`,
   and the same bodies plus a few HTTP-only ones (100,000-deep nesting, binary, text/plain)
   against `POST /v1/tasks`; counts answers by status (a 500 or a dropped connection is a failure);
3. load + chaos: submits `--tasks` valid tasks in waves while, every `--kill-every-s` seconds,
   `kill -9` hits a random service, agent or the console; Redis and PostgreSQL (and S3) are
   `kill -9`ed once each and their recovery timed (until they answer again);
4. forgeries (recorded as observed, not assumed), every process running as its own Redis user
   like under `cardflow up`: a `task.succeeded` for a running task XADDed with the matcher's
   credentials straight onto `cf:events`, and onto the matcher's own stream claiming producer
   `dispatcher/forged` (does the views' state believe either?), and an agent's credentials
   reading another agent's inbox;
5. waits until every valid task has ended (or `--settle-s` passed) and computes from `cf:events`:
   tasks submitted / finished / lost / run twice / double-leased, requeues by reason, rejections
   by field, recovery times, and the peak resident memory of every process together.

The figures go to `--out` (Markdown) and, with `--json`, to stdout. Start it with `nice -n 15` on a
shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import psutil
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.demo.supervisor import Supervisor  # noqa: E402
from services.demo.system import SERVICE_NAMES, agent_children, console_child, enrolled_fleet, own_backend_env, service_children  # noqa: E402
from services.demo.workload import DemoAgent  # noqa: E402
from shared.embedded import Backends, Endpoints  # noqa: E402
from shared.embedded.health import probe_postgres, probe_redis, probe_s3  # noqa: E402
from shared.embedded.processes import free_ports  # noqa: E402
from bench.chaos_report import Figures, markdown  # noqa: E402
from bench.chaos_tally import FORGED_LEASE, distinct, story_of, tally_runs  # noqa: E402
from shared.events import Envelope, parse_event, parse_report  # noqa: E402
from shared.names import EVENTS_STREAM, INGEST_STREAM, REPORTS_STREAM, agent_inbox, producer_stream  # noqa: E402
from shared.settings import Settings  # noqa: E402
from tests.helpers.system import double_leases  # noqa: E402
from tests.reliability.hostile import HOSTILE  # noqa: E402

FLEET = (DemoAgent("chaos-h100-a", "H100", 8), DemoAgent("chaos-h100-b", "H100", 8), DemoAgent("chaos-l40s", "L40S", 8))
TIME_SCALE = 600.0  # a 0.5 GPU-hour task on one GPU runs 3 s
SHORT_TIMINGS = {
    "CARDFLOW_DISPATCHER_LEASE_TTL_S": "6",
    "CARDFLOW_DISPATCHER_NODE_LOST_AFTER_S": "15",
    "CARDFLOW_DISPATCHER_TICK_S": "0.5",
    "CARDFLOW_DISPATCHER_MIN_IDLE_MS": "5000",
    "CARDFLOW_DISPATCHER_PREEMPT_AFTER_S": "1",
}
TERMINAL = {"task.succeeded", "task.failed", "task.cancelled"}
HTTP_ONLY: dict[str, bytes] = {
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "binary": bytes(range(256)) * 4,
    "two megabytes": b'{"name": "' + b"x" * 2_000_000 + b'"}',
}


def a_task(n: int, rng: random.Random) -> dict[str, Any]:
    return {
        "name": f"chaos-{n:04d}", "project": "chaos", "priority_class": rng.choice(["core", "standard", "opportunistic"]),
        "gpus": rng.choice([1, 1, 2, 4]), "estimate_gpu_hours": round(rng.uniform(0.2, 1.5), 2),
        "profile": rng.choice(["compute", "memory", "balanced"]), "checkpoint": {"interval_minutes": 5},
        "idempotency_key": f"chaos-{n:04d}",
    }  # fmt: skip


def resilient_redis(url: str) -> Redis:
    """A client that reconnects and retries for up to a minute: this script plays upstream, which
    keeps sending while Redis is being restarted."""
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    retry = Retry(ExponentialBackoff(cap=5.0, base=0.2), retries=30)
    return Redis.from_url(url, retry=retry, retry_on_error=[RedisConnectionError, RedisTimeoutError, OSError])


async def read_events(redis: Redis, stream: str = EVENTS_STREAM) -> list[Envelope]:
    """Every entry of `stream` (`cf:events`, or `cf:reports` for the agents' reports), parsed, in order."""
    parse = parse_report if stream == REPORTS_STREAM else parse_event
    events, start = [], "-"
    while True:
        batch = await redis.xrange(stream, min=start, count=5000)
        events += [parse(fields[b"event"]) for _, fields in batch if b"event" in fields]
        if len(batch) < 5000:
            return events
        start = "(" + batch[-1][0].decode()


class MemoryPeak:
    """Samples the resident memory of this process tree (services, agents, servers) every second."""

    def __init__(self) -> None:
        self.peak_bytes = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            total = 0
            for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
            self.peak_bytes = max(self.peak_bytes, total)
            await asyncio.sleep(1.0)


async def recovery_after_kill(backends: Backends, endpoints: Endpoints, name: str) -> float:
    """`kill -9` one embedded server; seconds until it answers again (restarted by the watch)."""
    [process] = [p for p in backends.processes if p.name == name]
    probes = {
        "redis": lambda: probe_redis(endpoints.redis_url),
        "postgres": lambda: probe_postgres(endpoints.database_url),
        "s3": lambda: probe_s3(endpoints),
    }
    started = time.monotonic()
    os.kill(process.record.pid, signal.SIGKILL)
    await asyncio.sleep(0.3)
    while time.monotonic() - started < 180:
        if (await probes[name]()).ok:
            return round(time.monotonic() - started, 1)
        await asyncio.sleep(0.2)
    return float("inf")


async def server_kills(backends: Backends, endpoints: Endpoints, options: argparse.Namespace, figures: Figures) -> None:
    """`--server-kills N`: N more `kill -9`s of each embedded server per wave (outages come often)."""
    for _ in range(options.server_kills):
        for server in ("redis", "postgres"):
            await asyncio.sleep(options.chaos_s / len(FLEET) / 4 / max(1, options.server_kills))
            recovered = await recovery_after_kill(backends, endpoints, server)
            figures.recovery_s[server] = max(figures.recovery_s.get(server, 0.0), recovered)


async def post_hostile(url: str, token: str, figures: Figures) -> None:
    """Every hostile body against `POST /v1/tasks`, as a valid token's holder (an admin): with a token the
    body reaches validation, which is what this measures."""
    bodies = {h.label: h.text.encode("utf-8", "surrogatepass") for h in HOSTILE} | HTTP_ONLY
    answers: Counter[str] = Counter()
    figures.hostile_http_bodies = len(bodies) + 1
    auth = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=auth) as http:
        for body in bodies.values():
            try:
                answer = await http.post("/v1/tasks", content=body, headers={"content-type": "application/json"})
                answers[str(answer.status_code)] += 1
            except httpx.TransportError as error:
                answers[type(error).__name__] += 1
        plain = await http.post("/v1/tasks", content=b"{}", headers={"content-type": "text/plain"})
        answers[str(plain.status_code)] += 1
    figures.http_answers = dict(answers)


async def chaos_loop(supervisor: Supervisor, rng: random.Random, every_s: float, stop: asyncio.Event, kills: Counter[str]) -> None:
    """`kill -9` one child every `every_s`: each service, agent and the console in turn, in a
    shuffled order, round after round (so every one is killed at least once in a long enough run)."""
    victims: list[str] = []
    while not stop.is_set():
        await asyncio.sleep(every_s)
        if not victims:
            victims = [s.name for s in supervisor.status()]
            rng.shuffle(victims)
        victim = victims.pop()
        supervisor.kill(victim, signal.SIGKILL)
        kills[victim] += 1


DECOY_HOURS = 100.0
"""A decoy runs 100 GPU-hours / 600 = 10 minutes: no honest success can come while it is forged."""


def a_decoy(name: str) -> dict[str, Any]:
    return {"name": name, "project": "chaos", "priority_class": "core", "gpus": 1, "estimate_gpu_hours": DECOY_HOURS,
            "profile": "compute", "idempotency_key": name}  # fmt: skip


async def forge_success(redis: Redis, forger: Redis, decoy: str, producer: str, stream: str) -> tuple[str | None, str]:
    """Once the decoy task runs, XADD (with `forger`'s credentials) a `task.succeeded` for it as
    `producer` onto `stream`; its id (None: it never ran) and what Redis answered."""
    from shared.delivery.wire import wire_fields
    from shared.events import make_event
    from shared.events.carried import carried_events

    deadline = time.monotonic() + 120
    task_id = None
    while task_id is None and time.monotonic() < deadline:
        events = await read_events(redis)
        ids = {e.data.task_id for e in events if e.type == "task.submitted" and e.data.submission.name == decoy}
        told = [t for event in events for t in (*carried_events(event), event)]  # a start may ride on the success
        started = [e for e in told if e.type == "task.started"]
        task_id = next((e.data.task_id for e in started if e.data.task_id in ids), None)
        await asyncio.sleep(1)
    if task_id is None:
        return None, "the decoy never ran"
    event = make_event(
        "task.succeeded", subject=f"task/{task_id}", subject_seq=10_000, producer=producer, actor="upstream:intruder",
        data={"task_id": task_id, "lease_id": FORGED_LEASE, "output_units": 1e9},
    )
    try:
        await forger.xadd(stream, wire_fields(event))
    except NoPermissionError as exc:
        return task_id, f"refused by Redis ({str(exc).split(';')[0]})"
    return task_id, "appended"


async def views_state(dsn: str, task_id: str) -> str | None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT state FROM views.tasks WHERE id = $1", task_id)
    finally:
        await conn.close()


def tally(events: list[Envelope], reports: list[Envelope], names: set[str], figures: Figures) -> None:
    """Figures of the valid tasks (by name) and of the rejections, from the event and report logs
    (counted over distinct event ids: `bench/chaos_tally.py`)."""
    counts = tally_runs(events, reports, names)
    unique = distinct(events)
    figures.tasks_submitted = len(counts.submitted)
    figures.tasks_finished = len(counts.succeeded)
    figures.tasks_failed = len(counts.failed)
    figures.tasks_lost = len(names) - len(counts.ended)
    figures.tasks_run_twice = len(counts.run_twice)
    figures.run_twice_details = [story_of(t, counts.submitted[t], events, reports) for t in counts.run_twice]
    figures.delivered_twice = counts.delivered_twice
    figures.double_leased_gpus = len(double_leases(unique))
    figures.requeues_by_reason = dict(Counter(str(e.data.reason) for e in unique if e.type == "task.requeued"))
    rejected = [e for e in unique if e.type == "task.rejected"]
    figures.hostile_rejected = len(rejected)
    figures.rejections_by_field = dict(Counter(r.field.split("[")[0].split(".")[0] for e in rejected for r in e.data.reasons))


async def run(options: argparse.Namespace) -> Figures:
    figures, rng, kills = Figures(), random.Random(options.seed), Counter[str]()
    data_dir = Path(tempfile.mkdtemp(prefix="cardflow-chaos-"))
    data_dir.chmod(0o711)
    backends = Backends(Settings(), data_dir, durable=True, start_timeout=300.0)  # as `cardflow up` (AOF fsync every second)
    endpoints = await asyncio.to_thread(backends.start)
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    env = {**endpoints.as_env(), **SHORT_TIMINGS}
    redis = resilient_redis(endpoints.redis_url)
    memory, stop_memory = MemoryPeak(), asyncio.Event()
    memory_task = asyncio.create_task(memory.run(stop_memory))
    try:
        with Supervisor(data_dir / "logs", env=env, initial_backoff_s=0.5, max_backoff_s=5.0) as supervisor:
            own = own_backend_env(endpoints, [*SERVICE_NAMES, "console"])  # each process as its own Redis user and PostgreSQL role
            agent_urls = enrolled_fleet(endpoints, FLEET)
            supervisor.start([*service_children(env=own), console_child(port, env=own["console"]),
                              *agent_children(FLEET, TIME_SCALE, heartbeat_s=1.0, redis_urls=agent_urls)])
            await wait_healthy(url)
            print("system up; hostile input", flush=True)
            for hostile in HOSTILE:
                await redis.xadd(INGEST_STREAM, {"type": "task.submit", "payload": hostile.text.encode("utf-8", "surrogatepass")})
            figures.hostile_submitted = len(HOSTILE)
            from services.identity.bootstrap import bootstrap_admin

            token = (await bootstrap_admin(endpoints.database_url, "chaos", "bench/chaos.py: hostile HTTP bodies")).secret
            await post_hostile(url, token, figures)

            print(f"load: {options.tasks} tasks, chaos for {options.chaos_s:.0f} s", flush=True)
            stop_chaos = asyncio.Event()
            chaos = asyncio.create_task(chaos_loop(supervisor, rng, options.kill_every_s, stop_chaos, kills))
            tasks = [a_task(n, rng) for n in range(options.tasks)]
            names = {t["name"] for t in tasks}
            for decoy in ("decoy-1", "decoy-2"):
                await redis.xadd(INGEST_STREAM, {"type": "task.submit", "payload": json.dumps(a_decoy(decoy))})
            waves = [tasks[i::4] for i in range(4)]
            started = time.monotonic()
            for index, wave in enumerate(waves):
                for task in wave:
                    await redis.xadd(INGEST_STREAM, {"type": "task.submit", "payload": json.dumps(task)})
                if index == 0:
                    figures.forged_by_intruder_believed = await forgery(redis, endpoints, "decoy-1", "intruder/1", EVENTS_STREAM, figures)
                    figures.forged_as_dispatcher_believed = await forgery(
                        redis, endpoints, "decoy-2", "dispatcher/forged", producer_stream("matcher"), figures)
                server = {1: "redis", 2: "postgres", 3: "s3"}.get(index)
                if server is not None:
                    figures.recovery_s[server] = await recovery_after_kill(backends, endpoints, server)
                await server_kills(backends, endpoints, options, figures)
                await asyncio.sleep(options.chaos_s / len(waves))
            figures.agent_read_another_inbox = await read_another_inbox(agent_urls[FLEET[0].agent_id])
            stop_chaos.set()
            await chaos
            figures.kills = dict(kills)
            print("chaos over; waiting for every task to end", flush=True)
            figures.settle_s = await settle(redis, names, options.settle_s, started)
            tally(await read_events(redis), await read_events(redis, REPORTS_STREAM), names, figures)
            figures.dead_letters_by_reason = await deadletter_reasons(redis)
    finally:
        stop_memory.set()
        await memory_task
        figures.peak_rss_mb = round(memory.peak_bytes / 2**20, 1)
        await redis.aclose()
        await asyncio.to_thread(backends.stop)
        if not options.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
    return figures


async def wait_healthy(url: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            try:
                if (await http.get(f"{url}/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
    raise RuntimeError("the console did not answer")


async def forgery(redis: Redis, endpoints: Endpoints, decoy: str, producer: str, stream: str, figures: Figures) -> bool | None:
    """Forge a success for the running decoy as `producer` onto `stream`, with the matcher's Redis
    credentials: do the views believe it? The decoy is then cancelled (it would run for minutes)."""
    from services.demo.upstream import cancel_fields

    forger = resilient_redis(endpoints.redis_url_for("service.matcher"))
    try:
        task_id, answer = await forge_success(redis, forger, decoy, producer, stream)
    finally:
        await forger.aclose()
    figures.forgery_answers[f"{stream} as {producer}"] = answer
    if task_id is None:
        return None
    await asyncio.sleep(5)
    believed = await views_state(endpoints.database_url, task_id) == "succeeded" and not await _dispatcher_succeeded(redis, task_id)
    await redis.xadd(INGEST_STREAM, cancel_fields(task_id, "chaos decoy"))
    return believed


async def _dispatcher_succeeded(redis: Redis, task_id: str) -> bool:
    return any(e.type == "task.succeeded" and e.data.task_id == task_id and e.producer.startswith("dispatcher")
               and e.data.lease_id != FORGED_LEASE for e in await read_events(redis))  # fmt: skip


async def read_another_inbox(agent_url: str) -> bool:
    """Can an agent's Redis credentials read another agent's inbox?"""
    agent_redis = resilient_redis(agent_url)
    try:
        return bool(await agent_redis.xrange(agent_inbox(FLEET[1].agent_id), count=1))
    except Exception:  # noqa: BLE001 - refused (NOPERM) is the wanted answer
        return False
    finally:
        await agent_redis.aclose()


async def settle(redis: Redis, names: set[str], timeout: float, started: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = await read_events(redis)
        ids = {e.data.task_id for e in events if e.type == "task.submitted" and e.data.submission.name in names}
        ended = {e.data.task_id for e in events if e.type in TERMINAL and e.producer.startswith("dispatcher")
                 and getattr(e.data, "lease_id", None) != FORGED_LEASE}
        if len(ids) == len(names) and ids <= ended:
            break
        await asyncio.sleep(2)
    return round(time.monotonic() - started, 1)


async def deadletter_reasons(redis: Redis) -> dict[str, int]:
    entries = await redis.xrange("cf:deadletter")
    return dict(Counter(fields.get(b"reason", b"?").decode() for _, fields in entries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=150)
    parser.add_argument("--chaos-s", type=float, default=120.0)
    parser.add_argument("--kill-every-s", type=float, default=8.0)
    parser.add_argument("--settle-s", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--server-kills", type=int, default=0, help="extra kill -9s of Redis and PostgreSQL per wave")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "RELIABILITY.md")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep-data", action="store_true", help="keep the run's data dir (logs) for a post-mortem")
    options = parser.parse_args()
    figures = asyncio.run(run(options))
    options.out.write_text(markdown(figures, options, TIME_SCALE), encoding="utf-8")
    print(json.dumps(asdict(figures), indent=2) if options.json else markdown(figures, options, TIME_SCALE))


if __name__ == "__main__":
    main()
