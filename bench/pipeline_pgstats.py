"""`bench/pipeline.py --pg-stats`: where the embedded PostgreSQL's time goes per task in one phase.

The bench starts PostgreSQL with `pg_stat_statements` preloaded (`PG_STATS_SETTINGS`); `PgStats`
resets its counters when a phase starts and, once the phase ended and every backend flushed its
counters, reads per normalised statement (and the role that ran it, i.e. the service) its calls, rows
and execution time, plus per table rows inserted / updated (HOT or not) / deleted and rows read by
sequential scans (`pg_stat_user_tables`), and
commits (`pg_stat_database`), all divided by the phase's tasks.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import asyncpg
from rich.console import Console
from rich.table import Table

PG_STATS_SETTINGS: Mapping[str, str] = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.max": "5000",
    "track_functions": "all",
}
Counts = tuple[int, int, int, int, int, int]
"""Of one table: rows inserted, updated, deleted, updated HOT (no index touched), sequential scans, rows they read."""
FLUSH_WAIT_S = 11.0
"""An idle backend flushes its table / database counters within 10 s (PostgreSQL 15+)."""

_TABLES = ("SELECT schemaname, relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd, seq_scan, seq_tup_read"
          " FROM pg_stat_user_tables")
_DATABASE = "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()"
_STATEMENTS = """
SELECT r.rolname AS role, s.query, s.calls, s.rows, s.total_exec_time + s.total_plan_time AS ms
FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


@dataclass(frozen=True)
class StatementShare:
    role: str
    query: str
    calls_per_task: float
    rows_per_task: float
    ms_per_task: float
    share: float  # of all statements' time


@dataclass(frozen=True)
class PgStatsResult:
    tasks: int
    statements: list[StatementShare]
    commits_per_task: float
    rollbacks_per_task: float
    writes_per_task: dict[str, tuple[float, ...]]  # schema.table -> `Counts` per task
    cpu_ms_per_task_by_client: dict[str, float] = field(default_factory=dict)  # `bench.pipeline_pgcpu`

    def by_schema(self) -> dict[str, tuple[float, float, float]]:
        totals: dict[str, tuple[float, float, float]] = {}
        for table, (ins, upd, dele, *_) in self.writes_per_task.items():
            schema = table.split(".", 1)[0]
            a, b, c = totals.get(schema, (0.0, 0.0, 0.0))
            totals[schema] = (a + ins, b + upd, c + dele)
        return totals


class PgStatsUnavailableError(RuntimeError):
    """The PostgreSQL under test cannot report per-statement counters (`pg_stat_statements` not preloaded)."""


