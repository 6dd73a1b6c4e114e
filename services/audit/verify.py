"""`cardflow audit verify`: does the history hold, and does it rebuild what the services hold?

    report = await verify_archive(pool, store)      # store None: segments are not checked
    report.ok                                       # exit 0 only when True

Four checks, each naming what breaks:

1. chain: every row of `audit.events` recomputed from the first (`chain.find_break`);
2. segments: every rolled segment in the archive bucket against its manifest, its row in
   `audit.segments` and the archived rows it covers (`segments.check_segment`);
3. completeness: every event a service's outbox published to `cf:events` more than `settle_s` ago
   is in the archive (nothing was lost between the relay and the archiver);
4. models: the archive folded through `shared.replay.replay` (the projection's `evolve` for tasks)
   against the live read models (`services.audit.live`), difference by difference
   (`services.audit.compare`). Services apply events a moment after the archiver (or before), so
   differences are re-checked, folding only the newly archived events, until they vanish or
   `settle_s` passes.

`first_break` is the earliest archived event any check names.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg

from services.audit.chain import EMPTY_HEAD, ChainBreak, find_break, head_after
from services.audit.compare import Mismatch, compare_models, first_breaking
from services.audit.live import load_live
from services.audit.reading import archived_events, chain_links
from services.audit.segments import SegmentProblem, check_segment, load_rows, load_segments, read_segment_objects
from shared.events import Envelope
from shared.events.carried import fold_order
from shared.names import EVENTS_STREAM, SCHEMAS
from shared.projection import task_id_of
from shared.replay import ReplayState, replay_event
from shared.storage import ObjectStore

SETTLE_S = 15.0


@dataclass(frozen=True, slots=True)
class LostEvent:
    """An event a service published that the archive does not hold."""

    schema: str
    event_id: str
    type: str
    subject: str
    published_at: str


@dataclass
class VerifyReport:
    events: int = 0
    head_hash: str | None = None
    chain_break: ChainBreak | None = None
    segments: int = 0
    segments_checked: bool = False
    segment_problems: list[SegmentProblem] = field(default_factory=list)
    lost: list[LostEvent] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    compared: dict[str, int] = field(default_factory=dict)
    not_running: list[str] = field(default_factory=list)
    first_break: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        segments_hold = self.segments_checked or self.segments == 0
        return (self.chain_break is None and segments_hold and not self.segment_problems and not self.lost
                and not self.mismatches)  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "events": self.events, "head_hash": self.head_hash,
            "chain": None if self.chain_break is None else {
                "seq": self.chain_break.seq, "event_id": self.chain_break.event_id,
                "kind": self.chain_break.kind.value, "detail": self.chain_break.detail},
            "segments": {"count": self.segments, "checked": self.segments_checked,
                         "problems": [vars_of(p) for p in self.segment_problems]},
            "lost": [vars_of(lost) for lost in self.lost],
            "models": {"compared": self.compared, "not_running": self.not_running,
                       "mismatches": [{**vars_of(m), "model": m.model.value} for m in self.mismatches]},
            "first_break": self.first_break,
        }  # fmt: skip


def vars_of(item: Any) -> dict[str, Any]:
    return {name: getattr(item, name) for name in item.__slots__}


async def verify_archive(pool: asyncpg.Pool, store: ObjectStore | None, *, settle_s: float = SETTLE_S) -> VerifyReport:
    """Run the four checks of the module docstring."""
    report = VerifyReport()
    await check_chain(pool, report)
    await check_segments(pool, store, report)
    report.lost = await find_lost(pool, timedelta(seconds=settle_s))
    seq_of = await check_models(pool, report, settle_s)
    report.first_break = await _first_break(pool, report, seq_of)
    return report


async def check_chain(pool: asyncpg.Pool, report: VerifyReport) -> None:
    head = EMPTY_HEAD
    async for rows in chain_links(pool):
        broken = find_break(rows, head)
        if broken is not None:
            report.chain_break = broken
            break
        head = head_after(rows, head)
    report.events, report.head_hash = head.seq, head.hash if head.seq else None


async def check_segments(pool: asyncpg.Pool, store: ObjectStore | None, report: VerifyReport) -> None:
    records = await load_segments(pool)
    report.segments = len(records)
    if store is None:
        return
    for record in records:
        data, manifest = await read_segment_objects(store, record)
        rows = await load_rows(pool, record.first_seq, record.last_seq)
        report.segment_problems += check_segment(record, data, manifest, rows)
    report.segments_checked = True


async def find_lost(pool: asyncpg.Pool, grace: timedelta) -> list[LostEvent]:
    """Events published to cf:events by any service's outbox more than `grace` ago and not archived."""
    lost: list[LostEvent] = []
    for schema in SCHEMAS:
        if schema == "audit":
            continue
        try:
            rows = await pool.fetch(
                f'SELECT o.event_id, o.type, o.subject, o.published_at FROM "{schema}".outbox o'
                " WHERE o.stream = $1 AND o.published_at < now() - $2::interval"
                " AND NOT EXISTS (SELECT 1 FROM audit.events a WHERE a.event_id = o.event_id)"
                " ORDER BY o.position LIMIT 100",
                EVENTS_STREAM, grace,
            )  # fmt: skip
        except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
            continue
        lost += [LostEvent(schema, r["event_id"], r["type"], r["subject"], r["published_at"].isoformat()) for r in rows]
    return lost


