"""What a round's period holds: the loaders `close_round` calls in its closing transaction.

Spend, output, finished runs, flagged successes and losses are marked with the round that counts them
(`UPDATE … RETURNING` on rows no round counted yet, happened before the round's end), so something the
ledger applied after a round had closed counts in the next round rather than in none, and consecutive
rounds add up to the ledger's totals. Capacity (nodes' alive time, from the spans the ledger keeps:
`services.ledger.capacity`) is clipped to the period instead.
The match review's facts (`load_match_facts`) and the flagged list (`load_flagged`) are read by
`cardflow review` too (`services.ledger.reviews`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg

from services.ledger.accounting import mean_util_pct
from services.ledger.capacity import AliveSpan, NodeChange, NodeChangeKind, capacity_changes, node_spans
from services.ledger.match_review import MatchFacts, RankedCard, ReviewThresholds, review_match
from services.ledger.round_report import LostRun, NodeSpan, OutputLine, RoundInputs, RoundTask, SpendLine

SCHEMA = "ledger"
LOSS_REASONS = ("preempted", "expired", "revoked", "reclaimed_idle")
TREND_ROUNDS = 8
UNKNOWN_CARD = "unknown"
"""Card type of output whose lease the ledger never saw."""


async def load_round_inputs(conn: asyncpg.Connection, starts: datetime, ends: datetime, round_id: str) -> RoundInputs:
    """Everything `build_round_report` needs for `[starts, ends)` (see `round_report`). The spend, the
    output, the finished and flagged runs and the losses are the rows before `ends` that no earlier round
    counted (usage and output increments, final and flagged runs, closed leases), marked as
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
                       losses=await load_losses(conn, ends, round_id), reviews=reviews,
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
    """Each node's alive time within the period, from the spans the ledger keeps (`ledger.node_spans`), not
    from the archive, which may lag: for what the ledger consumed before it kept spans (migration 014), the
    archived node events from before then that no span holds (`services.ledger.capacity`)."""
    archived = await _archived_node_changes(conn)
    kept = await conn.fetch(
        f"SELECT node_id, card_type, gpus, registered_at, registered_event_id, lost_at, lost_event_id"
        f" FROM {SCHEMA}.node_spans WHERE coalesce(registered_at, lost_at) < $1"
        "  AND (lost_at IS NULL OR lost_at > $2 OR node_id = ANY($3::text[]))",
        ends, starts, sorted({change.node_id for change in archived}),
    )  # fmt: skip
    return node_spans(capacity_changes([AliveSpan(**dict(r)) for r in kept], archived), starts, ends)


async def _archived_node_changes(conn: asyncpg.Connection) -> list[NodeChange]:
    """The archived `node.registered` / `node.lost` from before the ledger kept spans that no span holds."""
    rows = await conn.fetch(
        "SELECT e.type, e.occurred_at, e.body FROM audit.events e"
        f" WHERE e.type = ANY($1::text[]) AND e.occurred_at < (SELECT min(since) FROM {SCHEMA}.node_spans_kept)"
        f"  AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.node_spans s"
        "   WHERE e.event_id IN (s.registered_event_id, s.lost_event_id)) ORDER BY e.occurred_at, e.seq",
        [kind.value for kind in NodeChangeKind],
    )  # fmt: skip
    return [_node_change(NodeChangeKind(r["type"]), r["occurred_at"], json.loads(r["body"])["data"]) for r in rows]


def _node_change(kind: NodeChangeKind, at: datetime, data: dict[str, Any]) -> NodeChange:
    return NodeChange(kind, at, data["node_id"], data.get("card_type"), data.get("gpus"))


async def load_losses(conn: asyncpg.Connection, ends: datetime, round_id: str) -> list[LostRun]:
    """Mark as `round_id`'s the leases closed before `ends` that no round took yet (`closed_round_id`), and
    return those ended by preemption, expiry, revocation or reclaim, with the time since their last
    checkpoint: one the ledger applied after the previous round closed is counted here rather than nowhere.
    The last checkpoint is the one its `lease.released` named (`lease_usage.last_checkpoint_at`); for a lease
    without one, the archived `task.checkpointed` events (leases closed before the ledger kept it)."""
    leases = await conn.fetch(
        f"WITH closed AS (UPDATE {SCHEMA}.lease_usage SET closed_round_id = $2"
        "  WHERE closed_round_id IS NULL AND closed_at < $1"
        "  RETURNING lease_id, task_id, card_type, gpus, opened_at, closed_at, close_reason, price_per_gpu_hour,"
        "    last_checkpoint_at)"
        " SELECT * FROM closed WHERE close_reason = ANY($3::text[]) ORDER BY closed_at, lease_id",
        ends, round_id, list(LOSS_REASONS),
    )  # fmt: skip
    if not leases:
        return []
    archived = await _archived_checkpoints(conn, [r["task_id"] for r in leases if r["last_checkpoint_at"] is None])
    losses = []
    for r in leases:
        checkpoint = r["last_checkpoint_at"] or archived.get(r["lease_id"])
        since = max(r["opened_at"], checkpoint or r["opened_at"])
        lost = max((r["closed_at"] - since) // timedelta(microseconds=1), 0)
        losses.append(LostRun(r["lease_id"], r["task_id"], r["card_type"], r["close_reason"], r["gpus"],
                              Decimal(lost) / Decimal(1_000_000), r["price_per_gpu_hour"]))  # fmt: skip
    return losses


async def _archived_checkpoints(conn: asyncpg.Connection, task_ids: Sequence[str]) -> dict[str, datetime]:
    """Each lease's last `task.checkpointed` in `audit.events`, for the tasks given (none: no read)."""
    if not task_ids:
        return {}
    rows = await conn.fetch(
        "SELECT (body::jsonb -> 'data' ->> 'lease_id') AS lease_id, max(occurred_at) AS last_at FROM audit.events"
        " WHERE type = 'task.checkpointed' AND task_id = ANY($1::text[]) GROUP BY 1",
        sorted(set(task_ids)),
    )
    return {r["lease_id"]: r["last_at"] for r in rows}


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
