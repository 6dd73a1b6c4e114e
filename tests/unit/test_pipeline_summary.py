"""`bench/pipeline.py --json`: the numbers per offered rate, hand-computed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.pipeline_report import Percentiles, PhaseResult, RawResult, summary  # noqa: E402


def test_one_entry_per_rate_with_cpu_per_task_summed_over_processes() -> None:
    phase = PhaseResult(
        project="bench-1", offered_rate=500.0, sent=1000, done=800, send_rate=500.0, wall_s=4.0, throughput=200.04,
        steady_throughput=180.0, submit_to_lease=Percentiles(0.0123, 0.25, 0.3, 800), stages=[],
        cpu={"postgres": 0.8, "dispatcher": 0.4}, cpu_window_s=4.0, mean_gpus_leased=10.0,
    )
    raw = RawResult(messages=1000, throughput=30123.4, round_trip=Percentiles(0.0003, 0.0007, 0.001, 2000))
    result = summary(raw, [phase], {"machine": "m", "load": "l", "fleet": "f"})
    assert result["raw_redis_msgs_per_s"] == 30123
    (rate,) = result["rates"]
    assert {k: rate[k] for k in ("offered", "throughput", "steady", "p50_ms", "p99_ms", "cpu_ms_per_task")} == {
        "offered": 500.0, "throughput": 200.0, "steady": 180.0, "p50_ms": 12.3, "p99_ms": 250.0, "cpu_ms_per_task": 1.5}
    assert rate["cpu_ms_per_task_by_process"] == {"postgres": 1.0, "dispatcher": 0.5}
    assert json.loads(json.dumps(result)) == result


def test_a_profile_is_split_by_kind_of_code_with_the_event_loop_apart(tmp_path: Path) -> None:
    import cProfile

    from bench.profile_shares import kind_of, profile_report, shares
    from shared.events import canonical_json
    from tests.helpers.task_events import TaskStory

    assert kind_of("/usr/lib/python3.11/asyncio/runners.py", "run") == "event loop (and idle)"
    assert kind_of("~", "<method 'validate_json' of 'pydantic_core._pydantic_core.SchemaValidator' objects>") == "pydantic"
    assert kind_of("/repo/shared/events/parsing.py", "_parse") == "cardflow"
    assert kind_of("/repo/shared/events/envelope.py", "canonical_json") == "json"  # its C encoder's time
    assert kind_of("/venv/site-packages/asyncpg/connection.py", "execute") == "asyncpg"
    event = TaskStory("T1").submitted()
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [canonical_json(event) for _ in range(200)])
    path = tmp_path / "p.pstats"
    profiler.dump_stats(path)
    loop, busy, by_kind = shares(path)
    assert loop == 0.0 and busy == sum(by_kind.values()) > 0
    assert {"cardflow", "json", "pydantic"} <= set(by_kind)
    assert profile_report({"test": path}).startswith("== test: ")
