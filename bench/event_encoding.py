"""What an event's id and canonical JSON cost, before and after session 16 (µs per call, one process).

Run: `.venv/bin/python bench/event_encoding.py [--tasks N] [--rounds R]`. The events are N tasks' worth
in session 11's mix (`bench/pipeline_routing.py` `one_task`: submitted, readiness, matched, granted,
succeeded, released, usage once each, queued/started/renewed sometimes; ~7.5 a task). Per round, in
alternating order, each side runs over all of them; it prints the best and the median round:

- id: `str(ulid.ULID())` (python-ulid, as `new_event_id` was) vs `shared.events.ulids.new_ulid`;
- JSON: `json.dumps(model_dump(), default=.., sort_keys=True, ..)` per call (as `canonical_json` was)
  vs `canonical_json` (its C encoder built once); the bytes are checked equal first;
- and, for scale, `model_dump(mode="python")` alone, `parse_event` of the body (every consumer's cost)
  and building the events (`make_event`: pydantic's validation, the id, the clock; with the test
  builder's own bookkeeping, so an upper bound).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ulid import ULID  # noqa: E402

from bench.pipeline_routing import one_task  # noqa: E402
from shared.events import Envelope, canonical_json, parse_event  # noqa: E402
from shared.events.ulids import new_ulid  # noqa: E402


def _old_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def old_canonical_json(event: Envelope) -> bytes:
    """`canonical_json` as it was at 26f1fbd."""
    return json.dumps(
        event.model_dump(mode="python"), default=_old_default, sort_keys=True, separators=(",", ":"),
        ensure_ascii=False, allow_nan=False,
    ).encode()  # fmt: skip


def per_call_us(work: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    events = [event for n in range(args.tasks) for event in one_task(n)]
    bodies = [canonical_json(e) for e in events]
    assert bodies == [old_canonical_json(e) for e in events], "the new encoder's bytes differ"
    count = len(events)
    sides: dict[str, Callable[[], object]] = {
        "id: python-ulid str(ULID())": lambda: [str(ULID()) for _ in range(count)],
        "id: shared.events.ulids.new_ulid": lambda: [new_ulid() for _ in range(count)],
        "JSON: json.dumps per call (old)": lambda: [old_canonical_json(e) for e in events],
        "JSON: canonical_json (new)": lambda: [canonical_json(e) for e in events],
        "  of which model_dump(mode='python')": lambda: [e.model_dump(mode="python") for e in events],
        "parse_event(body), for scale": lambda: [parse_event(b) for b in bodies],
        "make_event via TaskStory, for scale": lambda: [one_task(n) for n in range(args.tasks)],
    }
    timings: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        order = list(sides.items()) if round_ % 2 == 0 else list(reversed(sides.items()))
        for name, work in order:
            timings[name].append(per_call_us(work, count))
    print(f"{count} events ({args.tasks} tasks), {args.rounds} rounds; µs per call, best / median")
    for name, values in timings.items():
        print(f"  {name:40s} {min(values):6.2f} / {statistics.median(values):6.2f}")


if __name__ == "__main__":
    main()
