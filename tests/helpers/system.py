"""Run the whole cardflow system for end-to-end tests: every service, simulated agents, one event log.

    async with running_system(fresh_settings, data_dir) as system:
        system.start_agent("h100-a", "H100x8", time_scale=3600)
        await system.submit([{...submission...}, ...])            # through cf:ingest, like upstream
        view = await system.wait_for(lambda s: s.task_by_name("x") if ... else None, what="...")

- Services run IN-PROCESS (`run_service` as asyncio tasks of the test's loop), with short timings
  (`Timings`: lease TTL, heartbeats, sweeps) so failures and expiries happen within seconds. If a
  service task dies, the next `wait_for` raises its error instead of waiting in vain.
- Agents run as SUBPROCESSES (`cardflow agent --sim ...`) under the demo's `Supervisor` (never
  restarted, so a test can SIGKILL one and watch its lease expire); logs in `<data_dir>/logs/`.
- `system.events` is every event of `cf:events` so far, in stream order (`await system.poll()`
  reads new ones); `system.views` is the task projection over them (`shared.projection.evolve`).
- `system.pool` reaches the test's database (every service's schema) for checks against tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
from redis.asyncio import Redis

from services.common.runtime import ServiceSpec, run_service
from services.demo import upstream
from services.demo.supervisor import ChildSpec, Supervisor
from services.demo.system import cardflow_argv
from services.demo.tail import EventTail
from shared.cards import Catalog
from shared.delivery.db import create_pool
from shared.events import Envelope
from shared.events.carried import with_carried_releases, with_carried_usage
from shared.projection import evolve, task_id_of
from shared.task_view import TaskView
from shared.settings import Settings
from shared.storage import open_object_store
from shared.embedded.redis_users import USERS_FILE
from tests.helpers.redis_users import acl_denials, enrolled_agent_url, reset_acl_log, service_settings, with_service_roles

T = TypeVar("T")
ALL_SERVICES = ("config", "intake", "readiness", "matcher", "dispatcher", "ledger", "views", "gate")


@dataclass(frozen=True)
class Timings:
    """Short timings so the system reacts within seconds in tests."""

    lease_ttl_s: float = 3.0
    heartbeat_s: float = 0.5
    node_lost_after_s: float = 6.0
    tick_s: float = 0.25
    debounce_s: float = 0.05
    readiness_sweep_s: float = 0.5
    min_idle_ms: int = 5_000


def settings_env(settings: Settings, data_dir: Path | None = None) -> dict[str, str]:
    """The `CARDFLOW_*` variables that point a subprocess at the same backends as `settings`."""
    secret = lambda value: value.get_secret_value() if value is not None else ""  # noqa: E731
    env = {
        "CARDFLOW_REDIS_URL": settings.redis_url or "",
        "CARDFLOW_DATABASE_URL": settings.database_dsn or "",
        "CARDFLOW_S3_ENDPOINT": settings.s3_endpoint or "",
        "CARDFLOW_S3_ACCESS_KEY": secret(settings.s3_access_key),
        "CARDFLOW_S3_SECRET_KEY": secret(settings.s3_secret_key),
        "CARDFLOW_S3_REGION": settings.s3_region,
        "CARDFLOW_S3_ADDRESSING_STYLE": settings.s3_addressing_style,
        "CARDFLOW_S3_BUCKET_PREFIX": settings.s3_bucket_prefix,
        "CARDFLOW_DATA_DIR": str(data_dir or settings.data_dir),
    }
    return {key: value for key, value in env.items() if value}


def service_specs(timings: Timings, names: Sequence[str] = ALL_SERVICES) -> dict[str, ServiceSpec]:
    """The services' specs, tuned by `timings` where a service has knobs.

    The config service seeds version 1 of `policy` from the dispatcher's configuration here (as
    `cardflow up` gives it the dispatcher's environment), so grants record `policy_version: 1`;
    its daily export is off (tests that want it run the config service themselves)."""
    from services.config.service import ConfigServiceSettings, DemoSettings
    from services.config.service import make_spec as config_service
    from services.console.projector import SPEC as views
    from services.dispatcher.config import DispatcherConfig
    from services.gate.service import SPEC as gate
    from services.dispatcher.service import make_spec as dispatcher
    from services.intake.service import SPEC as intake
    from services.ledger.service import SPEC as ledger
    from services.matcher.service import SPEC as matcher
    from services.readiness.service import ReadinessSettings
    from services.readiness.service import make_spec as readiness

    config = DispatcherConfig(
        lease_ttl_s=timings.lease_ttl_s, node_lost_after_s=timings.node_lost_after_s, tick_s=timings.tick_s,
        debounce_s=timings.debounce_s, renewal_event_every_s=1.0, min_idle_ms=timings.min_idle_ms,
        preempt_grace_s=5.0, revoke_grace_s=5.0, preempt_after_s=0.0, preempt_max_lost_gpu_hours=1e9,
        estimate_every_s=1.0,
    )  # fmt: skip
    specs = {
        "config": config_service(ConfigServiceSettings(daily=False), seed_from=config, demo=DemoSettings(time_scale=None)),
        "intake": intake,
        "readiness": readiness(ReadinessSettings(sweep_seconds=timings.readiness_sweep_s)),
        "matcher": matcher,
        "dispatcher": dispatcher(config),
        "ledger": ledger,
        "views": views,
        "gate": gate,
    }
    return {name: specs[name] for name in names}


class ServiceDied(RuntimeError):
    """An in-process service stopped with an error while the test was waiting."""


class RunningSystem:
    """Handles a test uses on the running system (see the module docstring)."""

    def __init__(self, settings: Settings, data_dir: Path, timings: Timings, redis: Redis, pool: asyncpg.Pool,
                 supervisor: Supervisor, services: dict[str, asyncio.Task[None]],
                 specs: Mapping[str, ServiceSpec] | None = None, stop: asyncio.Event | None = None,
                 users_dir: Path | None = None, pg_roles: bool = False) -> None:  # fmt: skip
        self.settings, self.data_dir, self.timings = settings, data_dir, timings
        self.redis, self.pool, self.supervisor, self.services = redis, pool, supervisor, services
        self.specs, self.stop = dict(specs or {}), stop or asyncio.Event()
        self.users_dir = users_dir or settings.data_dir
        self.pg_roles = pg_roles
        self.agent_urls: dict[str, str] = {}
        self.tail = EventTail(redis)
        self.events: list[Envelope] = []  # each event once, as consumers apply them (see `poll`)
        self._seen_event_ids: set[str] = set()
        self.views: dict[str, TaskView] = {}

    # ---- acting like upstream ---------------------------------------------------------------

    async def submit(self, submissions: Sequence[Mapping[str, Any]]) -> list[str]:
        """XADD one `task.submit` entry per submission to `cf:ingest`; returns the entry ids."""
        return await upstream.submit(self.redis, submissions)

    async def signal_data_ready(self, dataset: str, version: str) -> None:
        await upstream.signal_data_ready(self.redis, dataset, version, source="e2e test")

    async def put_object(self, uri: str) -> None:
        async with open_object_store(self.settings) as store:
            await upstream.put_input(store, uri)

    # ---- agents -------------------------------------------------------------------------------

    def start_agent(self, agent_id: str, sim: str, *, time_scale: float, env: Mapping[str, str] | None = None) -> int:
        """Start `cardflow agent --id ID --sim CARDxN` as a subprocess; returns its pid."""
        argv = cardflow_argv("agent", "--id", agent_id, "--sim", sim, "--time-scale", f"{time_scale:g}",
                             "--heartbeat", f"{self.timings.heartbeat_s:g}")  # fmt: skip
        if agent_id not in self.agent_urls and (self.users_dir / USERS_FILE).exists():  # its own Redis user
            self.agent_urls[agent_id] = enrolled_agent_url(self.settings.redis_url or "", self.users_dir, agent_id)
        own = {"CARDFLOW_REDIS_URL": self.agent_urls[agent_id]} if agent_id in self.agent_urls else {}
        (pid,) = self.supervisor.start([ChildSpec(f"agent-{agent_id}", argv, env={**own, **(env or {})}, restart=False)])
        return pid

    def kill_agent(self, agent_id: str, sig: int = signal.SIGKILL) -> None:
        self.supervisor.kill(f"agent-{agent_id}", sig)

    def agent_log(self, agent_id: str) -> str:
        path = self.supervisor.log_path(f"agent-{agent_id}")
        return path.read_text(errors="replace") if path.exists() else ""

    # ---- services ------------------------------------------------------------------------------

    async def kill_service(self, name: str) -> None:
        """Stop an in-process service abruptly (its task is cancelled wherever it is: a transaction
        in flight rolls back, entries it read stay pending and unacked), like a killed process."""
        task = self.services[name]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def start_service(self, name: str) -> None:
        """Start a (killed) service again with the same spec and settings."""
        settings = service_settings(self.settings, name, self.users_dir, pg_role=self.pg_roles)
        self.services[name] = asyncio.create_task(run_service(self.specs[name], settings, self.stop), name=f"e2e:{name}")

    # ---- observing --------------------------------------------------------------------------------

    async def poll(self) -> list[Envelope]:
        """Read the events appended since the last poll; update `events` and `views`.

        Delivery is at least once: a relay or the gate stopped between its XADD and marking the row
        sent appends the same event again after its restart. Every consumer applies an event id
        once, so does this: `events` holds each event once (a count of grants is a count of leases).
        """
        new = []
        for event in await self.tail.read_all():
            if event.event_id not in self._seen_event_ids:
                self._seen_event_ids.add(event.event_id)
                new.append(event)
        for event in with_carried_usage(new):
            task_id = task_id_of(event)
            if task_id is not None:
                self.views[task_id] = evolve(self.views.get(task_id), event)  # type: ignore[assignment]
        self.events += new
        return new

    async def wait_for(self, check: Callable[[RunningSystem], Any], *, timeout: float = 60.0,
                       what: str = "the condition") -> Any:  # fmt: skip
        """Poll events until `check(self)` (sync or async) returns something truthy, and return it.

        Fails after `timeout` seconds, saying what it waited for and where the tasks are.
        """
        deadline = time.monotonic() + timeout
        while True:
            await self.poll()
            self._raise_if_a_service_died()
            result = check(self)
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result  # type: ignore[return-value]
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; {self.describe()}")
            await asyncio.sleep(0.1)

    def of_type(self, *types: str) -> list[Envelope]:
        """The events of these types; a release a run's end carries counts as the `lease.released` it stands for,
        each usage slice a `usage.batch_recorded` carries as the `usage.recorded` it stands for."""
        unfolded = with_carried_releases(self.events)
        if "usage.recorded" in types:
            unfolded = with_carried_usage(unfolded)
        return [event for event in unfolded if event.type in types]

    def task_by_name(self, name: str) -> TaskView | None:
        found = [view for view in self.views.values() if view.name == name]
        return found[0] if len(found) == 1 else None

    def describe(self) -> str:
        """A short account of where the tasks are (for failure messages)."""
        states: dict[str, int] = {}
        for view in self.views.values():
            states[view.state.value] = states.get(view.state.value, 0) + 1
        open_tasks = [f"{v.name}: {v.state.value} ({v.reason_detail or v.reason})" for v in self.views.values() if not v.is_terminal]
        return f"{len(self.events)} events, task states {states}; open: {open_tasks[:5]}"

    def _raise_if_a_service_died(self) -> None:
        for name, task in self.services.items():
            if task.done():
                error = task.exception() if not task.cancelled() else None
                raise ServiceDied(f"service {name} stopped: {error!r}") from error


@contextlib.asynccontextmanager
async def running_system(settings: Settings, data_dir: Path, *, timings: Timings = Timings(),
                         services: Sequence[str] = ALL_SERVICES) -> AsyncIterator[RunningSystem]:  # fmt: skip
    """Start the services (in-process, each as its own Redis user and PostgreSQL role) and an agent
    supervisor; stop everything on exit. A command Redis refused to any process fails the test (ACL
    LOG); a statement PostgreSQL refused makes its service fail, which fails the test too.

    The config service (when in `services`) starts first and seeds the documents before the others
    start, so every grant and match records the versions it used (never the env preset's None)."""
    users_dir = settings.data_dir  # the session's Redis users (tests/helpers/redis_users.py)
    settings = settings.model_copy(update={"data_dir": data_dir})
    stop = asyncio.Event()
    specs = service_specs(timings, services)
    tasks: dict[str, asyncio.Task[None]] = {}
    redis = Redis.from_url(settings.redis_url or "")
    await reset_acl_log(redis)
    roles = await with_service_roles(settings, users_dir)
    pool = await create_pool(settings.database_dsn or "")
    try:
        for name, spec in specs.items():
            own = service_settings(settings, name, users_dir, pg_role=roles)
            tasks[name] = asyncio.create_task(run_service(spec, own, stop), name=f"e2e:{name}")
            if name == "config":
                await _wait_until_seeded(pool, tasks[name])
        with Supervisor(data_dir / "logs", env=settings_env(settings, data_dir), stop_timeout_s=5.0) as supervisor:
            yield RunningSystem(settings, data_dir, timings, redis, pool, supervisor, tasks, specs, stop, users_dir, roles)
        denied = await acl_denials(redis)
        assert not denied, f"the Redis ACLs refused commands cardflow's processes need: {denied}"
    finally:
        stop.set()
        _, pending = await asyncio.wait(tasks.values(), timeout=20) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        await pool.close()
        await redis.aclose()


SEEDED = ("policy", "cards")


async def _wait_until_seeded(pool: asyncpg.Pool, config: asyncio.Task[None], timeout: float = 60.0) -> None:
    """Until the config service has written version 1 of `SEEDED` (fails if it stopped or took too long)."""
    deadline = time.monotonic() + timeout
    while True:
        if config.done():
            error = None if config.cancelled() else config.exception()
            raise ServiceDied(f"service config stopped before seeding: {error!r}") from error
        with contextlib.suppress(asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
            names = {row["name"] for row in await pool.fetch("SELECT DISTINCT name FROM config.versions")}
            if set(SEEDED) <= names:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"the config service did not seed {SEEDED} within {timeout:.0f}s")
        await asyncio.sleep(0.1)


# ---- checks over the event log ---------------------------------------------------------------


@dataclass(frozen=True)
class GpuInterval:
    """One lease's hold on one GPU: from its `lease.granted` to its `lease.released` (None = still held)."""

    node_id: str
    gpu_index: int
    lease_id: str
    start: datetime
    end: datetime | None


def gpu_intervals(events: Sequence[Envelope]) -> list[GpuInterval]:
    """Every (node, GPU) hold, from the lease events of the log."""
    ended = {e.data.lease_id: e.data.ended_at for e in with_carried_releases(events) if e.type == "lease.released"}
    return [
        GpuInterval(e.data.node_id, gpu, e.data.lease_id, e.occurred_at, ended.get(e.data.lease_id))
        for e in events
        if e.type == "lease.granted"
        for gpu in e.data.gpu_indices
    ]


def double_leases(events: Sequence[Envelope]) -> list[tuple[GpuInterval, GpuInterval]]:
    """Pairs of holds of the same GPU that overlap in time (should be none)."""
    by_gpu: dict[tuple[str, int], list[GpuInterval]] = {}
    for interval in gpu_intervals(events):
        by_gpu.setdefault((interval.node_id, interval.gpu_index), []).append(interval)
    clashes = []
    for holds in by_gpu.values():
        holds.sort(key=lambda h: h.start)
        for earlier, later in zip(holds, holds[1:]):
            if earlier.end is None or later.start < earlier.end:
                clashes.append((earlier, later))
    return clashes


def leased_money_by_project(
    events: Sequence[Envelope], views: Mapping[str, TaskView], catalog: Catalog, *, cost_quantum: Decimal
) -> dict[str, tuple[Decimal, Decimal]]:
    """Per project: (GPU-seconds, cost) of every ended lease, from `lease.released` alone (or the release a run's
    end carries).

    GPU-seconds = GPUs x (ended_at - granted_at) in whole microseconds; cost = GPU-seconds x the
    catalog price / 3600, rounded half-even to `cost_quantum` per lease (the ledger's stated precision).
    """
    totals: dict[str, tuple[Decimal, Decimal]] = {}
    for event in with_carried_releases(events):
        if event.type != "lease.released":
            continue
        data = event.data
        micros = (data.ended_at - data.granted_at) // timedelta(microseconds=1)
        gpu_seconds = Decimal(data.gpus * micros) / Decimal(1_000_000)
        price = Decimal(str(catalog.card(data.card_type).price_per_gpu_hour))
        cost = (gpu_seconds * price / Decimal(3600)).quantize(cost_quantum, ROUND_HALF_EVEN)
        project = views[data.task_id].project or "?"
        seconds, money = totals.get(project, (Decimal(0), Decimal(0)))
        totals[project] = (seconds + gpu_seconds, money + cost)
    return totals
