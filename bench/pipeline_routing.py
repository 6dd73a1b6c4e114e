"""Type-routed delivery, measured: what the gate's extra appends cost against the skipped deliveries they save.

Run: `.venv/bin/python bench/pipeline_routing.py [--tasks N] [--rounds R] [--gate-batch B] [--consumer-batch C]`.
It starts an embedded Redis (with the other embedded backends, unused) and, per round, in alternating order:

1. *gate*: fills the producer streams `cf:events:<owner>` with N tasks' events (the mix `bench/pipeline.py
   --deliveries` counted in session 19, 6.28 events per task, `MIX`: submitted, readiness_changed, matched,
   granted (carrying the task's entry into the queue), succeeded (carrying its lease's end, no `lease.released`
   since c304e16) once each, usage.recorded 1.08, started 0.10, renewed 0.10; real bodies. Numbers measured
   before session 19 were for session 11's mix, 7.46 events per task with a `lease.released` each) and lets the
   real `services.gate.forwarder.Gate` (`batch_size` B per producer stream) forward them all, once with
   no routes (`cf:events` only, as before) and once with `shared.events.routing.ROUTING_TABLE`;
2. *consumers*: for each routed group, one `reliable_batch_subscriber` (C entries a read, its service's
   types parsed, the rest skipped unparsed by wire type, as the services do) consumes the whole phase
   from `cf:events`, and another the same phase from the group's routed stream.

The gate appends a routed event with one EVAL (`services.gate.forwarder.FAN_OUT`); with `--xadd-each` it
is also run as first built, one XADD per stream (`XaddEachGate`). It prints, per task, this process's CPU (user + system) and the Redis server's for each side; the gate's
difference is the cost of routing, the consumers' difference what it saves. Filling the streams is
outside the measured windows.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from faststream.redis import RedisBroker  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from services.common.runtime import parse_events_of  # noqa: E402
from services.gate.forwarder import Gate  # noqa: E402
from shared.delivery.consumer import reliable_batch_subscriber  # noqa: E402
from shared.delivery.wire import wire_fields  # noqa: E402
from shared.embedded import Backends  # noqa: E402
from shared.events import Envelope  # noqa: E402
from shared.events.ownership import PRODUCERS  # noqa: E402
from shared.events.routing import ROUTES, ROUTING_TABLE, forwarded_to  # noqa: E402
from shared.events.subjects import lease_subject  # noqa: E402
from shared.names import EVENTS_STREAM, producer_stream, routed_stream  # noqa: E402
from shared.settings import Settings  # noqa: E402
from tests.helpers.task_events import TaskStory  # noqa: E402

class XaddEachGate(Gate):
    """The gate as first routed (051cbb9): one XADD per stream for a routed event instead of one EVAL."""

    def _append(self, pipe: Any, entry: Any) -> None:
        for stream in forwarded_to(entry.fields[b"type"], self.routes):
            pipe.xadd(stream, entry.fields)


SOMETIMES = {"started": 10, "renewed": 10, "second_usage": 8}
"""Of every 100 tasks, how many have a `task.started` of its own, a `lease.renewed`, a second `usage.recorded`
(session 19's counts, docs/BENCHMARKS.md "Pipeline: one event fewer per task, session 19"; every other start is
carried by the task's success, every entry into the queue by its grant)."""

MIX = "session 19: 6.28 events per task, the run's end carries its lease's end (no lease.released)"
"""The event mix `one_task` models, as the output names it."""


def one_task(n: int) -> list[Envelope]:
    """Task `n`'s events, in the order their producers emit them."""
    story = TaskStory(f"T{n}")
    events = [story.submitted(), story.readiness(ready=True), story.matched(), story.granted(queued=True)]
    lease = lease_subject(story.lease_id)
    if n % 100 < SOMETIMES["started"]:
        events.append(story.started())
    if n % 100 < SOMETIMES["renewed"]:
        events.append(story.emit("dispatcher", "lease.renewed", {"lease_id": story.lease_id, "task_id": story.task_id,
                                                                  "until": story.clock + timedelta(seconds=30)}, lease))  # fmt: skip
    if n % 100 < SOMETIMES["second_usage"]:  # an increment accounted before the lease's end
        events.append(story.usage(gpu_seconds=60.0, cost=0.05))
    events.append(story.succeeded(started_on=None if n % 100 < SOMETIMES["started"] else "n1", releasing=True))
    events.append(story.usage())
    return events


async def fill(redis: Redis, tasks: int) -> int:
    """Append every task's events to its producers' streams; how many events."""
    await redis.flushdb()
    pipe, count = redis.pipeline(transaction=False), 0
    for n in range(tasks):
        for event in one_task(n):
            pipe.xadd(producer_stream(event.producer.split("/")[0]), wire_fields(event))
            count += 1
        if n % 200 == 199:
            await pipe.execute()
    await pipe.execute()
    return count


async def measured(redis_pid: int, work: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """(this process's, Redis's) CPU seconds over `work`."""
    server, me = psutil.Process(redis_pid), psutil.Process()
    server_before, mine_before = sum(server.cpu_times()[:2]), sum(me.cpu_times()[:2])
    await work()
    return sum(me.cpu_times()[:2]) - mine_before, sum(server.cpu_times()[:2]) - server_before


async def gate_run(url: str, redis_pid: int, tasks: int, routes: Mapping[bytes, tuple[str, ...]], batch: int,
                   kind: type[Gate] = Gate) -> tuple[float, float]:  # fmt: skip
    """Forward `tasks` tasks' events through the gate (`kind`) with `routes`: (gate, Redis) CPU seconds."""
    redis = Redis.from_url(url)
    events = await fill(redis, tasks)
    gate = kind(redis, producers=PRODUCERS, batch_size=batch, block_ms=1, routes=routes)

    async def forward_all() -> None:
        while gate.forwarded < events:
            await gate.forward_once()

    used = await measured(redis_pid, forward_all)
    await redis.aclose()
    return used


async def consumer_run(url: str, redis_pid: int, stream: str, types: tuple[type[Envelope], ...], batch: int) -> tuple[float, float]:
    """One batch subscriber parsing `types` consumes all of `stream`: (consumer, Redis) CPU seconds."""
    redis = Redis.from_url(url)
    entries = int(await redis.xlen(stream))
    assert entries > 0, f"{stream} is empty"
    group = f"bench-{await redis.incr('bench:groups')}"
    broker, seen, done = RedisBroker(url, logger=None), 0, asyncio.Event()

    @reliable_batch_subscriber(broker, stream=stream, group=group, parse=parse_events_of(*types), parse_entry=True,
                               max_records=batch)  # fmt: skip
    async def handle(events: list[Any]) -> None:
        nonlocal seen
        seen += len(events)
        if seen >= entries:
            done.set()

    async def consume() -> None:
        await broker.start()
        await done.wait()

    used = await measured(redis_pid, consume)
    await broker.stop()
    await redis.aclose()
    return used


def per_task(seconds: tuple[float, float], tasks: int) -> str:
    mine, server = seconds
    return f"{mine / tasks * 1e6:7.1f} µs + redis {server / tasks * 1e6:5.1f} µs = {(mine + server) / tasks * 1e6:7.1f} µs per task"


async def one_round(url: str, redis_pid: int, args: argparse.Namespace, flip: bool) -> None:
    sides = [("gate, cf:events only", {}, Gate), ("gate, routed", ROUTING_TABLE, Gate)]
    if args.xadd_each:
        sides.append(("gate, routed, XADD per stream", ROUTING_TABLE, XaddEachGate))
    for label, routes, kind in reversed(sides) if flip else sides:
        used = await gate_run(url, redis_pid, args.tasks, routes, args.gate_batch, kind)
        print(f"  {label:34} {per_task(used, args.tasks)}", flush=True)
    if args.gate_only:
        return
    if flip:  # the consumers need the streams of a routed run (each run starts from an empty Redis)
        await gate_run(url, redis_pid, args.tasks, ROUTING_TABLE, args.gate_batch)
    for group, types in ROUTES.items():
        reads = [(f"{group} reads cf:events", EVENTS_STREAM), (f"{group} reads {routed_stream(group)}", routed_stream(group))]
        for label, stream in reversed(reads) if flip else reads:
            used = await consumer_run(url, redis_pid, stream, types, args.consumer_batch)
            print(f"  {label:34} {per_task(used, args.tasks)}", flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gate-batch", type=int, default=20, help="entries per producer stream per gate step")
    parser.add_argument("--consumer-batch", type=int, default=100, help="entries per consumer read")
    parser.add_argument("--xadd-each", action="store_true", help="also the gate appending with one XADD per stream (XaddEachGate)")
    parser.add_argument("--gate-only", action="store_true", help="measure the gate only, not the consumers")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cardflow-routing-") as data_dir:
        Path(data_dir).chmod(0o755)
        backends = Backends(Settings(), Path(data_dir), durable=False)
        with backends as endpoints:
            pid = next(process.record.pid for process in backends.processes if process.name == "redis")
            print(f"event mix: {MIX}")
            for round_no in range(args.rounds):
                print(f"round {round_no + 1} ({args.tasks} tasks, gate batch {args.gate_batch}, consumer batch {args.consumer_batch}):")
                asyncio.run(one_round(endpoints.redis_url, pid, args, flip=round_no % 2 == 1))


if __name__ == "__main__":
    main(sys.argv[1:])
