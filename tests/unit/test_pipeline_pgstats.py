"""`bench/pipeline.py --pg-stats`: per-task arithmetic of the statement and table counters, hand-computed;
and the embedded PostgreSQL's command line that carries the extension."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.pipeline_pgstats import PG_STATS_SETTINGS, _result, pg_stats_json  # noqa: E402
from shared.embedded.postgres_server import RANDOM_PAGE_COST, _server_args  # noqa: E402


def _statement(role: str, query: str, calls: int, rows: int, ms: float) -> dict[str, object]:
    return {"role": role, "query": query, "calls": calls, "rows": rows, "ms": ms}


def test_statements_and_tables_are_divided_by_the_tasks_and_ranked_by_time() -> None:
    statements = [
        _statement("cardflow", "SELECT 1\n  FROM  t", calls=100, rows=100, ms=30.0),
        _statement("cardflow", "INSERT INTO t VALUES ($1)", calls=400, rows=400, ms=90.0),
    ]
    before = {"views.tasks": (10, 5, 0, 1, 2, 200), "audit.events": (0, 0, 0, 0, 0, 0)}
    after = {"views.tasks": (110, 505, 0, 101, 2, 200), "audit.events": (900, 0, 0, 0, 0, 0), "x.idle": (0,) * 6}

    result = _result(100, statements, before, after, (1_000, 3), (1_150, 3))  # type: ignore[arg-type]

    assert [(s.query, s.calls_per_task, s.ms_per_task, s.share) for s in result.statements] == [
        ("INSERT INTO t VALUES ($1)", 4.0, 0.9, 0.75),
        ("SELECT 1 FROM t", 1.0, 0.3, 0.25),
    ]
    assert result.commits_per_task == 1.5 and result.rollbacks_per_task == 0.0
    assert result.writes_per_task == {"audit.events": (9.0, 0.0, 0.0, 0.0, 0.0, 0.0),
                                      "views.tasks": (1.0, 5.0, 0.0, 1.0, 0.0, 0.0)}  # fmt: skip
    assert result.by_schema() == {"audit": (9.0, 0.0, 0.0), "views": (1.0, 5.0, 0.0)}
    assert pg_stats_json(result)["writes_per_schema"] == {"audit": [9.0, 0.0, 0.0], "views": [1.0, 5.0, 0.0]}


def test_the_server_takes_extra_settings_after_its_own() -> None:
    args = _server_args(Path("/data"), 5432, False, PG_STATS_SETTINGS)

    settings = [args[i + 1] for i, arg in enumerate(args) if arg == "-c"]
    assert f"random_page_cost={RANDOM_PAGE_COST}" in settings
    assert settings[-len(PG_STATS_SETTINGS):] == [f"{key}={value}" for key, value in PG_STATS_SETTINGS.items()]
    assert "shared_preload_libraries=pg_stat_statements" not in _server_args(Path("/data"), 5432, False)
