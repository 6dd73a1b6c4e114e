"""bench/yield_tail.py: each standard lease preempted for core work is a yield (fillers apart), with its core task's
wait, and the victim's restart wait runs from its yield to its next grant."""

from __future__ import annotations

from shared.scheduling.model import (
    Grant,
    Placement,
    Plan,
    Preemption,
    PriorityClass,
    QueuedTask,
    RunningLease,
    Snapshot,
)
from tests.helpers.bench_scripts import load_bench_script

yield_tail = load_bench_script("yield_tail")


def _lease(lease_id: str, task_id: str, priority_class: PriorityClass, gpus: int,
           borrowed: bool = False) -> RunningLease:
    return RunningLease(lease_id, task_id, "p", priority_class, "n1", "H100", tuple(range(gpus)), 0.0, 9e9,
                        checkpoints_on_preempt=True, borrowed_headroom=borrowed)


def _core(task_id: str, gpus: int, submitted_at: float) -> QueuedTask:
    return QueuedTask(task_id, "p", PriorityClass.CORE, 0, gpus, submitted_at, ())


def test_a_yield_is_a_standard_victim_that_did_not_borrow_and_its_restart_wait_runs_to_its_next_grant() -> None:
    """At t=1,000 core task C (1 GPU, submitted at 400) takes a 4-GPU standard lease (a yield), a filler (counted
    apart) and an opportunistic lease (no yield); the standard task is granted again at t=4,000."""
    leases = (_lease("Ls", "S", PriorityClass.STANDARD, 4), _lease("Lf", "F", PriorityClass.STANDARD, 2, borrowed=True),
              _lease("Lo", "O", PriorityClass.OPPORTUNISTIC, 1))
    preempted = Plan(preemptions=tuple(Preemption(lease.lease_id, lease.task_id, "C", 0.01) for lease in leases))
    log = yield_tail.YieldLog()
    log.observe(Snapshot(nodes=(), leases=leases), [_core("C", 1, 400.0)], preempted, 1000.0)
    granted = Plan(grants=(Grant("S", "H100", (Placement("n1", (0, 1, 2, 3)),), 9e9),))
    log.observe(Snapshot(nodes=()), [], granted, 4000.0)
    log.close(5000.0)

    assert [(y.victim_task, y.victim_gpus, y.preemptor, y.preemptor_gpus, y.waited_s) for y in log.yields] == [
        ("S", 4, "C", 1, 600.0)]
    assert log.fillers == 1
    assert log.restart_wait_gpu_s == 4 * 3000.0
    assert log.unrestarted == 0


def test_a_victim_never_granted_again_waits_until_the_last_plan() -> None:
    leases = (_lease("Ls", "S", PriorityClass.STANDARD, 2),)
    log = yield_tail.YieldLog()
    log.observe(Snapshot(nodes=(), leases=leases), [_core("C", 2, 0.0)],
                Plan(preemptions=(Preemption("Ls", "S", "C", 0.0),)), 100.0)
    log.close(700.0)
    assert log.restart_wait_gpu_s == 2 * 600.0
    assert log.unrestarted == 1
