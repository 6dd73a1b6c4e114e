"""The moving parts of `bench/pipeline.py`: the raw Redis round trip, the system under test, one phase.

- `measure_raw_round_trip`: XADD -> XREADGROUP -> XACK on the same Redis, flat out (messages/s)
  and one message at a time (round-trip latency);
- `run_fleet_worker`: many simulated agents (`services.agent.build.build_daemon`) in ONE process,
  so a 50-node fleet does not need 50 interpreters on a 2-core machine;
- `PipelineBench`: backends, every service and the fleet as supervised processes, and
  `run_phase(rate, duration)`: submit through `cf:ingest` at a steady rate, wait until every task
  ended, then read the phase's events back from `cf:events` and time each stage.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import psutil
from redis.asyncio import Redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.pipeline_deliveries import DeliveryCounts, phase_counts, take_snapshot
from bench.pipeline_pgcpu import ServerCpu, cpu_by_client, snapshot
from bench.pipeline_pgstats import PG_STATS_SETTINGS, PgStats, PgStatsResult
from bench.pipeline_report import PhaseResult, RawResult, percentiles, print_results, stage_lags
from bench.profile_shares import profile_report
from services.demo.supervisor import ChildSpec, Supervisor
from services.demo.system import SERVICE_NAMES, service_children
from services.demo.upstream import submit_fields
from shared.cards import load_catalog
from shared.cards.matching import MatchRequest, estimate_runtime_s
from shared.embedded import Backends, Endpoints
from shared.events import new_event_id
from shared.names import EVENTS_STREAM, INGEST_STREAM, REPORTS_STREAM, agent_inbox
from shared.settings import Settings

REPO = Path(__file__).resolve().parent.parent
SETTLE_BEFORE_COUNTING_S = 5.0
"""`--deliveries`: how long after the last task ended the counters are read (the ledger, audit and views
consume the last events after the dispatcher stored the end)."""
TRACKED = ("task.submitted", "task.readiness_changed", "task.matched", "task.queued", "lease.granted",
           "task.started", "task.succeeded", "lease.released", "usage.recorded", "usage.batch_recorded")  # fmt: skip


@dataclass(frozen=True)
class Fleet:
    agents: int
    sim: str  # CARDxN

    @property
    def card_type(self) -> str:
        return self.sim.rsplit("x", 1)[0]

    @property
    def gpus(self) -> int:
        return self.agents * int(self.sim.rsplit("x", 1)[1])


# ---- 1. raw Redis round trip ------------------------------------------------------------------------


async def measure_raw_round_trip(redis_url: str, messages: int, console: Console) -> RawResult:
    """Flat-out XADD (pipelined by 500) / XREADGROUP (500) / XACK throughput, then 2,000 single round trips."""
    redis = Redis.from_url(redis_url)
    stream, group = f"bench:raw:{new_event_id()}", "bench"
    body = json.dumps({"padding": "x" * 900})  # about the size of a cardflow event
    await redis.xgroup_create(stream, group, id="0", mkstream=True)
    try:
        started = time.perf_counter()
        await asyncio.gather(_produce(redis, stream, body, messages), _consume(redis, stream, group, messages))
        throughput = messages / (time.perf_counter() - started)
        latencies = [await _one_round_trip(redis, stream, group, body) for _ in range(2_000)]
    finally:
        await redis.delete(stream)
        await redis.aclose()
    console.print(f"raw Redis stream round trip: {throughput:,.0f} messages/s flat out, "
                  f"p50 {percentiles(latencies).p50 * 1000:.2f} ms one at a time")  # fmt: skip
    return RawResult(messages, throughput, percentiles(latencies))


async def _produce(redis: Redis, stream: str, body: str, messages: int) -> None:
    for start in range(0, messages, 500):
        pipe = redis.pipeline(transaction=False)
        for _ in range(min(500, messages - start)):
            pipe.xadd(stream, {"event": body})
        await pipe.execute()


async def _consume(redis: Redis, stream: str, group: str, messages: int) -> None:
    done = 0
    while done < messages:
        answer = await redis.xreadgroup(group, "c1", {stream: ">"}, count=500, block=1000)
        ids = [entry_id for _, entries in answer or () for entry_id, _ in entries]
        if ids:
            await redis.xack(stream, group, *ids)
            done += len(ids)


async def _one_round_trip(redis: Redis, stream: str, group: str, body: str) -> float:
    started = time.perf_counter()
    await redis.xadd(stream, {"event": body})
    answer = await redis.xreadgroup(group, "c2", {stream: ">"}, count=1, block=1000)
    await redis.xack(stream, group, answer[0][1][0][0])
    return time.perf_counter() - started


# ---- 2. the fleet worker ------------------------------------------------------------------------------


async def run_fleet_worker(agents: int, sim: str, time_scale: float, heartbeat_s: float) -> None:
    """Run `agents` simulated agents in this process until SIGTERM (the `fleet` sub-command)."""
    from services.agent.build import AgentOptions, build_daemon
    from shared.logging import configure_logging
    from shared.settings import get_settings

    configure_logging("WARNING")
    settings = get_settings()
    options = [AgentOptions(agent_id=f"bench-{n:03d}", sim=sim, time_scale=time_scale, heartbeat_s=heartbeat_s,
                            progress_step=None, data_dir=settings.data_dir) for n in range(agents)]  # fmt: skip
    daemons = [build_daemon(option, settings.redis_url or "") for option in options]
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await asyncio.gather(*(daemon.run(stop) for daemon in daemons))


# ---- 3. the system under test ---------------------------------------------------------------------------


class PipelineBench:
    """Backends + services + fleet for the benchmark (a context manager), and its phases."""

    def __init__(self, data_dir: Path, fleet: Fleet, task_seconds: float, task: Mapping[str, Any], console: Console,
                 *, profile: tuple[str, ...] = (), pg_stats: bool = False, deliveries: bool = False) -> None:  # fmt: skip
        self.data_dir, self.fleet, self.task, self.console, self.profile = data_dir, fleet, dict(task), console, profile
        self.pg_stats = pg_stats
        self.pg_stats_results: list[PgStatsResult] = []
        self.deliveries = deliveries
        self.delivery_results: list[DeliveryCounts] = []
        self.time_scale = _runtime_on(fleet.card_type, self.task) / task_seconds
        self.task_seconds = task_seconds
        self.backends = Backends(Settings(), data_dir / "backends", durable=False,
                                 postgres_settings=PG_STATS_SETTINGS if pg_stats else None)  # fmt: skip
        self.endpoints: Endpoints | None = None
        self.supervisor: Supervisor | None = None
        self.phases = 0
        self.load_before = os.getloadavg()

    def __enter__(self) -> PipelineBench:
        self.endpoints = self.backends.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.supervisor is not None:
            self.supervisor.close()
        self.backends.__exit__(*exc)

    @property
    def redis_url(self) -> str:
        assert self.endpoints is not None
        return self.endpoints.redis_url

    def start_system(self) -> None:
        assert self.endpoints is not None
        env = {**self.endpoints.as_env(), "CARDFLOW_DATA_DIR": str(self.data_dir)}
        self.supervisor = Supervisor(self.data_dir / "logs", env=env, stop_timeout_s=30).__enter__()
        self.supervisor.start([*self._service_children(), self._fleet_child()])
        asyncio.run(self._wait_for_fleet())

    def profile_path(self, name: str) -> Path:
        return self.data_dir / f"profile-{name}.pstats"

    def _profiled(self, name: str, argv: list[str]) -> list[str]:
        """`argv` (a python command line) under cProfile when `name` is profiled."""
        if name not in self.profile:
            return argv
        return [argv[0], "-m", "cProfile", "-o", str(self.profile_path(name)), *argv[1:]]

    def _service_children(self) -> list[ChildSpec]:
        return [replace(c, argv=self._profiled(c.name, list(c.argv))) for c in service_children(SERVICE_NAMES)]

    def _fleet_child(self) -> ChildSpec:
        argv = [sys.executable, str(REPO / "bench" / "pipeline.py"), "fleet", "--agents", str(self.fleet.agents),
                "--sim", self.fleet.sim, "--time-scale", f"{self.time_scale:g}"]  # fmt: skip
        return ChildSpec("fleet", self._profiled("fleet", argv))

    async def _wait_for_fleet(self) -> None:
        pool = await asyncpg.create_pool(self.endpoints.database_url, min_size=1, max_size=2)  # type: ignore[union-attr]
        try:
            with self.console.status(f"waiting for {self.fleet.agents} agents to register ..."):
                while await _count_or_zero(pool, "SELECT count(*) FROM dispatcher.nodes") < self.fleet.agents:
                    await asyncio.sleep(0.5)
        finally:
            await pool.close()

    def run_phase(self, rate: float, duration: float) -> PhaseResult:
        self.phases += 1
        return asyncio.run(self._phase(f"bench-{self.phases}", rate, duration))

    async def _phase(self, project: str, rate: float, duration: float) -> PhaseResult:
        redis = Redis.from_url(self.redis_url, socket_timeout=None)  # reading a phase back may take long on a busy machine
        pool = await asyncpg.create_pool(self.endpoints.database_url, min_size=1, max_size=2)  # type: ignore[union-attr]
        stats = PgStats(self.endpoints.database_url) if self.pg_stats else None  # type: ignore[union-attr]
        try:
            first_id = await _last_entry_id(redis)
            counted = await take_snapshot(redis, pool) if self.deliveries else None
            if stats is not None:
                await stats.start()
            server_before = self.postgres_cpu() if stats is not None else None
            cpu_before, window_start = self.cpu(), time.monotonic()
            sent = await self._submit_and_wait(redis, pool, project, rate, duration)
            cpu = {name: self.cpu().get(name, 0.0) - used for name, used in cpu_before.items()}
            window = time.monotonic() - window_start
            if stats is not None and server_before is not None:
                by_client = cpu_by_client(server_before, self.postgres_cpu())
                result = await stats.finish(len(sent))
                per_task = {name: s * 1000 / max(len(sent), 1) for name, s in by_client.items()}
                self.pg_stats_results.append(replace(result, cpu_ms_per_task_by_client=per_task))
            if counted is not None:
                await asyncio.sleep(SETTLE_BEFORE_COUNTING_S)
                after = await take_snapshot(redis, pool)
                self.delivery_results.append(await phase_counts(redis, counted, after, len(sent)))
            times = await _read_phase_events(redis, first_id, project)
        finally:
            await pool.close()
            await redis.aclose()
        return _result(project, rate, duration, sent, times, cpu, window)

    async def _submit_and_wait(self, redis: Redis, pool: asyncpg.Pool, project: str, rate: float,
                               duration: float) -> dict[str, float]:  # fmt: skip
        total = int(rate * duration)
        sent: dict[str, float] = {}
        query = f"SELECT count(*) FROM dispatcher.tasks WHERE project = '{project}' AND state IN ('succeeded', 'failed')"
        columns = (TextColumn(f"{project} at {rate:g}/s"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console) as progress:
            submitted, finished = progress.add_task("submitted", total=total), progress.add_task("done", total=total)
            sender = asyncio.create_task(_send_at_rate(redis, self.task | {"project": project}, rate, total, sent))
            deadline = time.monotonic() + duration * 4 + 120
            done = 0
            while done < total and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                done = await _count_or_zero(pool, query)
                progress.update(submitted, completed=len(sent))
                progress.update(finished, completed=done)
            await sender
        return sent

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each supervised process and each embedded server."""
        pids = {status.name: status.pid for status in self.supervisor.status() if status.pid} if self.supervisor else {}
        pids |= {process.name: process.record.pid for process in self.backends.processes}
        return cpu_by_process(pids)

    def postgres_cpu(self) -> ServerCpu:
        """The embedded PostgreSQL's processes' CPU so far, each backend named by the service it serves."""
        clients = {status.name: status.pid for status in self.supervisor.status() if status.pid} if self.supervisor else {}
        [postgres] = [process for process in self.backends.processes if process.name == "postgres"]
        return snapshot(postgres.record.pid, clients | {"bench": os.getpid()})

    def stop_and_profile(self) -> str | None:
        """Stop every process (a profiled one writes its profile on exit); per profiled process, where its
        time went by kind of code and its top functions."""
        if self.supervisor is not None:
            self.supervisor.close()
            self.supervisor = None
        written = {name: self.profile_path(name) for name in self.profile if self.profile_path(name).exists()}
        return profile_report(written) if written else None

    def print_results(self, raw: RawResult, phases: list[PhaseResult], profile: str | None) -> None:
        print_results(self.console, raw, phases, profile, self.describe())

    def describe(self) -> dict[str, str]:
        load = ", ".join(f"{value:.1f}" for value in self.load_before)
        return {
            "fleet": f"{self.fleet.agents} simulated agents x {self.fleet.sim} = {self.fleet.gpus} GPUs, one process",
            "task": f"1 GPU, {self.task_seconds:g} s real each (sim time x{self.time_scale:,.0f})",
            "machine": platform_line(),
            "load": f"load average {load} before the run: the machine may have been busy with other work",
            "cores": str(os.cpu_count() or 1),
            "gpus": str(self.fleet.gpus),
            "task_seconds": str(self.task_seconds),
        }