class PgStats:
    """Counters of one phase: `await start(dsn)` before submitting, `await finish(tasks)` after."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._tables: dict[str, Counts] = {}
        self._database: tuple[int, int] = (0, 0)

    async def start(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT pg_stat_statements_reset()")
            self._tables, self._database = await _counters(conn)
        except asyncpg.ObjectNotInPrerequisiteStateError as exc:
            raise PgStatsUnavailableError(
                "--pg-stats: the PostgreSQL at CARDFLOW_DATABASE_URL does not preload pg_stat_statements; unset "
                "CARDFLOW_DATABASE_URL to use the embedded server, or add it to that server's shared_preload_libraries"
            ) from exc
        finally:
            await conn.close()

    async def finish(self, tasks: int) -> PgStatsResult:
        conn = await asyncpg.connect(self.dsn)
        try:
            statements = await conn.fetch(_STATEMENTS)  # exact at once: recorded when each statement ends
            await asyncio.sleep(FLUSH_WAIT_S)
            tables, database = await _counters(conn)
        finally:
            await conn.close()
        return _result(tasks, statements, self._tables, tables, self._database, database)


async def _counters(conn: asyncpg.Connection) -> tuple[dict[str, Counts], tuple[int, int]]:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    tables = {f"{r['schemaname']}.{r['relname']}": (r["n_tup_ins"], r["n_tup_upd"], r["n_tup_del"], r["n_tup_hot_upd"],
                                                     r["seq_scan"], r["seq_tup_read"])
              for r in await conn.fetch(_TABLES)}  # fmt: skip
    row = await conn.fetchrow(_DATABASE)
    return tables, (row["xact_commit"], row["xact_rollback"])


def _result(tasks: int, statements: list[asyncpg.Record], tables_before: Mapping[str, Counts],
            tables_after: Mapping[str, Counts], db_before: tuple[int, int],
            db_after: tuple[int, int]) -> PgStatsResult:  # fmt: skip
    n = max(1, tasks)
    total_ms = sum(r["ms"] for r in statements) or 1.0
    shares = sorted(
        (StatementShare(r["role"], _normalise(r["query"]), r["calls"] / n, r["rows"] / n, r["ms"] / n, r["ms"] / total_ms)
         for r in statements),
        key=lambda s: -s.ms_per_task,
    )  # fmt: skip
    writes = {}
    for table, after in tables_after.items():
        before = tables_before.get(table, (0,) * len(after))
        delta = tuple((a - b) / n for a, b in zip(after, before, strict=True))
        if any(delta):
            writes[table] = delta
    return PgStatsResult(
        tasks=tasks, statements=shares,
        commits_per_task=(db_after[0] - db_before[0]) / n, rollbacks_per_task=(db_after[1] - db_before[1]) / n,
        writes_per_task=dict(sorted(writes.items(), key=lambda item: -sum(item[1][:3]))),
    )  # fmt: skip


def _normalise(query: str) -> str:
    return re.sub(r"\s+", " ", query).strip()


def print_pg_stats(console: Console, result: PgStatsResult, top: int = 30) -> None:
    console.print(f"PostgreSQL per task ({result.tasks} tasks): {result.commits_per_task:.2f} commits, "
                  f"{result.rollbacks_per_task:.2f} rollbacks")  # fmt: skip
    table = Table("role", "statement", "calls/task", "rows/task", "ms/task", "share", title="statements by time")
    for s in result.statements[:top]:
        table.add_row(s.role, s.query[:140], f"{s.calls_per_task:.2f}", f"{s.rows_per_task:.2f}",
                      f"{s.ms_per_task:.3f}", f"{s.share:.1%}")  # fmt: skip
    console.print(table)
    calls = Table("role", "calls/task", "ms/task", "share", title="statements by role (service)")
    for role, (c, ms, share) in _by_role(result).items():
        calls.add_row(role, f"{c:.2f}", f"{ms:.3f}", f"{share:.1%}")
    console.print(calls)
    if result.cpu_ms_per_task_by_client:
        cpu = Table("client (or server process)", "CPU ms/task", title="PostgreSQL's CPU by the process it served")
        for name, ms in result.cpu_ms_per_task_by_client.items():
            cpu.add_row(name, f"{ms:.3f}")
        console.print(cpu)
    writes = Table("schema", "inserted/task", "updated/task", "deleted/task", title="rows written per schema")
    for schema, (ins, upd, dele) in result.by_schema().items():
        writes.add_row(schema, f"{ins:.2f}", f"{upd:.2f}", f"{dele:.2f}")
    console.print(writes)
    tables = Table("table", "inserted/task", "updated/task", "deleted/task", "HOT updates/task", "seq scans/task",
                   "rows seq-read/task", title="rows written (and read by sequential scans) per table")
    for name, counts in result.writes_per_task.items():
        tables.add_row(name, *(f"{value:.2f}" for value in counts))
    console.print(tables)


def _by_role(result: PgStatsResult) -> dict[str, tuple[float, float, float]]:
    roles: dict[str, tuple[float, float, float]] = {}
    for s in result.statements:
        c, ms, share = roles.get(s.role, (0.0, 0.0, 0.0))
        roles[s.role] = (c + s.calls_per_task, ms + s.ms_per_task, share + s.share)
    return dict(sorted(roles.items(), key=lambda item: -item[1][1]))


def pg_stats_json(result: PgStatsResult, top: int = 40) -> dict[str, object]:
    return {
        "tasks": result.tasks,
        "commits_per_task": round(result.commits_per_task, 3),
        "rollbacks_per_task": round(result.rollbacks_per_task, 3),
        "statements": [{"role": s.role, "query": s.query, "calls_per_task": round(s.calls_per_task, 3),
                        "rows_per_task": round(s.rows_per_task, 3), "ms_per_task": round(s.ms_per_task, 4),
                        "share": round(s.share, 4)} for s in result.statements[:top]],  # fmt: skip
        "writes_per_schema": {k: [round(x, 3) for x in v] for k, v in result.by_schema().items()},
        "writes_per_table": {k: [round(x, 3) for x in v] for k, v in result.writes_per_task.items()},
        "cpu_ms_per_task_by_client": {k: round(v, 4) for k, v in result.cpu_ms_per_task_by_client.items()},
    }
