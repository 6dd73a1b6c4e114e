"""The JSON report's contract, the comparison table and the plot, on a small synthetic scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from shared.scheduling.policies import POLICIES
from shared.simulation.cardmodel import FlatCardModel
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.report import comparison_table, markdown_table, plot, write_json
from shared.simulation.runner import build_document, prepare_scenario, run_policies
from shared.simulation.workload import Trace, TraceTask

POLICY_KEYS = {"utilisation", "bound", "wait_s", "jct_s", "makespan_s", "cost", "preemptions",
               "lost_gpu_hours", "quota_cutoffs", "deferrals"}


@pytest.fixture(scope="module")
def run() -> tuple:
    tasks = tuple(TraceTask(f"t{i:03d}", i * 20.0, 1 + i % 4, 100.0 + 37 * (i % 7)) for i in range(60))
    scenario = prepare_scenario(Trace("tiny", tasks), FlatCardModel(), cluster=parse_cluster_spec("X:2x4"),
                                synthesize_seed=3, synthesize_quota=True)
    outcomes = run_policies(scenario, [POLICIES[name] for name in POLICIES])
    return scenario, outcomes, build_document(scenario, outcomes)


def test_json_has_exactly_the_documented_shape(run: tuple, tmp_path: Path) -> None:
    _, _, document = run
    path = tmp_path / "out.json"
    write_json(document, path)
    loaded = json.loads(path.read_text())
    assert {"trace", "cluster", "policies"} <= set(loaded)
    assert set(loaded["policies"]) == set(POLICIES)
    for result in loaded["policies"].values():
        assert POLICY_KEYS <= set(result)
        assert 0.0 <= result["utilisation"] <= result["bound"] + 1e-9 <= 1.0 + 1e-9
        assert set(result["jct_s"]) == {"mean", "p95"}
        for klass, stats in result["wait_s"].items():
            assert klass in {"core", "standard", "opportunistic"}
            assert {"mean", "p50", "p95", "p99"} <= set(stats)
            assert stats["p50"] <= stats["p95"] <= stats["p99"]
        assert all(isinstance(count, int) for count in result["deferrals"].values())
    assert loaded["synthesis"]["seed"] == 3
    assert loaded["scenario"]["quota_accounts"] == 1
    assert loaded["synthesis"]["class_mix"] == {"core": 0.2, "standard": 0.5, "opportunistic": 0.3}


def test_every_policy_completes_the_workload(run: tuple) -> None:
    scenario, outcomes, document = run
    for name, outcome in outcomes.items():
        assert document["policies"][name]["completed"] + outcome.unfinished == len(scenario.tasks)
        assert outcome.unfinished == 0, name


def test_table_has_one_column_per_policy(run: tuple) -> None:
    _, _, document = run
    table = comparison_table(document)
    assert [column.header for column in table.columns] == ["metric", *POLICIES]
    console = Console(width=200, record=True)
    console.print(table)
    assert "utilisation" in console.export_text()
    assert markdown_table(document).count("\n") == len(table.rows) + 1


def test_plot_is_written(run: tuple, tmp_path: Path) -> None:
    scenario, outcomes, _ = run
    path = tmp_path / "plot.png"
    plot(outcomes, scenario.cluster.capacity, path, title="tiny")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_worker_processes_give_the_same_results(run: tuple) -> None:
    scenario, outcomes, document = run
    parallel = run_policies(scenario, [POLICIES["cardflow"], POLICIES["fifo"]], jobs=2)
    again = build_document(scenario, parallel)
    assert again["policies"]["cardflow"] == document["policies"]["cardflow"]
    assert again["policies"]["fifo"] == document["policies"]["fifo"]