def platform_line() -> str:
    import platform

    return (f"CPython {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPU(s), "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, {platform.system()} {platform.release()}")  # fmt: skip


def cpu_by_process(pids: Mapping[str, int]) -> dict[str, float]:
    """user + system CPU seconds of each process and its children, by name."""
    used: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            process = psutil.Process(pid)
            members = [process, *process.children(recursive=True)]
            used[name] = sum(sum(p.cpu_times()[:2]) for p in members)
        except psutil.Error:
            continue
    return used


def _runtime_on(card_type: str, task: Mapping[str, Any]) -> float:
    request = MatchRequest(gpus=task["gpus"], min_vram_gb=0, estimate_gpu_hours=task["estimate_gpu_hours"], profile=task["profile"])
    return estimate_runtime_s(request, card_type, load_catalog())


async def _count_or_zero(pool: asyncpg.Pool, query: str) -> int:
    try:
        return int(await pool.fetchval(query))
    except asyncpg.UndefinedTableError:  # the service has not created its tables yet
        return 0


async def _send_at_rate(redis: Redis, task: dict[str, Any], rate: float, total: int, sent: dict[str, float]) -> None:
    """XADD `total` submissions at `rate` per second, in 10 ms ticks; records each label's send time."""
    started = time.monotonic()
    while len(sent) < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1) - len(sent)
        if due > 0:
            labels = [f"{task['project']}-{len(sent) + n}" for n in range(due)]
            pipe = redis.pipeline(transaction=False)
            for label in labels:
                pipe.xadd(INGEST_STREAM, submit_fields(task | {"name": label, "labels": {"bench": label}}))
            now = time.time()
            await pipe.execute()
            sent.update(dict.fromkeys(labels, now))
        await asyncio.sleep(0.01)


