"""Reads for `cardflow matches TASK` and `cardflow review`: one task's match against what it took,
and every finished task's verdict, grouped and ranked by cost per output unit. Successes the
dispatcher flagged (issue 15: too early for the estimate, output out of bounds) are listed apart
(`flagged`): their output is in no group's total and no cost per output unit.

The facts come from the ledger's own tables (`ledger.task_matches` from `task.matched`, usage,
output); the judgement is `services.ledger.match_review` (pure).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from services.ledger.match_review import ReviewGrouping, review_json, review_match, speed_corrections, summarize_reviews
from services.ledger.round_inputs import load_flagged, load_match_facts
from services.ledger.rounds import RoundError

SCHEMA = "ledger"


class UnmatchedTaskError(LookupError):
    """The ledger has no match for the task."""


async def task_match(pool: asyncpg.Pool, task_id: str) -> dict[str, Any]:
    """The task's match (ranking with estimates); with its review when it has finished."""
    match = await pool.fetchrow(
        f"SELECT m.chosen, m.ranking, m.oversized, m.reason, m.catalog_version, m.matched_at, m.event_id, t.name, t.project,"
        f" t.profile, t.gpus FROM {SCHEMA}.task_matches m LEFT JOIN {SCHEMA}.tasks t USING (task_id)"
        f" WHERE m.task_id = $1", task_id,
    )  # fmt: skip
    if match is None:
        raise UnmatchedTaskError(f"no match recorded for task {task_id!r} (never matched, or the id is wrong)")
    facts = await load_match_facts(pool, [task_id])
    review = review_json(review_match(facts[0])) if facts else None
    return {"task_id": task_id, "name": match["name"], "project": match["project"], "profile": match["profile"],
            "gpus": match["gpus"], "chosen": match["chosen"], "ranking": match["ranking"], "oversized": match["oversized"],
            "why": match["reason"], "catalog_version": match["catalog_version"], "match_event_id": match["event_id"],
            "matched_at": match["matched_at"].isoformat(), "finished": review is not None, "review": review}  # fmt: skip


async def review_matches(
    pool: asyncpg.Pool, *, round_id: str | None = None, by: ReviewGrouping = ReviewGrouping.CARD
) -> dict[str, Any]:
    """Every succeeded task's verdict (of one round: those its close reviewed), grouped by `by`."""
    if round_id is not None and not await pool.fetchval(f"SELECT 1 FROM {SCHEMA}.rounds WHERE round_id = $1", round_id):
        raise RoundError(f"no round {round_id!r}; `cardflow round list` shows the closed rounds")
    finished = await pool.fetch(
        f"SELECT DISTINCT task_id FROM {SCHEMA}.task_output WHERE final AND ($1::text IS NULL OR finished_round_id = $1)",
        round_id,
    )  # fmt: skip
    reviews = [review_match(facts) for facts in await load_match_facts(pool, [r["task_id"] for r in finished])]
    flagged = await load_flagged(pool, round_id)
    return {"round_id": round_id, "by": by.value, "groups": summarize_reviews(reviews, by),
            "speed_corrections": speed_corrections(reviews), "tasks": [review_json(r) for r in reviews],
            "flagged": flagged}  # fmt: skip
