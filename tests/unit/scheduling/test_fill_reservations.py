"""Filling the drain: opportunistic work that checkpoints may run on GPUs the EASY reservation needs,
and yields them (preempted) once the reservation is due and the holder's grace is over."""

from __future__ import annotations

import pytest

from shared.scheduling.model import DeferralReason as R
from shared.scheduling.model import Preemption
from shared.scheduling.policies import POLICIES

from .builders import HOUR, NOW, a_lease, a_node, a_task, deferrals, grants, nodes_of, reason_of, run

# Node b has 2 free GPUs; its other 6 are leased until NOW + 1h. The head needs all 8.
B_BUSY_1H = [a_node("b").free(2)]
B_LEASE = [a_lease("Lb").on("b").gpus(0, 1, 2, 3, 4, 5).ends(NOW + HOUR)]


def head_task():
    """The head (standard, 8 GPUs, submitted long ago: its grace is over); a fresh builder each time."""
    return a_task("head").gpus(8).priority(9)


def plan_with(*tasks, head=None, nodes=B_BUSY_1H, leases=B_LEASE, **policy):
    policy.setdefault("headroom", 0.0)
    return run(nodes, [head or head_task(), *tasks], leases=leases, **policy)


def filler(task_id: str = "fill", gpus: int = 2):
    return a_task(task_id).opportunistic().gpus(gpus).runs(10 * HOUR).checkpoints()


def test_opportunistic_work_that_checkpoints_fills_the_gpus_the_reservation_waits_for():
    result = plan_with(filler())
    assert nodes_of(grants(result)["fill"]) == ["b"]
    assert result.reservations[0].start_at == NOW + HOUR  # unchanged: the filler yields then


def test_work_that_could_not_yield_cheaply_stays_behind_the_reservation():
    no_checkpoint = a_task("o").opportunistic().gpus(2).runs(10 * HOUR)
    standard = a_task("s").gpus(2).runs(10 * HOUR).checkpoints()
    for task in (no_checkpoint, standard):
        result = plan_with(task)
        assert not grants(result)
        assert reason_of(result, task.build().task_id) == R.BEHIND_RESERVATION
    # preempting it would cost 2 GPUs x 60 s of checkpoint write = 0.033 GPU-h, over this cap
    assert reason_of(plan_with(filler(), preempt_max_lost_gpu_hours=0.01), "fill") == R.BEHIND_RESERVATION


def test_policies_without_the_feature_keep_the_drain_for_the_reservation():
    assert reason_of(plan_with(filler(), fill_reservations=False), "fill") == R.BEHIND_RESERVATION
    baseline = POLICIES["easy-backfill"]
    assert not baseline.fill_reservations
    assert reason_of(plan_with(filler(), policy=baseline), "fill") == R.BEHIND_RESERVATION


# Node b: 6 GPUs free, 2 held by an opportunistic filler that checkpoints and would run 10 more hours.
B_FILLED = [a_node("b").free(6)]
FILLER_LEASE = (a_lease("Lf").on("b").gpus(0, 1).opportunistic().checkpoints_on_preempt()
                .started(NOW - 600).ends(NOW + 10 * HOUR))


def test_the_holder_preempts_the_fillers_once_its_reservation_is_due():
    result = plan_with(nodes=B_FILLED, leases=[FILLER_LEASE])
    assert result.preemptions == (Preemption("Lf", "run-Lf", "head", 2 * 60 / 3600),)
    assert reason_of(result, "head") == R.AWAITING_PREEMPTION
    assert not result.reservations


def test_a_holder_inside_its_grace_reserves_for_the_grace_end_and_asks_to_be_revisited():
    head = head_task().submitted(NOW - 60)  # the grace (600 s) ends in 540 s
    result = plan_with(head=head, nodes=B_FILLED, leases=[FILLER_LEASE])
    assert not result.preemptions
    assert result.reservations[0].start_at == NOW + 540
    assert result.revisit_at == NOW + 540
    assert deferrals(result)["head"].detail.endswith(
        "in about 9m, when its preemption grace ends and opportunistic work yields the GPUs")


@pytest.mark.parametrize("at_once", ["fillers", "checkpointing"])
def test_with_preempt_at_once_a_holder_inside_its_grace_reclaims_its_fillers_at_once(at_once):
    """The filler loses only its checkpoint write, now or when the grace ends: the holder (standard work
    here) need not wait for it."""
    head = head_task().submitted(NOW - 60)
    result = plan_with(head=head, nodes=B_FILLED, leases=[FILLER_LEASE], preempt_at_once=at_once)
    assert result.preemptions == (Preemption("Lf", "run-Lf", "head", 2 * 60 / 3600),)
    assert reason_of(result, "head") == R.AWAITING_PREEMPTION
    assert result.revisit_at is None


def test_with_preempt_at_once_fillers_still_fill_a_reservation_and_yield_when_it_is_due():
    result = plan_with(filler(), preempt_at_once="checkpointing")
    assert nodes_of(grants(result)["fill"]) == ["b"]
    assert result.reservations[0].start_at == NOW + HOUR


def test_no_filler_is_preempted_when_the_reservation_is_due_anyway():
    # Node a's standard lease is past its estimated end: it counts as ending now, a alone fits the head.
    nodes = [a_node("a").free(0), *B_FILLED]
    overdue = a_lease("La").on("a").gpus(*range(8)).ends(NOW - 60)
    result = plan_with(nodes=nodes, leases=[overdue, FILLER_LEASE])
    assert not result.preemptions
    assert (result.reservations[0].node_ids, result.reservations[0].start_at) == (("a",), NOW)


def test_an_opportunistic_holder_never_takes_gpus_back_from_other_opportunistic_work():
    head = head_task().opportunistic()
    result = plan_with(head=head, nodes=B_FILLED, leases=[FILLER_LEASE])
    assert not result.preemptions
    assert result.reservations[0].start_at == NOW + 10 * HOUR


def test_nothing_fills_an_opportunistic_tasks_reservation():
    """It could not take the GPUs back when due, so the usual backfill limits apply."""
    result = plan_with(filler(), head=head_task().opportunistic())
    assert reason_of(result, "fill") == R.BEHIND_RESERVATION
    assert result.reservations[0].start_at == NOW + HOUR


@pytest.mark.parametrize(("filler_submitted", "reclaimed"), [(-HOUR, False), (HOUR, True)])
def test_under_fifo_a_holder_counts_on_and_reclaims_only_fillers_submitted_after_it(filler_submitted, reclaimed):
    """A filler submitted before the holder would be ahead of it in the fifo queue once preempted and take its GPUs
    back: the holder neither preempts it nor counts on its GPUs before its estimated end (`cycle_preemption.ranks_ahead`)."""
    filler_lease = FILLER_LEASE.submitted(NOW - 2 * HOUR + filler_submitted)
    head = head_task().submitted(NOW - 2 * HOUR)
    result = plan_with(head=head, nodes=B_FILLED, leases=[filler_lease], order="fifo")
    if reclaimed:
        assert result.preemptions == (Preemption("Lf", "run-Lf", "head", 2 * 60 / 3600),)
    else:
        assert not result.preemptions
        assert result.reservations[0].start_at == NOW + 10 * HOUR
