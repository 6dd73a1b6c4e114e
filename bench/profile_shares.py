"""Where a profiled process's time went, by kind of code (for `bench/pipeline.py --profile`).

cProfile's `tottime` of every function is summed by what the function belongs to: cardflow's own
code, pydantic, JSON, asyncpg, redis-py, FastStream (with fast_depends and anyio), structlog and
logging, the event loop and the rest. The event loop's own entry (asyncio's `Runner.run`, inside
which uvloop's C loop runs, or asyncio's selector) also holds the time the process sat idle waiting for I/O, so it is reported apart and
the shares are of the time spent elsewhere ("busy"). cProfile measures wall time and slows the
code it profiles (about 2x), so the shares matter, not the absolute seconds.
"""

from __future__ import annotations

import io
import pstats
import re
from collections.abc import Mapping
from pathlib import Path

KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("event loop (and idle)", r"uvloop|asyncio/runners\.py|selectors\.py|<method 'run_until_complete'|<method 'select' of|<method 'poll' of|<built-in method select\.epoll"),
        # canonical_json calls a C encoder object, which cProfile does not see as a call: its own time is the JSON's
        ("json", r"/shared/events/envelope\.py canonical_json$"),
        ("cardflow", r"/(services|shared|bench)/"),
        ("pydantic", r"pydantic|<method '(validate_json|validate_python|to_json|to_python)'"),
        ("json", r"/json/|_json|orjson"),
        ("asyncpg", r"asyncpg"),
        ("redis-py", r"/redis/|hiredis"),
        ("faststream", r"faststream|fast_depends|anyio"),
        ("logging", r"structlog|/logging/"),
        ("asyncio", r"/asyncio/"),
        ("ulid, uuid, datetime", r"ulid|uuid|datetime"),
    )
)
OTHER = "other (stdlib, builtins)"


def kind_of(filename: str, function: str) -> str:
    where = f"{filename} {function}"
    return next((kind for kind, pattern in KINDS if pattern.search(where)), OTHER)


def shares(path: Path) -> tuple[float, float, dict[str, float]]:
    """(idle-ish event-loop seconds, busy seconds, busy seconds by kind) of one pstats file."""
    by_kind: dict[str, float] = {}
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
        kind = kind_of(filename, function)
        by_kind[kind] = by_kind.get(kind, 0.0) + tottime
    loop = by_kind.pop("event loop (and idle)", 0.0)
    return loop, sum(by_kind.values()), by_kind


def profile_report(paths: Mapping[str, Path], top: int = 12) -> str:
    """Per process: busy time by kind of code (share), then its top functions by own time."""
    out = io.StringIO()
    for name, path in paths.items():
        loop, busy, by_kind = shares(path)
        out.write(f"== {name}: {busy:.1f} s busy outside the event loop (+ {loop:.1f} s in the loop, idle included)\n")
        for kind, seconds in sorted(by_kind.items(), key=lambda item: -item[1]):
            out.write(f"   {seconds / max(busy, 1e-9):6.1%}  {kind}\n")
        stats = pstats.Stats(str(path), stream=out)
        stats.sort_stats("tottime").print_stats(top)
    return "\n".join(line for line in out.getvalue().splitlines() if line.strip())
