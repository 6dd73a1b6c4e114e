"""bench/grid_miss_causes.py: a tail core task's wait split by who held the GPUs it got, and the preemption price."""

from __future__ import annotations

import pytest
from tests.helpers.bench_scripts import load_bench_script

causes = load_bench_script("grid_miss_causes")

Holder, Hold, CoreStart = causes.Holder, causes.Hold, causes.CoreStart


def test_the_wait_is_split_by_holder_and_idle_on_the_gpus_the_task_got() -> None:
    """K (core, 2 GPUs) submitted at 0, data ready at 100, starts at 1,100 on GPUs a0, a1. Meanwhile a0 is held by a
    standard task (work began at -3,500) until 600, then idle; a1 by an opportunistic task that checkpoints until 1,100."""
    start = CoreStart("K", 2, submitted=0.0, ready=100.0, started=1100.0, placed_on=(("a", 0), ("a", 1)))
    holds = {("a", 0): [Hold("S", Holder.STANDARD, 4, -3600.0, -3500.0, 600.0)],
             ("a", 1): [Hold("O", Holder.OPPORTUNISTIC_CHECKPOINTING, 1, 0.0, 0.0, 1100.0),
                        Hold("old", Holder.CORE, 1, -500.0, -500.0, 0.0)]}  # ended before: not counted

    wait = causes.decompose(start, holds)

    assert wait.data_s == 100.0 and wait.scheduler_s == 1000.0
    assert wait.gpu_s_by_holder == {Holder.STANDARD: 500.0, Holder.IDLE: 500.0, Holder.OPPORTUNISTIC_CHECKPOINTING: 1000.0}
    # preempting at 100: S (4 GPUs, ran 3,600 s) loses 4 GPU-h; O (ran 100 s, checkpoints) its 60 s write
    assert wait.loss_at_ready_gpu_h == pytest.approx({Holder.STANDARD: 4.0, Holder.OPPORTUNISTIC_CHECKPOINTING: 60 / 3600})


def test_core_holders_cost_nothing_to_preempt_because_they_are_never_victims() -> None:
    hold = Hold("C", Holder.CORE, 8, 0.0, 0.0, 10_000.0)
    assert causes.preemption_loss_gpu_h(hold, 5000.0) == 0.0


def test_the_tail_is_the_core_tasks_at_or_above_the_pooled_p95_that_waited() -> None:
    starts = {f"t{i}": CoreStart(f"t{i}", 1, 0.0, 0.0, float(i), (("n", 0),)) for i in range(20)}
    run = causes.ArmRun(capacity_gpu_s=1.0, useful_gpu_s=1.0, capacity=1, workload="w", core_load=0.5, preemptions=0,
                        lost_gpu_h=0.0, core_waits={t: s.started for t, s in starts.items()}, core_starts=starts,
                        holds_by_gpu={})

    p95, tail = causes.tail([run])

    assert p95 == pytest.approx(18.05)
    assert [wait.scheduler_s for _, wait in tail] == [19.0]


def test_a_one_gpu_task_is_priced_by_the_cheapest_non_core_lease_anywhere_and_a_shared_blocker_counts_once() -> None:
    """Two 1-GPU tail tasks wait on GPU a0, held by S (standard, 2 GPUs, work from 0); elsewhere O (opportunistic,
    1 GPU, work from 1,800) and C (core) run. Preempting S at 3,600 (the first task's ready time) loses 2 GPU-h,
    counted once; the cheapest lease anywhere is O: 0.5 GPU-h at 3,600, 1 GPU-h at 5,400."""
    s = Hold("S", Holder.STANDARD, 2, 0.0, 0.0, 9000.0)
    o = Hold("O", Holder.OPPORTUNISTIC, 1, 1800.0, 1800.0, 9000.0)
    c = Hold("C", Holder.CORE, 1, 0.0, 0.0, 9000.0)
    holds = {("a", 0): [s], ("a", 1): [s], ("b", 0): [o], ("b", 1): [c]}
    first = CoreStart("K1", 1, 3600.0, 3600.0, 9000.0, (("a", 0),))
    second = CoreStart("K2", 1, 5400.0, 5400.0, 9000.0, (("a", 1),))
    leases = causes.one_hold_per_lease(holds)

    run = object()
    tagged = [(run, causes.decompose(first, holds, leases)), (run, causes.decompose(second, holds, leases))]
    cost = causes.price(tagged)

    assert len(leases) == 3
    assert cost.blockers_gpu_h == pytest.approx(2.0)
    assert cost.cheapest_gpu_h == pytest.approx(0.5 + 1.0) and cost.one_gpu_tasks == 2
    assert cost.own_wait_gpu_h == pytest.approx((5400 + 3600) / 3600)
