"""Rounds: closing one (by hand or at its period's end), amending its note, reading and comparing.

A round is the period from the previous round's end (the first starts at the period boundary
before the first usage) to its close. Periods are aligned to Monday 00:00 UTC multiples of the
round period (weekly by default: `Settings.round_period_days`); if the ledger was down across
several boundaries, one round runs to the last of them.

`close_round` (in the caller's transaction, under an advisory lock so two closes never overlap):

1. load what the period holds (`load_round_inputs`: spend, output, capacity, losses, reviews), marking
   the usage and output increments it counts with the round;
2. build the report (`round_report.build_round_report`, pure) and its files (`round_render`);
3. put `report.json`, `report.csv`, `report.html` into the reports bucket under
   `rounds/<archive id>/<round id>/` (versioned: an amended note puts new versions);
4. write `ledger.rounds`, `round_lines`, `round_notes` (version 1) and emit `round.closed` with the
   note and the closer as actor.

`amend_note` keeps every version (`round_notes`) and emits `round.note_amended`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

import asyncpg

from services.common.runtime import Emitter
from services.ledger.accounting import mean_util_pct
from services.ledger.match_review import RankedCard, MatchFacts, ReviewThresholds, review_match
from services.ledger.round_render import report_csv, report_html, report_json
from services.ledger.round_report import (
    GROUPINGS,
    LostRun,
    NodeSpan,
    OutputLine,
    RoundInputs,
    RoundPeriod,
    SpendLine,
    RoundTask,
    build_round_report,
)
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
LOSS_REASONS = ("preempted", "expired", "revoked", "reclaimed_idle")
TREND_ROUNDS = 8
REPORT_FILES = {"report.json": "application/json", "report.csv": "text/csv", "report.html": "text/html; charset=utf-8"}
PERIOD_END_NOTE = "closed at the end of its period"
UNKNOWN_CARD = "unknown"
"""Card type of output whose lease the ledger never saw."""


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
    if last is None and not await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.usage_increments)"):
        return None  # nothing has been spent yet: no round to report
    starts = last or await first_round_start(conn, now, period)
    if now < next_boundary(starts, period):
        return None
    try:
        return await close_round(conn, store, emitter, actor="system:rounds", note=PERIOD_END_NOTE, now=now,
                                 period=period, how=HowClosed.PERIOD_END)  # fmt: skip
    except RoundError:
        return None  # another instance (or a planner) closed it a moment ago


async def first_round_start(conn: asyncpg.Connection, now: datetime, period: timedelta) -> datetime:
    first = await conn.fetchval(f"SELECT min(from_at) FROM {SCHEMA}.usage_increments")
    return period_floor(min(first or now, now), period)


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


# ---- what a period holds ------------------------------------------------------------------------------


async def load_round_inputs(conn: asyncpg.Connection, starts: datetime, ends: datetime, round_id: str) -> RoundInputs:
    """Everything `build_round_report` needs for `[starts, ends)` (see `round_report`). The spend and the
    output are the usage and output increments before `ends` that no earlier round counted, marked as
    this round's in the closing transaction (`UPDATE … RETURNING`: exactly the rows counted): one the
    ledger applied after the previous round closed, though it happened before its end, is counted here
    rather than nowhere."""
    counted = await conn.fetch(
        f"UPDATE {SCHEMA}.usage_increments SET round_id = $2 WHERE round_id IS NULL AND to_at < $1"
        " RETURNING lease_id, task_id, project, card_type, gpu_seconds, cost, to_at", ends, round_id)  # fmt: skip
    spend = [SpendLine(r["lease_id"], r["task_id"], r["project"], r["card_type"], r["gpu_seconds"], r["cost"])
             for r in sorted(counted, key=lambda r: (r["to_at"], r["lease_id"]))]  # fmt: skip
    outputs = await count_output(conn, ends, round_id)
    task_ids = sorted({line.task_id for line in spend} | {line.task_id for line in outputs})
    tasks = {r["task_id"]: RoundTask(**dict(r)) for r in await conn.fetch(
        f"SELECT task_id, name, project, scenario, output_unit FROM {SCHEMA}.tasks WHERE task_id = ANY($1::text[])",
        task_ids)}  # fmt: skip
    reviews = [review_match(facts, ReviewThresholds()) for facts in await load_match_facts(
        conn, await count_finished(conn, ends, round_id))]  # fmt: skip
    await count_flagged(conn, ends, round_id)
    return RoundInputs(spend=spend, tasks=tasks, outputs=outputs, capacity=await load_capacity(conn, starts, ends),
                       losses=await load_losses(conn, starts, ends), reviews=reviews,
                       flagged=await load_flagged(conn, round_id), earlier=await _earlier_totals(conn, starts))  # fmt: skip


async def count_output(conn: asyncpg.Connection, ends: datetime, round_id: str) -> list[OutputLine]:
    """Mark as `round_id`'s, and return, every output increment before `ends` that no round counted yet
    (rises, flags taking counted output back, clearings): a run's output counts in each round by what it
    gained (or lost) there, so the rounds add up to its counted output. The card type is the lease's."""
    rows = await conn.fetch(
        f"WITH counted AS (UPDATE {SCHEMA}.output_increments SET round_id = $2 WHERE round_id IS NULL AND at < $1"
        "  RETURNING increment_id, task_id, lease_id, card_type, output_units, at)"
        f" SELECT c.task_id, c.lease_id, coalesce(c.card_type, u.card_type, $3) AS card_type, c.output_units"
        f" FROM counted c LEFT JOIN {SCHEMA}.lease_usage u USING (lease_id) ORDER BY c.at, c.increment_id",
        ends, round_id, UNKNOWN_CARD,
    )  # fmt: skip
    return [OutputLine(**dict(row)) for row in rows]


