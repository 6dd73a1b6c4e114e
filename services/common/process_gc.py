"""Garbage-collector settings of a long-running process (`cardflow service NAME`, `cardflow agent`).

A service builds ~100,000-170,000 objects while it starts (modules, pydantic schemas, FastStream
and asyncpg machinery) that live as long as the process, then handles events by allocating many
short-lived ones. With CPython's defaults (a young collection every 700 allocations, a full one
every 100 young ones) the full collections kept walking the start-up objects again: in
`bench/pipeline.py` at 250 tasks/s the collector took 12-17% of the views', ledger's and
dispatcher's CPU (docs/BENCHMARKS.md, session 8). `settle_after_start_up`:

1. collects once, then freezes every object alive (`gc.freeze`): later collections skip them;
2. runs a young collection every `YOUNG_THRESHOLD` allocations instead of 700, so the objects of
   a batch mostly die by reference counting before any collection sees them.

Garbage cycles are still collected, only later; an object frozen here that later becomes part of
a garbage cycle stays in memory (start-up objects are not meant to die).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Allocations (minus deallocations) of container objects between two young collections."""


def settle_after_start_up() -> None:
    """Freeze what start-up built and collect young objects less often (see the module docstring)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
