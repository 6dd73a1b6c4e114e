"""Migrations 002-005 on a matcher schema that already holds matches: open tasks get their ranking (002),
and a stored match reads the same after its JSON columns became json (005)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.matcher.service import MIGRATIONS
from shared.delivery.db import create_pool
from shared.delivery.migrations import migrate
from shared.settings import Settings

pytestmark = pytest.mark.integration

RANKING = [
    {"card_type": "L40S", "rank": 2, "runtime_s": 9.0, "cost": 2.0, "fleet_gpus": 8, "why_not": None},
    {"card_type": "A10", "rank": 1, "runtime_s": 9.0, "cost": 1.0, "fleet_gpus": 4, "why_not": None},
    {"card_type": "T4", "rank": None, "runtime_s": 9.0, "cost": 0.5, "fleet_gpus": 0, "why_not": "not in the fleet"},
]


async def test_open_tasks_get_the_ranked_card_types_of_their_match(fresh_settings: Settings, tmp_path: Path) -> None:
    shutil.copy(MIGRATIONS / "001_matcher.sql", tmp_path)
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=1) as pool:
        await migrate(pool, "matcher", tmp_path)
        await pool.execute(
            "INSERT INTO matcher.matches (match_id, task_id, trigger, request, ranking, matched, chosen, oversized,"
            " reason, fleet, fleet_card_types, catalog_version, catalog_hash, event_id)"
            " VALUES ('M1', 'T1', 'submitted', '{}', $1::jsonb, true, 'A10', false, 'r', '{}', '{}', 'v', 'h', 'E1')",
            RANKING,
        )
        await pool.execute(
            "INSERT INTO matcher.tasks (task_id, project, request, status, last_match_id, last_detail) VALUES"
            " ('T1', 'p', '{}', 'matched', 'M1', 'r'), ('T2', 'p', '{}', 'waiting', 'M0', 'w')"
        )
        applied = await migrate(pool, "matcher", MIGRATIONS)
        rows = await pool.fetch("SELECT task_id, last_ranked FROM matcher.tasks ORDER BY task_id")
        [match] = await pool.fetch("SELECT pg_typeof(ranking)::text AS type, ranking FROM matcher.matches")

    assert [m.version for m in applied] == [2, 3, 4, 5, 6]
    assert (match["type"], match["ranking"]) == ("json", RANKING)
    assert {row["task_id"]: row["last_ranked"] for row in rows} == {"T1": ["A10", "L40S"], "T2": []}
