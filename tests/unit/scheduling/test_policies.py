"""The policy presets behave like the schedulers they stand for."""

from __future__ import annotations

import pytest

from shared.scheduling.model import DeferralReason as R
from shared.scheduling.policies import NO_HEAVY_LIMIT, POLICIES, get_policy

from .builders import HOUR, NOW, a_lease, a_node, a_task, grants, reason_of, run

# 4 free GPUs now; 4 more at NOW + 1h, 8 more at NOW + 2h.
NODES = [a_node("a").free(4), a_node("b").free(0)]
LEASES = [a_lease("La").on("a").gpus(0, 1, 2, 3).ends(NOW + HOUR),
          a_lease("Lb").on("b").gpus(*range(8)).ends(NOW + 2 * HOUR)]
QUEUE = [
    a_task("big-early").gpus(8).submitted(0).priority(0),  # does not fit now
    a_task("small-late").gpus(1).submitted(10).priority(0).runs(HOUR / 2),  # fits, ends before 1h
    a_task("core-last").core().gpus(1).submitted(20).priority(0).runs(HOUR / 2),
    a_task("unready").gpus(1).submitted(30).priority(5).not_ready().runs(HOUR / 2),
]


def plan_with(name: str):
    return run(NODES, QUEUE, leases=LEASES, policy=POLICIES[name])


def test_presets_exist_with_their_names():
    assert set(POLICIES) == {"cardflow", "fifo", "priority", "easy-backfill"}
    assert all(policy.name == name for name, policy in POLICIES.items())
    with pytest.raises(KeyError, match="known: cardflow"):
        get_policy("slurm")


def test_baselines_are_readiness_blind_without_headroom_preemption_or_spreading():
    for name in ("fifo", "priority", "easy-backfill"):
        policy = POLICIES[name]
        assert not policy.readiness_gate and not policy.preemption and not policy.quota_expiry_gate
        assert policy.headroom == 0.0 and policy.max_heavy_per_node == NO_HEAVY_LIMIT


def test_fifo_blocks_everything_behind_the_earliest_task():
    result = plan_with("fifo")
    assert not result.grants and not result.reservations
    assert reason_of(result, "big-early") == R.NO_CAPACITY
    assert {reason_of(result, t) for t in ("small-late", "core-last", "unready")} == {R.HEAD_OF_LINE}


def test_priority_runs_strict_class_and_priority_order_then_blocks():
    result = plan_with("priority")
    assert list(grants(result)) == ["core-last", "unready"]  # core first; priority 5 before 0; data ignored
    assert reason_of(result, "big-early") == R.NO_CAPACITY
    assert reason_of(result, "small-late") == R.HEAD_OF_LINE


def test_easy_backfill_reserves_for_the_head_and_backfills_what_ends_before():
    result = plan_with("easy-backfill")
    assert [(r.task_id, r.start_at) for r in result.reservations] == [("big-early", NOW + HOUR)]
    assert set(grants(result)) == {"core-last", "unready", "small-late"}


def test_cardflow_gates_on_readiness_and_backfills():
    result = plan_with("cardflow")
    assert reason_of(result, "unready") == R.DATA_NOT_READY
    # Standard work keeps 2 of the 16 GPUs free (headroom 10%): at 1h, 8 free would leave none.
    assert [(r.task_id, r.start_at) for r in result.reservations] == [("big-early", NOW + 2 * HOUR)]
    assert set(grants(result)) == {"core-last", "small-late"}
