"""Readiness's statements that name tasks by id read those tasks' rows, not every open task (real
PostgreSQL). The trap: statistics taken while every task was closed make the partial index of open tasks
look nearly empty, so a statement saying `closed_at IS NULL` beside its ids was planned as a read of every
open task, each compared with every id (at 1,000 tasks/s: 20-145 ms a batch, growing with the backlog)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import asyncpg

from services.readiness.store import close_tasks, lock_tracked, probe_targets, record_signals
from shared.events import DataReadySignalled, make_event

CLOSED, OPEN, NAMED = 3000, 3000, 50
T = TypeVar("T")


async def stale_statistics(pool: asyncpg.Pool) -> list[str]:
    """Tasks analysed while all were closed, then a backlog of open ones; returns ids of open tasks to name."""
    await add_tasks(pool, "C", CLOSED, closed=True)
    await pool.execute("ANALYZE readiness.tasks")
    await add_tasks(pool, "O", OPEN, closed=False)
    named = [f"O{i:06d}" for i in range(0, OPEN, OPEN // NAMED)]
    await pool.execute(
        "INSERT INTO readiness.inputs (task_id, position, ref, kind, key)"
        " SELECT t, 0, to_jsonb('s3://bkt/' || t), 'object', 's3://bkt/' || t FROM unnest($1::text[]) AS t",
        named,
    )
    return named


async def add_tasks(pool: asyncpg.Pool, prefix: str, count: int, *, closed: bool) -> None:
    await pool.execute(
        "INSERT INTO readiness.tasks (task_id, name, project, priority_class, submitted_at, submitted_event_id,"
        " correlation_id, inputs_total, ready, checked_at, closed_at, closed_by)"
        " SELECT $1 || lpad(g::text, 6, '0'), 'n', 'p', 'standard', now(), 'e', 'c', 1, false, now(),"
        " CASE WHEN $3 THEN now() END, CASE WHEN $3 THEN 'task.succeeded' END FROM generate_series(0, $2 - 1) AS g",
        prefix, count, closed,
    )  # fmt: skip


async def with_task_rows_read(conn: asyncpg.Connection, statement: Awaitable[T]) -> tuple[T, int]:
    """What `statement` returns, and the rows of `readiness.tasks` it read (scans and index fetches)."""

    async def read_so_far() -> int:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        return await conn.fetchval(
            "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'readiness' AND relname = 'tasks'")  # fmt: skip

    before = await read_so_far()
    result = await statement
    return result, await read_so_far() - before


async def test_locking_named_tasks_reads_their_rows_only(readiness_pool: asyncpg.Pool) -> None:
    named = await stale_statistics(readiness_pool)
    async with readiness_pool.acquire() as conn, conn.transaction():
        tracked, read = await with_task_rows_read(conn, lock_tracked(conn, "readiness", [*named, "C000001"]))
    assert sorted(t.task_id for t in tracked) == named  # the closed one left out
    assert read <= 2 * (NAMED + 1)  # before: every open task (3,000)


async def test_closing_named_tasks_reads_their_rows_only_and_keeps_the_first_closing(readiness_pool: asyncpg.Pool) -> None:
    named = await stale_statistics(readiness_pool)
    async with readiness_pool.acquire() as conn, conn.transaction():
        _, read = await with_task_rows_read(conn, close_tasks(conn, "readiness", dict.fromkeys([*named, "C000001"], "task.cancelled")))
    assert read <= 2 * (NAMED + 1)
    closed = await readiness_pool.fetch("SELECT task_id, closed_by FROM readiness.tasks WHERE closed_at IS NOT NULL"
                                        " AND (task_id = ANY($1::text[]) OR task_id = 'C000001') ORDER BY task_id", named)  # fmt: skip
    assert [(r["task_id"], r["closed_by"]) for r in closed] == [("C000001", "task.succeeded"), *((t, "task.cancelled") for t in named)]


async def test_listing_keys_to_probe_reads_the_named_tasks_rows_only(readiness_pool: asyncpg.Pool) -> None:
    named = await stale_statistics(readiness_pool)
    async with readiness_pool.acquire() as conn, conn.transaction():
        keys, read = await with_task_rows_read(conn, probe_targets(conn, "readiness", named))
    assert sorted(keys) == [f"s3://bkt/{t}" for t in named]
    assert read <= 2 * NAMED


async def test_a_signal_finds_the_open_tasks_waiting_on_it_by_their_inputs(readiness_pool: asyncpg.Pool) -> None:
    """A signal's waiting inputs are found by key, their tasks by id: a closed task waiting on a signalled key
    is left out, and no other task's row is read."""
    named = await stale_statistics(readiness_pool)
    await readiness_pool.execute("INSERT INTO readiness.inputs (task_id, position, ref, kind, key)"
                                 " VALUES ('C000001', 0, to_jsonb('s3://bkt/C000001'::text), 'object', 's3://bkt/C000001')")  # fmt: skip
    signals = [make_event(DataReadySignalled, subject=f"object/{task_id}", subject_seq=1, producer="intake/test",
                          actor="upstream:etl", data={"input": f"s3://bkt/{task_id}"})
               for task_id in [*named, "C000001"]]  # fmt: skip
    async with readiness_pool.acquire() as conn, conn.transaction():
        waiting, read = await with_task_rows_read(conn, record_signals(conn, "readiness", signals))
    assert waiting == {signal.data.input.removeprefix("s3://bkt/"): signal.event_id for signal in signals[:-1]}
    assert read <= 2 * (NAMED + 1)  # before: every open task (3,000)