async def _last_entry_id(redis: Redis) -> str:
    last = await redis.xrevrange(EVENTS_STREAM, count=1)
    return last[0][0].decode() if last else "0"


def _entry_time(entry_id: bytes) -> float:
    """When Redis appended an entry: the milliseconds part of its id."""
    return int(entry_id.split(b"-")[0]) / 1000


async def _read_phase_events(redis: Redis, after_id: str, project: str) -> dict[str, dict[str, float]]:
    """label -> {point -> epoch seconds} for this phase's tasks (see `pipeline_report.STAGES` for points)."""
    phase = _PhaseEvents(project)
    cursor = after_id
    while entries := await redis.xrange(EVENTS_STREAM, min=f"({cursor}", count=10_000):
        cursor = entries[-1][0].decode()
        for entry_id, fields in entries:
            kind = fields[b"type"].decode()
            if kind in TRACKED:
                phase.note(json.loads(fields[b"event"]), kind, _entry_time(entry_id))
    since = f"{int(float(after_id.split('-')[0]))}-0" if after_id != "0" else "0"
    await phase.read_agent_streams(redis, since)
    return phase.times


class _PhaseEvents:
    """Folds the phase's events, grant commands and finished reports into per-task time points."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.label_of: dict[str, str] = {}  # task id -> bench label
        self.lease_label: dict[str, str] = {}  # lease id -> bench label
        self.agents: set[str] = set()
        self.times: dict[str, dict[str, float]] = {}

    def note(self, event: dict[str, Any], kind: str, on_stream: float) -> None:
        data = event["data"]
        if kind == "usage.batch_recorded":  # a ledger batch's usage: a usage.recorded per lease, at its carrier's time
            for piece in data["slices"]:
                self.note({**event, "data": piece}, "usage.recorded", on_stream)
            return
        if kind == "task.submitted" and data["submission"]["project"] == self.project:
            self.label_of[data["task_id"]] = data["submission"]["labels"]["bench"]
        label = self.label_of.get(data.get("task_id", ""))
        if label is None:
            return
        if kind == "lease.granted":
            self.lease_label[data["lease_id"]] = label
            self.agents.add(data["agent_id"])
        seen = self.times.setdefault(label, {})
        if kind == "usage.recorded" or kind not in seen:
            seen[kind] = datetime.fromisoformat(event["occurred_at"]).timestamp()
            seen[f"{kind}@stream"] = on_stream
        if kind == "task.succeeded" and data.get("released"):  # the lease's end rides on the success
            self.note({**event, "data": {"task_id": data["task_id"]}}, "lease.released", on_stream)

    async def read_agent_streams(self, redis: Redis, since: str) -> None:
        """When each grant command reached its agent's inbox, and each finished report `cf:reports`."""
        for agent_id in sorted(self.agents):
            await self._scan(redis, agent_inbox(agent_id), since, "command.lease_grant", "command@stream")
        await self._scan(redis, REPORTS_STREAM, since, "report.finished", "finished@stream")

    async def _scan(self, redis: Redis, stream: str, since: str, kind: str, point: str) -> None:
        cursor = since
        while entries := await redis.xrange(stream, min=f"({cursor}" if cursor != since else cursor, count=10_000):
            cursor = entries[-1][0].decode()
            for entry_id, fields in entries:
                if fields.get(b"type", b"").decode() != kind:
                    continue
                label = self.lease_label.get(json.loads(fields[b"event"])["data"]["lease_id"])
                if label is not None:
                    self.times[label].setdefault(point, _entry_time(entry_id))


