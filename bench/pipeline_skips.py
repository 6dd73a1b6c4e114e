"""What one `cf:events` delivery costs a consumer group that skips it, against one that parses it.

Run: `.venv/bin/python bench/pipeline_skips.py [--entries N] [--rounds R]`. It starts an embedded Redis
(with the other embedded backends, unused), XADDs N real `task.succeeded` entries (wire format of the
outbox relay, ~0.6 KB) to a scratch stream, and lets ONE `reliable_batch_subscriber` (100 entries a
read, as the services) consume them with `parse_events_of(<a type>)`:

- *skipped*: a type no entry has — each entry is read, skipped unparsed by its wire `type` and acked,
  what a group does with every entry of a type its service does not fold;
- *parsed*: the entries' own type — each is parsed into its event (the handler then does nothing).

It prints, per entry, this process's CPU (user + system) and the Redis server's over the read,
alternating the two kinds `--rounds` times. The difference between a skipped entry and none at all is
what per-consumer streams would save per delivery (before what their extra XADDs would cost).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from faststream.redis import RedisBroker  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from services.common.runtime import parse_events_of  # noqa: E402
from shared.delivery.consumer import reliable_batch_subscriber  # noqa: E402
from shared.delivery.wire import wire_fields  # noqa: E402
from shared.embedded import Backends  # noqa: E402
from shared.events import Envelope, TaskMatched, TaskSucceeded, make_event  # noqa: E402
from shared.settings import Settings  # noqa: E402


def an_entry(n: int) -> dict[str, str]:
    event = make_event("task.succeeded", subject=f"task/T{n}", subject_seq=1, producer="dispatcher/bench",
                       actor="service:dispatcher", data={"task_id": f"T{n}", "lease_id": f"L{n}", "output_units": 3.0,
                                                         "started": {"node_id": "n1"}})  # fmt: skip
    return wire_fields(event)


async def consume(url: str, redis_pid: int, entries: int, kind: type[Envelope]) -> tuple[float, float]:
    """(this process's, Redis's) CPU microseconds per entry to consume `entries` with `parse_events_of(kind)`."""
    redis = Redis.from_url(url)
    stream = f"bench:skips:{time.time_ns()}"
    pipe = redis.pipeline(transaction=False)
    for n in range(entries):
        pipe.xadd(stream, an_entry(n))
    await pipe.execute()
    broker, seen, done = RedisBroker(url, logger=None), 0, asyncio.Event()

    @reliable_batch_subscriber(broker, stream=stream, group="bench", parse=parse_events_of(kind), parse_entry=True,
                               max_records=100)  # fmt: skip
    async def handle(batch: list[Any]) -> None:
        nonlocal seen
        seen += len(batch)
        if seen >= entries:
            done.set()

    server, me = psutil.Process(redis_pid), psutil.Process()
    server_before, mine_before = sum(server.cpu_times()[:2]), sum(me.cpu_times()[:2])
    await broker.start()
    await done.wait()
    server_used, mine_used = sum(server.cpu_times()[:2]) - server_before, sum(me.cpu_times()[:2]) - mine_before
    await broker.stop()
    await redis.delete(stream)
    await redis.aclose()
    return mine_used / entries * 1e6, server_used / entries * 1e6


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cardflow-skips-") as data_dir:
        Path(data_dir).chmod(0o755)
        backends = Backends(Settings(), Path(data_dir), durable=False)
        with backends as endpoints:
            pid = next(process.record.pid for process in backends.processes if process.name == "redis")
            for _ in range(args.rounds):
                for label, kind in (("skipped", TaskMatched), ("parsed", TaskSucceeded)):
                    mine, server = asyncio.run(consume(endpoints.redis_url, pid, args.entries, kind))
                    print(f"{label}: consumer {mine:.1f} µs/entry, redis {server:.1f} µs/entry", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
