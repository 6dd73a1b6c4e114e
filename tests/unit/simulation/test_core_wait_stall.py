"""bench/core_wait_stall.py: the core tail and what the fleet did while it waited (hand-computed runs)."""

from __future__ import annotations

from shared.scheduling.model import PriorityClass, Profile
from shared.scheduling.policies import POLICIES
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.engine import Simulation
from shared.simulation.workload import SimTask
from tests.helpers.bench_scripts import load_bench_script

stall_module = load_bench_script("core_wait_stall")

STANDARD, CORE = PriorityClass.STANDARD, PriorityClass.CORE


def task(task_id: str, submit: float, gpus: int, run: float, klass: PriorityClass) -> SimTask:
    return SimTask(task_id, submit, gpus, run, run, klass, 0, "p", (), None, 0.0, submit, None,
                   Profile.BALANCED, False)


def test_a_core_task_behind_a_full_fleet_waits_for_the_first_finish() -> None:
    """L holds the only GPU 0-1000; K (core, 10 s) arrives at 100 and waits 900 s: the one finish while
    it waits is L's, which lets it start."""
    trace = [task("L", 0, 1, 1000, STANDARD), task("K", 100, 1, 10, CORE)]
    outcome = Simulation(trace, parse_cluster_spec("X:1x1"), POLICIES["easy-backfill"]).run()
    assert stall_module.stall(outcome, 1) == stall_module.Stall(
        core_tasks=1, p95_wait_s=900.0, mean_wait_s=900.0, waiting_100h=0, task_id="K", submitted_s=100.0,
        started_s=1000.0, free_gpus_then=0, finishes_while_waiting=1, first_finish_after_s=900.0,
        # the submission window is 0-100 s: L's GPU busy all of it; no ready work waited inside it
        utilisation=1.0, busy_when_queued=0.0, preemptions=0, unfinished=0)


def test_a_free_gpu_serves_a_burst_of_short_core_tasks_one_after_another() -> None:
    """L holds one of two GPUs; K1..K3 (core, 10 s each) arrive at 100 and take turns on the other:
    waits 0, 10, 20; p95 19 -> the p95 task is K3 (the smallest wait at or above it), which starts at
    120 as K2 finishes, K1 having finished at 110."""
    trace = [task("L", 0, 1, 1000, STANDARD)] + [task(f"K{i}", 100, 1, 10, CORE) for i in (1, 2, 3)]
    outcome = Simulation(trace, parse_cluster_spec("X:1x2"), POLICIES["easy-backfill"]).run()
    result = stall_module.stall(outcome, 2)
    assert (result.p95_wait_s, result.task_id, result.submitted_s, result.started_s) == (19.0, "K3", 100.0, 120.0)
    assert (result.free_gpus_then, result.finishes_while_waiting, result.first_finish_after_s) == (1, 2, 10.0)


def test_the_table_has_a_column_per_policy() -> None:
    outcome = Simulation([task("K", 0, 1, 10, CORE)], parse_cluster_spec("X:1x1"), POLICIES["fifo"]).run()
    table = stall_module.stall_table({"fifo": stall_module.stall(outcome, 1), "none": None}, origin=0.0)
    assert [column.header for column in table.columns] == ["metric", "fifo", "none"]
    assert list(table.columns[2].cells) == ["-"] * table.row_count


def test_no_core_task_no_stall() -> None:
    outcome = Simulation([task("L", 0, 1, 10, STANDARD)], parse_cluster_spec("X:1x1"), POLICIES["fifo"]).run()
    assert stall_module.stall(outcome, 1) is None