def _result(project: str, rate: float, duration: float, sent: dict[str, float], times: dict[str, dict[str, float]],
            cpu: dict[str, float], window: float) -> PhaseResult:  # fmt: skip
    done = {label: t for label, t in times.items() if "task.succeeded" in t and label in sent}
    first_sent = min(sent.values())
    ends = sorted(t["task.succeeded"] for t in done.values())
    half = first_sent + duration / 2
    wall = (ends[-1] - first_sent) if ends else math.nan
    held = sum(t["lease.released"] - t["lease.granted"] for t in done.values() if "lease.released" in t and "lease.granted" in t)
    steady = sum(1 for end in ends if half <= end <= first_sent + duration) / (duration / 2)
    return PhaseResult(
        project=project, offered_rate=rate, sent=len(sent), done=len(done),
        send_rate=len(sent) / max(1e-9, max(sent.values()) - first_sent),
        wall_s=wall, mean_gpus_leased=held / wall if ends else 0.0,
        throughput=len(done) / (ends[-1] - first_sent) if ends else 0.0, steady_throughput=steady,
        submit_to_lease=percentiles([t["lease.granted"] - sent[label] for label, t in done.items() if "lease.granted" in t]),
        stages=stage_lags(done, sent), cpu=cpu, cpu_window_s=window,
    )  # fmt: skip
