"""`bench/pipeline.py --pg-stats`: PostgreSQL's CPU by the process it served, from two snapshots."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.pipeline_pgcpu import ENDED, ServerCpu, cpu_by_client  # noqa: E402


def test_cpu_between_snapshots_is_summed_per_client_counting_new_processes_from_zero() -> None:
    before = ServerCpu({10: ("ledger", 5.0), 11: ("ledger", 1.0), 12: ("views", 2.0), 13: ("walwriter", 0.5)}, ended_s=3.0)
    after = ServerCpu({10: ("ledger", 6.5), 11: ("ledger", 1.25), 12: ("views", 2.0), 13: ("walwriter", 0.75),
                       20: ("autovacuum worker", 0.4)}, ended_s=3.5)  # fmt: skip

    assert cpu_by_client(before, after) == {"ledger": 1.75, ENDED: 0.5, "autovacuum worker": 0.4, "walwriter": 0.25}
