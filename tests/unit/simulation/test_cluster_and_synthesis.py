"""Cluster specs/CSVs, load-based sizing, and deterministic synthesis of open trace fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.scheduling.model import PriorityClass
from shared.simulation.cluster import load_cluster, parse_cluster_spec, size_for_load
from shared.simulation.synthesize import SynthesisParams, synthesize
from shared.simulation.workload import Trace, TraceTask


def test_spec_lists_node_groups() -> None:
    cluster = parse_cluster_spec("H100:16x8, A100-80G:8x4")
    assert cluster.capacity == 16 * 8 + 8 * 4
    assert cluster.gpus_by_card() == {"A100-80G": 32, "H100": 128}
    assert len({node.node_id for node in cluster.nodes}) == 24


@pytest.mark.parametrize("bad", ["H100", "H100:16", "H100:x8", "H100:2x8,,A10:1x1"])
def test_bad_specs_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_cluster_spec(bad)


def test_cluster_csv(tmp_path: Path) -> None:
    path = tmp_path / "fleet.csv"
    path.write_text("node_id,card_type,gpus\nn1,H100,8\nn2,L40S,4\n")
    cluster = load_cluster(str(path))
    assert [(n.node_id, n.card_type, n.gpus) for n in cluster.nodes] == [("n1", "H100", 8), ("n2", "L40S", 4)]
    path.write_text("node_id,card_type,gpus\nn1,H100,8\nn1,L40S,4\n")
    with pytest.raises(ValueError, match="repeats"):
        load_cluster(str(path))


def test_sizing_picks_the_node_count_closest_to_the_target_load() -> None:
    cluster = size_for_load(demand_gpu_s=100 * 3600, window_s=3600, card="V100", gpus_per_node=8)
    assert cluster.capacity == 104  # 100 GPUs of demand / 8 = 12.5 -> 13 nodes
    assert "96%" in cluster.description
    assert size_for_load(demand_gpu_s=97 * 3600, window_s=3600, card="V100").capacity == 96  # 12.1 -> 12
    assert size_for_load(demand_gpu_s=3600, window_s=3600, card="V100", min_nodes=3).capacity == 24


def _trace(n: int) -> Trace:
    return Trace("t", tuple(TraceTask(f"t{i}", float(i), 1, 1000.0) for i in range(n)))


def test_synthesis_is_seeded_and_independent_of_order() -> None:
    trace = _trace(400)
    once, again = synthesize(trace, seed=7), synthesize(trace, seed=7)
    reversed_ = synthesize(trace.with_tasks(reversed(trace.tasks)), seed=7)
    assert once.tasks == again.tasks
    assert {t.task_id: t for t in once.tasks} == {t.task_id: t for t in reversed_.tasks}
    assert synthesize(trace, seed=8).tasks != once.tasks


def test_synthesis_fills_only_open_fields_with_the_documented_mix() -> None:
    params = SynthesisParams()
    tasks = synthesize(_trace(2000), seed=1, params=params).tasks
    share = {c: sum(t.priority_class is c for t in tasks) / len(tasks) for c in PriorityClass}
    assert share[PriorityClass.CORE] == pytest.approx(0.2, abs=0.04)
    assert share[PriorityClass.OPPORTUNISTIC] == pytest.approx(0.3, abs=0.04)
    over = sum(t.estimate_s > t.duration_s for t in tasks) / len(tasks)
    assert 0.8 < over < 0.95  # users mostly over-estimate
    delayed = sum(t.ready_s > t.submit_s for t in tasks) / len(tasks)
    assert delayed == pytest.approx(params.ready_share, abs=0.04)
    fixed = TraceTask("x", 0.0, 1, 10.0, estimate_s=99.0, priority_class=PriorityClass.CORE, ready_s=5.0)
    (kept,) = synthesize(Trace("t", (fixed,)), seed=1).tasks
    assert (kept.estimate_s, kept.priority_class, kept.ready_s) == (99.0, PriorityClass.CORE, 5.0)
