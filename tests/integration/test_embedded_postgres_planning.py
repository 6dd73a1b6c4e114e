"""The embedded PostgreSQL plans a batch lookup by key (`key = ANY($1::text[])`) as an index scan
even on a table never analysed yet, as every table of a new installation is (`RANDOM_PAGE_COST`).

With PostgreSQL's default `random_page_cost` (4) the same lookup on the same table is a sequential
scan that compares every row with every key; the second test shows the table reproduces that, so
the first one would fail without the setting. And `bench/pipeline.py --pg-stats` on a server that
does not preload `pg_stat_statements` names what is missing."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.pipeline_pgstats import PgStats, PgStatsUnavailableError  # noqa: E402
from shared.embedded import Endpoints  # noqa: E402
from shared.embedded.postgres_server import RANDOM_PAGE_COST  # noqa: E402
from shared.events.envelope import new_event_id  # noqa: E402
from shared.settings import Settings  # noqa: E402

ROWS = 5_000
KEYS = 50


@pytest.fixture
async def fresh_table(backends: Endpoints) -> AsyncIterator[tuple[asyncpg.Connection, str, list[str]]]:
    """A never-analysed table shaped like `ledger.tasks` (text key, a few short columns), its keys."""
    if Settings().database_dsn:
        pytest.skip("PostgreSQL is configured in the environment, not embedded: its settings are its operator's")
    conn = await asyncpg.connect(backends.database_url)
    table = f"plan_{new_event_id().lower()}"
    keys = [new_event_id() for _ in range(ROWS)]
    await conn.execute(f"CREATE TABLE {table} (task_id text PRIMARY KEY, project text NOT NULL, name text NOT NULL,"
                       " output_unit text, submitted_at timestamptz NOT NULL DEFAULT now(), scenario text, profile text,"
                       " gpus int) WITH (autovacuum_enabled = false)")  # fmt: skip
    await conn.execute(f"INSERT INTO {table} (task_id, project, name, profile, gpus)"
                       " SELECT k, 'bench-1', 'bench-1-' || n, 'compute', 1 FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n)",
                       keys)  # fmt: skip
    try:
        yield conn, table, keys[::ROWS // KEYS]
    finally:
        await conn.execute(f"DROP TABLE {table}")
        await conn.close()


async def _plan(conn: asyncpg.Connection, table: str, keys: list[str]) -> str:
    """The plan of the lookup with the keys as the planner sees them in a custom plan (a constant array)."""
    literal = "{" + ",".join(keys) + "}"
    rows = await conn.fetch(f"EXPLAIN SELECT task_id, project FROM {table} WHERE task_id = ANY('{literal}'::text[])")
    return "\n".join(row[0] for row in rows)


async def test_the_embedded_server_plans_a_batch_lookup_on_an_unanalysed_table_as_an_index_scan(fresh_table) -> None:
    conn, table, keys = fresh_table

    assert await conn.fetchval("SHOW random_page_cost") == RANDOM_PAGE_COST
    plan = await _plan(conn, table, keys)
    assert "Seq Scan" not in plan and f"{table}_pkey" in plan, plan


async def test_with_the_default_random_page_cost_the_same_lookup_is_a_sequential_scan(fresh_table) -> None:
    conn, table, keys = fresh_table

    async with conn.transaction():
        await conn.execute("SET LOCAL random_page_cost = 4")
        plan = await _plan(conn, table, keys)
    assert "Seq Scan" in plan, plan


async def test_pg_stats_on_a_server_without_pg_stat_statements_says_what_is_missing(backends: Endpoints) -> None:
    conn = await asyncpg.connect(backends.database_url)
    had = await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'")
    try:
        if await conn.fetchval("SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'"):
            pytest.skip("this PostgreSQL preloads pg_stat_statements")
        with pytest.raises(PgStatsUnavailableError, match="shared_preload_libraries"):
            await PgStats(backends.database_url).start()
    finally:
        if not had:
            await conn.execute("DROP EXTENSION IF EXISTS pg_stat_statements")
        await conn.close()