async def count_finished(conn: asyncpg.Connection, ends: datetime, round_id: str) -> list[str]:
    """Mark as `round_id`'s, and return, the tasks whose run's final output was reported before `ends` and
    that no round reviewed yet (`task_output.finished_round_id`): a success the ledger applied after the
    previous round closed is reviewed here rather than nowhere."""
    rows = await conn.fetch(
        f"UPDATE {SCHEMA}.task_output SET finished_round_id = $2 WHERE final AND finished_round_id IS NULL"
        " AND reported_at < $1 RETURNING task_id", ends, round_id,
    )  # fmt: skip
    return sorted({row["task_id"] for row in rows})


async def count_flagged(conn: asyncpg.Connection, ends: datetime, round_id: str) -> None:
    """Mark as `round_id`'s the flagged successes reported before `ends`, not cleared, that no round listed
    yet (`flagged_output.round_id`), as `count_finished` does for finished tasks."""
    await conn.execute(
        f"UPDATE {SCHEMA}.flagged_output SET round_id = $2 WHERE round_id IS NULL AND cleared_at IS NULL"
        " AND reported_at < $1", ends, round_id,
    )  # fmt: skip


async def load_flagged(conn: asyncpg.Connection | asyncpg.Pool, round_id: str | None = None) -> list[dict[str, Any]]:
    """Successes the dispatcher flagged (`ledger.flagged_output`) and no person cleared — of round
    `round_id` (listed by it, `count_flagged`) or, without one, all — oldest first: the flags, why, and the
    output held back from every total."""
    rows = await conn.fetch(
        f"SELECT f.task_id, t.name, t.project, t.output_unit, f.lease_id, f.output_units, f.claimed_output_units,"
        f" f.flags, f.detail, f.reported_at FROM {SCHEMA}.flagged_output f LEFT JOIN {SCHEMA}.tasks t USING (task_id)"
        " WHERE f.cleared_at IS NULL AND ($1::text IS NULL OR f.round_id = $1) ORDER BY f.reported_at, f.task_id",
        round_id,
    )  # fmt: skip
    return [{"task_id": r["task_id"], "name": r["name"], "project": r["project"], "output_unit": r["output_unit"],
             "lease_id": r["lease_id"], "flags": list(r["flags"]), "detail": r["detail"],
             "output_units": _number(r["output_units"]), "claimed_output_units": _number(r["claimed_output_units"]),
             "reported_at": r["reported_at"].isoformat()} for r in rows]  # fmt: skip


