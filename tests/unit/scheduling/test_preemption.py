"""Preemption: core work takes GPUs back from opportunistic leases — the cheapest ones, and only those."""

from __future__ import annotations

import pytest

from shared.scheduling.model import DeferralReason as R
from shared.scheduling.model import Preemption

from .builders import HOUR, NOW, a_lease, a_node, a_task, deferrals, grants, reason_of, run

FULL = [a_node("a").free(0)]


def opp(lease_id: str, *gpus: int, started: float, checkpoint: float | None = None, node: str = "a"):
    lease = a_lease(lease_id).on(node).gpus(*gpus).opportunistic().started(started)
    return lease.checkpointed(checkpoint) if checkpoint is not None else lease


def test_core_task_preempts_the_victim_losing_the_fewest_gpu_hours():
    leases = [opp("old-ckpt", 0, 1, 2, 3, started=NOW - 3 * HOUR, checkpoint=NOW - HOUR),  # loses 4 GPU-h
              opp("young", 4, 5, 6, 7, started=NOW - 2 * HOUR)]  # no checkpoint: loses 8 GPU-h
    result = run(FULL, [a_task("c").core().gpus(4)], leases=leases)
    assert result.preemptions == (Preemption("old-ckpt", "run-old-ckpt", "c", pytest.approx(4.0)),)
    assert not result.grants  # never grant and preempt in the same plan
    assert reason_of(result, "c") == R.AWAITING_PREEMPTION
    assert deferrals(result)["c"].detail.startswith("preempting 1 opportunistic lease to free 4 GPUs of H100 on a")


def test_equal_loss_prefers_the_most_recently_started_victim():
    leases = [opp("earlier", 0, 1, 2, 3, started=NOW - 2 * HOUR, checkpoint=NOW - HOUR),
              opp("later", 4, 5, 6, 7, started=NOW - HOUR)]
    result = run(FULL, [a_task("c").core().gpus(4)], leases=leases)
    assert [p.lease_id for p in result.preemptions] == ["later"]


def test_as_many_victims_as_needed_are_preempted():
    leases = [opp(f"o{i}", 2 * i, 2 * i + 1, started=NOW - (i + 1) * HOUR) for i in range(4)]
    result = run(FULL, [a_task("c").core().gpus(5)], leases=leases)
    assert [p.lease_id for p in result.preemptions] == ["o0", "o1", "o2"]


def test_the_node_where_preemption_costs_least_is_chosen():
    nodes = [a_node("a").free(0), a_node("b").free(0)]
    leases = [opp("on-a", *range(8), started=NOW - 5 * HOUR, node="a"),
              opp("on-b", *range(8), started=NOW - HOUR, node="b")]
    result = run(nodes, [a_task("c").core().gpus(8)], leases=leases)
    assert [p.lease_id for p in result.preemptions] == ["on-b"]


def test_core_and_standard_leases_are_never_preempted():
    leases = [a_lease("std").on("a").gpus(*range(4)).started(NOW - HOUR),
              a_lease("core").on("a").gpus(*range(4, 8)).core().started(NOW - HOUR)]
    result = run(FULL, [a_task("c").core().gpus(4)], leases=leases)
    assert not result.preemptions
    assert reason_of(result, "c") == R.RESERVED


def test_no_preemption_unless_it_makes_the_task_fit():
    leases = [opp("o", 0, 1, started=NOW - HOUR), a_lease("std").on("a").gpus(*range(2, 8))]
    result = run(FULL, [a_task("c").core().gpus(4)], leases=leases)
    assert not result.preemptions


def test_only_core_tasks_preempt_and_only_when_the_policy_allows():
    leases = [opp("o", *range(8), started=NOW - HOUR)]
    assert not run(FULL, [a_task("s").standard().gpus(4)], leases=leases).preemptions
    assert not run(FULL, [a_task("c").core().gpus(4)], leases=leases, preemption=False).preemptions


def test_free_gpus_the_preempting_task_needs_are_not_given_away():
    nodes = [a_node("a").free(2)]  # GPUs 6, 7 free
    leases = [opp("o", 0, 1, started=NOW - HOUR), a_lease("std").on("a").gpus(2, 3, 4, 5)]
    result = run(nodes, [a_task("c").core().gpus(4), a_task("o-task").opportunistic()], leases=leases)
    assert [p.lease_id for p in result.preemptions] == ["o"]
    assert "o-task" not in grants(result)


def test_a_victim_is_preempted_for_one_task_only():
    leases = [opp("o", *range(8), started=NOW - HOUR)]
    result = run(FULL, [a_task("c1").core().gpus(4).submitted(0), a_task("c2").core().gpus(4).submitted(1)],
                 leases=leases)
    assert [p.for_task_id for p in result.preemptions] == ["c1"]
    assert reason_of(result, "c1") == R.AWAITING_PREEMPTION
    assert reason_of(result, "c2") != R.AWAITING_PREEMPTION


def test_a_spanning_core_task_preempts_across_nodes():
    nodes = [a_node("a").free(4), a_node("b").free(0)]
    leases = [opp("cheap", *range(4), started=NOW - 0.5 * HOUR, node="a"),
              opp("dear", *range(8), started=NOW - 3 * HOUR, node="b")]
    result = run(nodes, [a_task("c").core().gpus(12)], leases=leases)
    assert sorted(p.lease_id for p in result.preemptions) == ["cheap", "dear"]
    assert reason_of(result, "c") == R.AWAITING_PREEMPTION
