"""Headroom: standard work never takes the share kept free for core work; core and opportunistic may."""

from __future__ import annotations

import pytest

from shared.scheduling.headroom import headroom_gpus
from shared.scheduling.model import DeferralReason as R
from shared.scheduling.model import Policy

from .builders import IMMEDIATE_PREEMPTION, a_lease, a_node, a_task, deferrals, grants, reason_of, run

TWO_NODES = [a_node("a").free(8), a_node("b").free(8)]  # 16 H100 GPUs, all free


@pytest.mark.parametrize(
    ("share", "total", "expected"),
    [(0.1, 16, 1), (0.1, 80, 8), (0.25, 16, 4), (0.0, 16, 0), (1.0, 16, 16), (0.1, 8, 0), (0.7, 10, 7), (0.15, 20, 3)],
)
def test_headroom_is_the_floor_of_share_times_total(share, total, expected):
    assert headroom_gpus(Policy(headroom=share), "H100", total) == expected


def test_mapping_headroom_applies_per_card_type():
    policy = Policy(headroom={"H100": 0.5})
    assert headroom_gpus(policy, "H100", 16) == 8
    assert headroom_gpus(policy, "A10", 16) == 0


def test_standard_work_stops_at_the_headroom():
    tasks = [a_task(f"s{i}").gpus(4).submitted(i) for i in range(5)]
    result = run(TWO_NODES, tasks, headroom=0.25)  # 4 of 16 kept free
    assert set(grants(result)) == {"s0", "s1", "s2"}
    assert reason_of(result, "s3") == R.RESERVED  # the first blocked task waits for the grants to end
    assert reason_of(result, "s4") == R.HEADROOM
    assert deferrals(result)["s4"].detail == "needs 4 GPUs of H100; 0 free after headroom (25% kept for core work)"


def test_standard_work_may_take_up_to_the_headroom_exactly():
    result = run(TWO_NODES, [a_task("s").gpus(8), a_task("t").gpus(6).submitted(1)], headroom=0.125)
    assert set(grants(result)) == {"s", "t"}  # 16 - 14 = 2 = headroom


def test_core_work_uses_the_headroom_at_once():
    filled_to_headroom = [a_node("a").free(0), a_node("b").free(4)]  # 4 of 16 free = the headroom
    assert reason_of(run(filled_to_headroom, [a_task("s").gpus(4)], headroom=0.25), "s") == R.HEADROOM
    assert "c" in grants(run(filled_to_headroom, [a_task("c").core().gpus(4)], headroom=0.25))


def test_opportunistic_work_may_borrow_the_headroom():
    tasks = [a_task("s").gpus(8), a_task("s2").gpus(4).submitted(1), a_task("o").opportunistic().gpus(4)]
    result = run(TWO_NODES, tasks, headroom=0.25)
    assert set(grants(result)) == {"s", "s2", "o"}


def test_headroom_is_per_card_type():
    nodes = [a_node("h").card("H100"), a_node("a").card("A10")]
    tasks = [a_task("s").gpus(8).on("H100", "A10")]
    result = run(nodes, tasks, headroom={"H100": 0.5})
    assert grants(result)["s"].card_type == "A10"


def test_a_task_larger_than_the_free_gpus_is_blocked_by_capacity_not_headroom():
    result = run([a_node("a").free(2)], [a_task("s").gpus(4)], headroom=0.1)
    assert reason_of(result, "s") == R.NO_CAPACITY


def test_a_small_pool_keeps_no_headroom_so_a_full_node_standard_task_can_start():
    result = run([a_node("a").free(8)], [a_task("s").gpus(8)], headroom=0.1)  # 0.8 GPU -> none kept
    assert set(grants(result)) == {"s"}


# -- GPUs held by opportunistic work count as headroom (it may borrow it, and is preempted first) ----

def _half_busy_fleet(opportunistic_gpus: int):
    """16 H100 GPUs, headroom 4 at 25%: node a has 4 free GPUs, its GPUs 0-3 are leased (the first
    `opportunistic_gpus` of them to opportunistic work, the rest to standard work); b is full."""
    busy = range(4)
    leases = [a_lease(f"L{i}").on("a").gpus(i) for i in busy]
    leases = [lease.opportunistic() if i < opportunistic_gpus else lease for i, lease in enumerate(leases)]
    leases.append(a_lease("Lb").on("b").gpus(*range(8)))
    return [a_node("a").free(4), a_node("b").free(0)], leases


HEAD = a_task("head").gpus(8).priority(9)  # blocked: holds the reservation, so others say why they wait


@pytest.mark.parametrize(
    ("opportunistic_gpus", "task_gpus", "started"),
    [
        (4, 4, True),   # 0 free + 4 borrowed afterwards: the headroom is covered
        (0, 4, False),  # 0 free, nothing borrowed
        (2, 4, False),  # 0 free + 2 borrowed < 4
        (2, 2, True),   # 2 free + 2 borrowed = 4
        (0, 2, False),  # 2 free < 4
    ],
)
def test_gpus_borrowed_by_opportunistic_work_count_as_headroom_for_standard_work(opportunistic_gpus, task_gpus, started):
    nodes, leases = _half_busy_fleet(opportunistic_gpus)
    result = run(nodes, [HEAD, a_task("s").gpus(task_gpus)], leases=leases, headroom=0.25)
    assert ("s" in grants(result)) == started
    if started:  # it takes only free GPUs, never borrowed ones
        assert set(grants(result)["s"].placements[0].gpu_indices) <= {4, 5, 6, 7}
    else:
        assert reason_of(result, "s") == R.HEADROOM


def test_the_headroom_sentence_counts_borrowed_gpus():
    nodes, leases = _half_busy_fleet(opportunistic_gpus=2)
    result = run(nodes, [HEAD, a_task("s").gpus(4)], leases=leases, headroom=0.25)
    assert deferrals(result)["s"].detail == "needs 4 GPUs of H100; 2 free after headroom (25% kept for core work)"


def test_opportunistic_grants_of_the_same_cycle_count_as_borrowed_headroom():
    nodes = [a_node("a").free(8), a_node("b").free(0)]
    tasks = [a_task("o").opportunistic().gpus(4).submitted(0), a_task("s").gpus(4).submitted(1)]
    result = run(nodes, tasks, leases=[a_lease("Lb").on("b").gpus(*range(8))], headroom=0.25, order="fifo")
    assert set(grants(result)) == {"o", "s"}  # s leaves 0 free, but o's 4 GPUs cover the headroom


@pytest.mark.parametrize(("core_task_waits", "started"), [(False, True), (True, False)])
def test_opportunistic_leases_preempted_in_the_same_cycle_no_longer_count_as_headroom(core_task_waits, started):
    nodes = [a_node("a").free(0), a_node("b").free(4)]
    leases = [a_lease("La").on("a").gpus(*range(8)).opportunistic(), a_lease("Lb").on("b").gpus(0, 1, 2, 3)]
    core = [a_task("c").core().gpus(8)] if core_task_waits else []
    result = run(nodes, [*core, a_task("s").gpus(4)], leases=leases, headroom=0.25, **IMMEDIATE_PREEMPTION)
    assert [p.lease_id for p in result.preemptions] == (["La"] if core_task_waits else [])
    assert ("s" in grants(result)) == started
