"""Migrations 010, 011 and 012 on a ledger that already closed rounds the old way (each run's whole output in the round
of its last report): every closed round's output increments add up to the output it recorded, every run's
to its counted output, and the open round counts the rest once; closed leases are marked with the round whose
period holds their end (012), so the open round's losses do not count them again."""

from __future__ import annotations

import shutil
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from services.ledger.round_inputs import count_output
from services.ledger.service import MIGRATIONS
from shared.delivery.db import create_pool
from shared.delivery.migrations import migrate
from shared.settings import Settings
from tests.unit.ledger.builders import T0

pytestmark = pytest.mark.integration

R1, R2, R3 = T0, T0 + timedelta(days=7), T0 + timedelta(days=14)  # R0001 = [R1, R2), R0002 = [R2, R3), then open
RUNS = [  # task, its row in task_output (units, reported at; None: flagged, no row), what R0001 and R0002 recorded
    ("A", (1000, R2 + timedelta(hours=1)), 500, 1000),  # a checkpoint's 500 in R0001, then its 1000 in R0002
    ("B", (300, R1 + timedelta(hours=1)), 0, 0),  # reported in R0001 but applied after it closed: in neither
    ("C", None, 400, 0),  # R0001 counted 400, then the success was flagged: the row went
    ("D", (700, R3 + timedelta(hours=1)), 0, 0),  # reported after the last close: open
    ("E", (50, R1 + timedelta(hours=2)), 50, 0),  # counted as it is by R0001
]


async def _old_ledger(pool, tmp_path: Path) -> None:  # noqa: ANN001
    for path in sorted(MIGRATIONS.glob("00*.sql")):
        shutil.copy(path, tmp_path)
    await migrate(pool, "ledger", tmp_path)
    for task_id, row, *_ in RUNS:
        await pool.execute(
            "INSERT INTO ledger.lease_usage (lease_id, task_id, project, card_type, gpus, price_per_gpu_hour, opened_at,"
            " accounted_until, gpu_seconds, cost) VALUES ($1, $2, 'p', 'L40S', 1, 1, $3, $3, 0, 0)", f"L{task_id}", task_id, R1,
        )  # fmt: skip
        if row is not None:
            await pool.execute("INSERT INTO ledger.task_output VALUES ($1, $2, $3, true, $4)", task_id, f"L{task_id}", *row)
    for number, (starts, ends) in enumerate(((R1, R2), (R2, R3)), start=1):
        recorded = {task_id: units[number - 1] for task_id, _, *units in RUNS if units[number - 1]}
        round_id = f"R{number:04d}"
        await pool.execute(
            "INSERT INTO ledger.rounds (round_id, number, starts_at, ends_at, closed_at, closed_by, how, note, gpu_seconds,"
            " cost, output_units, report, event_id) VALUES ($1, $2, $3, $4, $4, 'user:p', 'by_hand', 'n', 0, 0, $5, '{}', 'E')",
            round_id, number, starts, ends, sum(recorded.values()),
        )  # fmt: skip
        await pool.executemany(
            "INSERT INTO ledger.round_lines (round_id, grouping, key, tasks, gpu_hours, cost, output_units)"
            " VALUES ($1, 'task', $2, 1, 0, 0, $3)", [(round_id, task_id, units) for task_id, units in recorded.items()],
        )  # fmt: skip


async def test_closed_rounds_keep_their_output_and_the_open_round_counts_the_rest_once(
    fresh_settings: Settings, tmp_path: Path
) -> None:
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=1) as pool:
        await _old_ledger(pool, tmp_path)
        await pool.executemany("UPDATE ledger.lease_usage SET closed_at = $2, close_reason = 'preempted' WHERE lease_id = $1",
                               [("LA", R1 + timedelta(hours=1)), ("LB", R2 + timedelta(hours=2)), ("LD", R3 + timedelta(hours=1))])
        applied = await migrate(pool, "ledger", MIGRATIONS)
        closed_in = {r["lease_id"]: r["closed_round_id"] for r in await pool.fetch("SELECT * FROM ledger.lease_usage")}
        by_round = {r["round_id"]: r["units"] for r in await pool.fetch(
            "SELECT round_id, sum(output_units) AS units FROM ledger.output_increments GROUP BY round_id")}  # fmt: skip
        recorded = {r["round_id"]: r["output_units"] for r in await pool.fetch("SELECT * FROM ledger.rounds")}
        by_run = {(r["task_id"], r["lease_id"]): r["units"] for r in await pool.fetch(
            "SELECT task_id, lease_id, sum(output_units) AS units FROM ledger.output_increments"
            " GROUP BY task_id, lease_id")}  # fmt: skip
        counted = {(r["task_id"], r["lease_id"]): r["output_units"] for r in await pool.fetch("SELECT * FROM ledger.task_output")}
        total = await pool.fetchval("SELECT sum(output_units) FROM ledger.task_output")
        reviewed = {r["task_id"]: r["finished_round_id"] for r in await pool.fetch("SELECT * FROM ledger.task_output")}
        async with pool.acquire() as conn, conn.transaction():
            next_round = await count_output(conn, R3 + timedelta(days=7), "R0003")

    assert [m.version for m in applied][:3] == [10, 11, 12]
    assert closed_in == {"LA": "R0001", "LB": "R0002", "LC": None, "LD": None, "LE": None}  # 012: by the old rule
    assert reviewed == {"A": "R0002", "B": "R0001", "D": None, "E": "R0001"}  # 011: finished runs, by the old rule
    assert by_round == {"R0001": Decimal(950), "R0002": Decimal(1000), None: Decimal(100)}
    assert {r: by_round[r] for r in recorded} == recorded  # closed rounds keep what they recorded
    assert {run: units for run, units in by_run.items() if units} == counted  # every run's increments: its output
    next_units = sum(line.output_units for line in next_round)
    assert sum(recorded.values()) + next_units == total == Decimal(2050)  # the open round counts the rest, once
    assert {line.card_type for line in next_round} == {"L40S"}
