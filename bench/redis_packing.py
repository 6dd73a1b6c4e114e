"""What packing the relays' and the gate's stream appends costs: redis-py's Python packer against hiredis's.

    .venv/bin/python bench/redis_packing.py [--rounds 21] [--batch 200]

A relay appends a batch of outbox rows in one pipeline (`shared.delivery.relay`: fields as `str`, from
asyncpg), the gate a batch of entries it read (`services.gate.forwarder`: fields as `bytes`, from redis-py).
Each round packs one such batch of XADDs (`pack_commands`, as a pipeline does) with a plain
`redis.asyncio.Connection` and with `shared.delivery.redis_packing`'s connection, alternating which goes first,
and prints µs per append (best / median of the rounds) and whether the bytes are the same. Bodies are
canonical JSON of the sizes `cf:events` carries (`--body-bytes`). No Redis server is needed: packing is
the client's CPU alone, which the pipeline's A/B cannot resolve at ~0.01 ms per append.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from redis.asyncio.connection import Connection  # noqa: E402

from shared.delivery.redis_packing import redis_client  # noqa: E402
from shared.delivery.wire import entry_fields  # noqa: E402
from shared.events.ulids import new_ulid  # noqa: E402


def relay_batch(batch: int, body_bytes: int) -> list[tuple[object, ...]]:
    """XADDs as the relay builds them: stream, '*', then the entry's fields as str."""
    commands = []
    for n in range(batch):
        event_id = new_ulid()
        body = '{"data":{"task_id":"' + event_id + '","note":"' + "x" * max(body_bytes - 80, 0) + f'"}},"seq":{n}}}'
        fields = entry_fields(event_id, "lease.granted", f"task/{event_id}", body)
        commands.append(("XADD", "cf:producer:dispatcher", "*", *(item for pair in fields.items() for item in pair)))
    return commands


def gate_batch(commands: Sequence[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """The same appends as the gate forwards them: every field as bytes."""
    return [(c[0], c[1], c[2], *(str(item).encode() for item in c[3:])) for c in commands]


def per_append_us(connection: Connection, commands: Sequence[tuple[object, ...]]) -> float:
    started = time.perf_counter_ns()
    connection.pack_commands(commands)
    return (time.perf_counter_ns() - started) / 1000 / len(commands)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--batch", type=int, default=200, help="appends per pipeline")
    parser.add_argument("--body-bytes", type=int, nargs="+", default=[600, 1500])
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    python = Connection()
    hiredis = redis_client("redis://localhost:6379/0").connection_pool.make_connection()
    for size in args.body_bytes:
        relay = relay_batch(args.batch, size)
        for label, commands in (("relay (str)", relay), ("gate (bytes)", gate_batch(relay))):
            same = b"".join(python.pack_commands(commands)) == b"".join(hiredis.pack_commands(commands))
            times: dict[str, list[float]] = {"python": [], "hiredis": []}
            for round_ in range(args.rounds):
                order = (("python", python), ("hiredis", hiredis)) if round_ % 2 else (("hiredis", hiredis), ("python", python))
                for name, connection in order:
                    times[name].append(per_append_us(connection, commands))
            summary = ", ".join(f"{name} {min(v):.2f} / {statistics.median(v):.2f}" for name, v in times.items())
            print(f"{label}, body ~{size} B, {args.batch} appends: µs per append (best / median) {summary}; same bytes: {same}")


if __name__ == "__main__":
    main()