async def check_models(pool: asyncpg.Pool, report: VerifyReport, settle_s: float) -> dict[str, int]:
    """Fold the archive and compare, re-checking with the newly archived events until it settles."""
    state, history, seq_of = ReplayState(), {}, {}
    deadline = time.monotonic() + settle_s
    while True:
        async for item in archived_events(pool, after_seq=max(seq_of.values(), default=0)):
            _fold(state, history, item.event)
            seq_of[item.event.event_id] = item.seq
        live = await load_live(pool)
        mismatches = compare_models(state, live, history)
        if not mismatches or time.monotonic() >= deadline:
            break
        await asyncio.sleep(1.0)
    report.mismatches, report.not_running = mismatches, live.missing
    report.compared = {"tasks": len(state.tasks), "leases": len(state.leases), "usage_records": len(state.usage),
                       "quotas": len(state.quotas)}  # fmt: skip
    return seq_of


def _fold(state: ReplayState, history: dict[str, list[Envelope]], event: Envelope) -> None:
    replay_event(state, event)
    for told in fold_order(event):  # a batch's usage: each slice in its task's history
        task_id = task_id_of(told)
        if task_id is not None:
            history.setdefault(task_id, []).append(told)


async def _first_break(pool: asyncpg.Pool, report: VerifyReport, seq_of: dict[str, int]) -> dict[str, Any] | None:
    candidates: list[tuple[int, str, str]] = []
    if report.chain_break is not None:
        candidates.append((report.chain_break.seq, report.chain_break.event_id, f"chain: {report.chain_break.detail}"))
    for problem in report.segment_problems:
        if problem.seq is not None and problem.event_id is not None:
            candidates.append((problem.seq, problem.event_id, f"segment {problem.segment_no}: {problem.detail}"))
    mismatch = first_breaking(report.mismatches, seq_of)
    if mismatch is not None and mismatch.event_id in seq_of:
        candidates.append((seq_of[mismatch.event_id], mismatch.event_id, mismatch.describe()))
    if not candidates:
        return None
    seq, event_id, what = min(candidates)
    row = await pool.fetchrow(
        "SELECT type, subject, actor, occurred_at FROM audit.events WHERE seq = $1", seq
    )
    described = {"type": row["type"], "subject": row["subject"], "actor": row["actor"],
                 "occurred_at": row["occurred_at"].isoformat()} if row else {}  # fmt: skip
    return {"seq": seq, "event_id": event_id, "what": what, **described}

