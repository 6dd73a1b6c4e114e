"""Rounds: closing one (by hand or at its period's end), amending its note, reading and comparing.

A round is the period from the previous round's end (the first starts at the period boundary
before the first usage) to its close. Periods are aligned to Monday 00:00 UTC multiples of the
round period (weekly by default: `Settings.round_period_days`); if the ledger was down across
several boundaries, one round runs to the last of them.

`close_round` (in the caller's transaction, under an advisory lock so two closes never overlap):

1. load what the period holds (`round_inputs.load_round_inputs`: spend, output, capacity, losses, reviews), marking
   the usage and output increments it counts with the round;
2. build the report (`round_report.build_round_report`, pure) and its files (`round_render`);
3. put `report.json`, `report.csv`, `report.html` into the reports bucket under
   `rounds/<archive id>/<round id>/` (versioned: an amended note puts new versions);
4. write `ledger.rounds`, `round_lines`, `round_notes` (version 1) and emit `round.closed` with the
   note and the closer as actor.

`amend_note` keeps every version (`round_notes`) and emits `round.note_amended`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

import asyncpg

from services.common.runtime import Emitter
from services.ledger.round_inputs import load_round_inputs
from services.ledger.round_render import report_csv, report_html, report_json
from services.ledger.round_report import GROUPINGS, RoundPeriod, build_round_report
from shared.delivery.migrations import advisory_key
from shared.events import RoundClosed, RoundClosedData, RoundNoteAmended, RoundNoteAmendedData
from shared.events.emission import Emission
from shared.events.subjects import round_subject
from shared.names import REPORTS_BUCKET
from shared.storage import ObjectStore

SCHEMA = "ledger"
ROUNDS_LOCK = advisory_key("rounds", SCHEMA)
EPOCH = datetime(1970, 1, 5, tzinfo=UTC)
"""A Monday: round periods are whole multiples of the period from here (weekly rounds start on Mondays)."""
REPORT_FILES = {"report.json": "application/json", "report.csv": "text/csv", "report.html": "text/html; charset=utf-8"}
PERIOD_END_NOTE = "closed at the end of its period"


class RoundError(ValueError):
    """A round cannot be closed or found (the message says why)."""


class HowClosed(StrEnum):
    BY_HAND = "by_hand"
    PERIOD_END = "period_end"


def period_floor(moment: datetime, period: timedelta) -> datetime:
    """The period boundary at or before `moment`."""
    return EPOCH + ((moment - EPOCH) // period) * period


def next_boundary(after: datetime, period: timedelta) -> datetime:
    """The first period boundary strictly after `after`."""
    return period_floor(after, period) + period


@dataclass(frozen=True, slots=True)
class ClosedRound:
    round_id: str
    number: int
    starts_at: datetime
    ends_at: datetime
    note: str
    report: dict[str, Any]
    report_uri: str | None
    event_id: str


# ---- closing ---------------------------------------------------------------------------------------


async def close_round(
    conn: asyncpg.Connection, store: ObjectStore | None, emitter: Emitter, *, actor: str, note: str, now: datetime,
    period: timedelta, how: HowClosed = HowClosed.BY_HAND, reason: str = "",
) -> ClosedRound:  # fmt: skip
    """Close the open round at `now` (by hand) or at its last period boundary (see the module docstring)."""
    note = _one_line(note) or (PERIOD_END_NOTE if how is HowClosed.PERIOD_END else "")
    if not note:
        raise RoundError("a round is closed with a one-line retrospective note (what was worth it, what was not)")
    await conn.execute("SELECT pg_advisory_xact_lock($1)", ROUNDS_LOCK)
    last = await conn.fetchrow(f"SELECT number, ends_at FROM {SCHEMA}.rounds ORDER BY number DESC LIMIT 1")
    starts = last["ends_at"] if last else await first_round_start(conn, now, period)
    ends = now if how is HowClosed.BY_HAND else period_floor(now, period)
    if ends <= starts:
        raise RoundError(f"the open round starts at {starts.isoformat()}; nothing to close before {ends.isoformat()}")
    number = (last["number"] + 1) if last else 1
    round_period = RoundPeriod(f"R{number:04d}", number, starts, ends)
    report = build_round_report(round_period, await load_round_inputs(conn, starts, ends, round_period.round_id))
    uri, versions = await _put_report(conn, store, report, note, actor)
    (event,) = await emitter.emit(conn, [Emission(RoundClosed, round_subject(round_period.round_id), RoundClosedData(
        round_id=round_period.round_id, starts_at=starts, ends_at=ends, note=note, report_uri=uri,
        gpu_hours=report["totals"]["gpu_hours"], cost=report["totals"]["cost"],
    ), actor=actor)])  # fmt: skip
    await _save_round(conn, round_period, report, note, actor, how, uri, versions, event.event_id, now, reason)
    return ClosedRound(round_period.round_id, number, starts, ends, note, report, uri, event.event_id)


async def close_due_round(conn: asyncpg.Connection, store: ObjectStore | None, emitter: Emitter, now: datetime,
                          period: timedelta) -> ClosedRound | None:  # fmt: skip
    """Close the open round if a period boundary has passed since it started (the ledger's loop).

    The check takes no lock (it runs every 30 s in every ledger instance); `close_round` takes the
    rounds lock and checks again, so two instances never close the same period twice.
    """
    last = await conn.fetchval(f"SELECT max(ends_at) FROM {SCHEMA}.rounds")
    first = await first_usage_at(conn) if last is None else None
    if last is None and first is None:
        return None  # nothing has been spent yet: no round to report
    starts = last or period_floor(min(first, now), period)
    if now < next_boundary(starts, period):
        return None
    try:
        return await close_round(conn, store, emitter, actor="system:rounds", note=PERIOD_END_NOTE, now=now,
                                 period=period, how=HowClosed.PERIOD_END)  # fmt: skip
    except RoundError:
        return None  # another instance (or a planner) closed it a moment ago


async def first_round_start(conn: asyncpg.Connection, now: datetime, period: timedelta) -> datetime:
    first = await first_usage_at(conn)
    return period_floor(min(first or now, now), period)


async def first_usage_at(conn: asyncpg.Connection) -> datetime | None:
    """When the earliest usage increment starts (None: no usage yet), asked only while no round has closed.
    Every increment is uncounted then (a round's close marks those it counts), so the uncounted ones'
    index on `from_at` answers with one row instead of a read of every increment."""
    return await conn.fetchval(f"SELECT min(from_at) FROM {SCHEMA}.usage_increments WHERE round_id IS NULL")


def _one_line(text: str) -> str:
    return " ".join(text.split())


async def _put_report(conn: asyncpg.Connection, store: ObjectStore | None, report: dict[str, Any], note: str,
                      closed_by: str) -> tuple[str | None, dict[str, list[str | None]]]:  # fmt: skip
    if store is None:
        return None, {}
    prefix = f"rounds/{await _installation(conn)}/{report['round_id']}/"
    bodies = {"report.json": report_json({**report, "note": note}), "report.csv": report_csv(report),
              "report.html": report_html(report, note, closed_by)}  # fmt: skip
    versions: dict[str, list[str | None]] = {}
    for name, body in bodies.items():
        stored = await store.put(REPORTS_BUCKET, prefix + name, body, content_type=REPORT_FILES[name])
        versions[name] = [stored.version_id]
    return store.uri(REPORTS_BUCKET, prefix), versions


async def _installation(conn: asyncpg.Connection) -> str:
    """The archive id (made once per installation): keeps installations apart in a shared bucket."""
    return await conn.fetchval("SELECT archive_id FROM audit.archive WHERE id = 1")


async def _save_round(conn: asyncpg.Connection, period: RoundPeriod, report: dict[str, Any], note: str, actor: str,
                      how: HowClosed, uri: str | None, versions: dict[str, Any], event_id: str, now: datetime,
                      reason: str) -> None:  # fmt: skip
    totals = report["totals"]
    await conn.execute(
        f"INSERT INTO {SCHEMA}.rounds (round_id, number, starts_at, ends_at, closed_at, closed_by, how, note,"
        " gpu_seconds, cost, output_units, report, report_uri, report_versions, event_id)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        period.round_id, period.number, period.starts_at, period.ends_at, now, actor, how.value, note,
        Decimal(str(totals["gpu_seconds"])), Decimal(str(totals["cost"])), Decimal(str(totals["output_units"])),
        report, uri, versions, event_id,
    )  # fmt: skip
    await conn.execute(
        f"INSERT INTO {SCHEMA}.round_notes (round_id, version, note, actor, reason, noted_at, event_id)"
        " VALUES ($1, 1, $2, $3, $4, $5, $6)", period.round_id, note, actor, reason, now, event_id,
    )  # fmt: skip
    lines = [(period.round_id, g, row["key"], row["tasks"], row["gpu_hours"], row["cost"], row["output_units"],
              row["output_unit"], row["cost_per_output_unit"]) for g in GROUPINGS for row in report[f"by_{g}"]]  # fmt: skip
    await conn.executemany(
        f"INSERT INTO {SCHEMA}.round_lines (round_id, grouping, key, tasks, gpu_hours, cost, output_units, output_unit,"
        " cost_per_output_unit) VALUES ($1, $2, $3, $4, $5::float8, $6::float8, $7::float8, $8, $9::float8)", lines,
    )  # fmt: skip


# ---- notes, reading, comparing ------------------------------------------------------------------------


async def amend_note(conn: asyncpg.Connection, store: ObjectStore | None, emitter: Emitter, round_id: str, note: str,
                     *, actor: str, reason: str, now: datetime) -> int:  # fmt: skip
    """A new version of the round's note (the old ones stay); new versions of its report files."""
    note = _one_line(note)
    if not note:
        raise RoundError("the amended note is empty")
    row = await conn.fetchrow(f"SELECT report, report_versions FROM {SCHEMA}.rounds WHERE round_id = $1 FOR UPDATE", round_id)
    if row is None:
        raise RoundError(f"no round {round_id!r}; `cardflow round list` shows the closed rounds")
    version = await conn.fetchval(f"SELECT max(version) + 1 FROM {SCHEMA}.round_notes WHERE round_id = $1", round_id)
    (event,) = await emitter.emit(conn, [Emission(RoundNoteAmended, round_subject(round_id), RoundNoteAmendedData(
        round_id=round_id, version=version, note=note, reason=reason), actor=actor)])  # fmt: skip
    await conn.execute(
        f"INSERT INTO {SCHEMA}.round_notes (round_id, version, note, actor, reason, noted_at, event_id)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7)", round_id, version, note, actor, reason, now, event.event_id,
    )  # fmt: skip
    _, versions = await _put_report(conn, store, row["report"], note, actor)
    merged = {name: [*row["report_versions"].get(name, []), *ids] for name, ids in versions.items()}
    await conn.execute(f"UPDATE {SCHEMA}.rounds SET note = $2, report_versions = $3 WHERE round_id = $1",
                       round_id, note, merged or row["report_versions"])  # fmt: skip
    return version


async def list_rounds(conn: asyncpg.Connection | asyncpg.Pool) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"SELECT round_id, number, starts_at, ends_at, closed_at, closed_by, how, note, gpu_seconds, cost, output_units,"
        f" report_uri, (SELECT count(*) FROM {SCHEMA}.round_notes n WHERE n.round_id = r.round_id) AS note_versions"
        f" FROM {SCHEMA}.rounds r ORDER BY number"
    )
    return [_round_row(row) for row in rows]


async def load_round(conn: asyncpg.Connection | asyncpg.Pool, round_id: str) -> dict[str, Any]:
    """A round with its whole report and every version of its note."""
    row = await conn.fetchrow(
        f"SELECT round_id, number, starts_at, ends_at, closed_at, closed_by, how, note, gpu_seconds, cost,"
        f" output_units, report_uri, report, report_versions FROM {SCHEMA}.rounds WHERE round_id = $1", round_id,
    )  # fmt: skip
    if row is None:
        raise RoundError(f"no round {round_id!r}; `cardflow round list` shows the closed rounds")
    notes = await conn.fetch(
        f"SELECT version, note, actor, reason, noted_at FROM {SCHEMA}.round_notes WHERE round_id = $1 ORDER BY version",
        round_id,
    )
    return {**_round_row(row), "report": row["report"], "report_versions": row["report_versions"],
            "notes": [{**dict(n), "noted_at": n["noted_at"].isoformat()} for n in notes]}  # fmt: skip


def _round_row(row: asyncpg.Record) -> dict[str, Any]:
    plain = {key: (value.isoformat() if isinstance(value, datetime) else float(value) if isinstance(value, Decimal)
                   else value) for key, value in dict(row).items() if key not in ("report", "report_versions")}  # fmt: skip
    plain["gpu_hours"] = plain.pop("gpu_seconds") / 3600
    return plain


def compare_rounds(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Totals and per-project / per-card spend of two rounds side by side, with the change (pure)."""
    def changes(a: dict[str, Any], b: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
        return {name: {"first": a.get(name), "second": b.get(name), "change": _change(a.get(name), b.get(name))}
                for name in names}  # fmt: skip

    measures = ("gpu_hours", "cost", "output_units", "idle_gpu_hours", "busy_share", "preemption_lost_gpu_hours",
                "actual_over_estimated_cost")  # fmt: skip
    result: dict[str, Any] = {"first": first["round_id"], "second": second["round_id"],
                              "totals": changes(first["report"]["totals"], second["report"]["totals"], measures)}  # fmt: skip
    for grouping in ("project", "card", "scenario"):
        a = {row["key"]: row for row in first["report"][f"by_{grouping}"]}
        b = {row["key"]: row for row in second["report"][f"by_{grouping}"]}
        result[f"by_{grouping}"] = {key: changes(a.get(key, {}), b.get(key, {}), ("cost", "output_units", "cost_per_output_unit"))
                                    for key in sorted(set(a) | set(b))}  # fmt: skip
    return result


def _change(a: Any, b: Any) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return b - a
    return None