def _number(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


async def load_capacity(conn: asyncpg.Connection, starts: datetime, ends: datetime) -> list[NodeSpan]:
    """Each node's alive time within the period, from the archived node.registered / node.lost events."""
    rows = await conn.fetch(
        "SELECT type, occurred_at, body FROM audit.events WHERE type IN ('node.registered', 'node.lost')"
        " AND occurred_at < $1 ORDER BY occurred_at, seq", ends,
    )  # fmt: skip
    return node_spans([(r["type"], r["occurred_at"], json.loads(r["body"])["data"]) for r in rows], starts, ends)


def node_spans(events: Sequence[tuple[str, datetime, dict[str, Any]]], starts: datetime, ends: datetime) -> list[NodeSpan]:
    """Alive intervals of every node clipped to `[starts, ends)` (pure); a re-registration while
    alive changes nothing, a node never lost is alive until `ends`."""
    alive: dict[str, tuple[datetime, dict[str, Any]]] = {}
    spans: list[NodeSpan] = []

    def close(node_id: str, at: datetime) -> None:
        since, data = alive.pop(node_id)
        seconds = (min(at, ends) - max(since, starts)).total_seconds()
        if seconds > 0:
            spans.append(NodeSpan(node_id, data["card_type"], data["gpus"], Decimal(str(seconds))))

    for kind, at, data in events:
        node_id = data["node_id"]
        if kind == "node.registered" and node_id not in alive:
            alive[node_id] = (at, data)
        elif kind == "node.lost" and node_id in alive:
            close(node_id, at)
    for node_id in list(alive):
        close(node_id, ends)
    return spans


async def load_losses(conn: asyncpg.Connection, starts: datetime, ends: datetime) -> list[LostRun]:
    """Leases ended in the period by preemption, expiry, revocation or reclaim: time since their last checkpoint."""
    leases = await conn.fetch(
        f"SELECT lease_id, task_id, card_type, gpus, opened_at, closed_at, close_reason, price_per_gpu_hour"
        f" FROM {SCHEMA}.lease_usage WHERE closed_at >= $1 AND closed_at < $2 AND close_reason = ANY($3::text[])",
        starts, ends, list(LOSS_REASONS),
    )  # fmt: skip
    if not leases:
        return []
    checkpoints = {r["lease_id"]: r["last_at"] for r in await conn.fetch(
        "SELECT (body::jsonb -> 'data' ->> 'lease_id') AS lease_id, max(occurred_at) AS last_at FROM audit.events"
        " WHERE type = 'task.checkpointed' AND task_id = ANY($1::text[]) GROUP BY 1",
        sorted({r["task_id"] for r in leases}))}  # fmt: skip
    losses = []
    for r in leases:
        since = max(r["opened_at"], checkpoints.get(r["lease_id"]) or r["opened_at"])
        lost = max((r["closed_at"] - since) // timedelta(microseconds=1), 0)
        losses.append(LostRun(r["lease_id"], r["task_id"], r["card_type"], r["close_reason"], r["gpus"],
                              Decimal(lost) / Decimal(1_000_000), r["price_per_gpu_hour"]))  # fmt: skip
    return losses


async def load_match_facts(conn: asyncpg.Connection | asyncpg.Pool, task_ids: Sequence[str]) -> list[MatchFacts]:
    """The match review's facts for tasks that succeeded (final output recorded) and were matched:
    over all its leases, GPU-seconds and cost (wall-clock, as billed), the GPU-seconds with utilisation
    reported and their busy share, and the GPU-second-weighted time scale of its agents."""
    rows = await conn.fetch(
        f"SELECT t.task_id, t.name, t.project, t.profile, t.scenario, t.output_unit,"
        f"  coalesce(t.gpus, u.max_gpus) AS gpus, m.chosen, m.ranking, m.catalog_version,"
        f"  (SELECT card_type FROM {SCHEMA}.lease_usage WHERE task_id = t.task_id ORDER BY opened_at DESC LIMIT 1) AS ran_on,"
        f"  u.gpu_seconds, u.cost, u.util_gpu_seconds, u.busy_gpu_seconds, u.scaled_gpu_seconds,"
        f"  (SELECT sum(output_units) FROM {SCHEMA}.task_output WHERE task_id = t.task_id) AS output_units"
        f" FROM {SCHEMA}.tasks t JOIN {SCHEMA}.task_matches m USING (task_id)"
        f" JOIN LATERAL (SELECT max(gpus) AS max_gpus, sum(gpu_seconds) AS gpu_seconds, sum(cost) AS cost,"
        f"   sum(util_gpu_seconds) AS util_gpu_seconds, sum(busy_gpu_seconds) AS busy_gpu_seconds,"
        f"   sum(gpu_seconds * time_scale::numeric) AS scaled_gpu_seconds"
        f"   FROM {SCHEMA}.lease_usage WHERE task_id = t.task_id) u ON true"
        f" WHERE t.task_id = ANY($1::text[])"
        f"   AND EXISTS (SELECT 1 FROM {SCHEMA}.task_output o WHERE o.task_id = t.task_id AND o.final)"
        f" ORDER BY t.task_id",
        list(task_ids),
    )
    return [_facts(row) for row in rows if row["ran_on"] is not None and row["gpu_seconds"]]


def _facts(row: asyncpg.Record) -> MatchFacts:
    ranking = tuple(RankedCard(o["card_type"], o["est_runtime_s"], o["est_cost"]) for o in row["ranking"])
    gpu_seconds, util_seconds = row["gpu_seconds"], row["util_gpu_seconds"]
    return MatchFacts(
        task_id=row["task_id"], name=row["name"], project=row["project"], profile=row["profile"],
        scenario=row["scenario"], gpus=row["gpus"] or 1, chosen=row["chosen"], ranking=ranking,
        ran_on=row["ran_on"], gpu_seconds=gpu_seconds, cost=row["cost"], output_units=row["output_units"],
        output_unit=row["output_unit"], catalog_version=row["catalog_version"],
        util_pct=mean_util_pct(row["busy_gpu_seconds"], util_seconds),
        util_coverage=float(util_seconds / gpu_seconds) if util_seconds else None,
        time_scale=_rounded_scale(row["scaled_gpu_seconds"] / gpu_seconds),
    )  # fmt: skip


def _rounded_scale(scale: Decimal) -> float:
    """The GPU-second-weighted time scale, without the last digits' noise (60.0000000001 -> 60)."""
    return float(round(scale, 6))


async def _earlier_totals(conn: asyncpg.Connection, before: datetime) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"SELECT round_id, starts_at, ends_at, gpu_seconds, cost, output_units FROM {SCHEMA}.rounds"
        " WHERE ends_at <= $1 ORDER BY number DESC LIMIT $2", before, TREND_ROUNDS,
    )  # fmt: skip
    return [{"round_id": r["round_id"], "starts_at": r["starts_at"].isoformat(), "ends_at": r["ends_at"].isoformat(),
             "gpu_hours": float(r["gpu_seconds"] / 3600), "cost": float(r["cost"]),
             "output_units": float(r["output_units"])} for r in reversed(rows)]  # fmt: skip


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
