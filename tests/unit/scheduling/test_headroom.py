"""Headroom: standard work never takes the share kept free for core work; core and opportunistic may."""

from __future__ import annotations

import pytest

from dataclasses import replace

from shared.scheduling.headroom import headroom_gpus
from shared.scheduling.model import DeferralReason as R
from shared.scheduling.model import Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordered_queue import OrderedQueue
from shared.scheduling.plan import plan

from .builders import HOUR, IMMEDIATE_PREEMPTION, NOW, a_lease, a_node, a_task, deferrals, grants, reason_of, run

TWO_NODES = [a_node("a").free(8), a_node("b").free(8)]  # 16 H100 GPUs, all free
FIXED = dict(headroom_tracks_core=False)  # the share alone, whatever core work there is (mechanics tests)


@pytest.mark.parametrize(
    ("share", "total", "expected"),
    [(0.1, 16, 1), (0.1, 80, 8), (0.25, 16, 4), (0.0, 16, 0), (1.0, 16, 16), (0.1, 8, 0), (0.7, 10, 7), (0.15, 20, 3)],
)
def test_headroom_is_the_floor_of_share_times_total(share, total, expected):
    assert headroom_gpus(Policy(headroom=share), "H100", total) == expected


def test_mapping_headroom_applies_per_card_type():
    policy = Policy(headroom={"H100": 0.5}, **FIXED)
    assert headroom_gpus(policy, "H100", 16) == 8
    assert headroom_gpus(policy, "A10", 16) == 0


def test_standard_work_stops_at_the_headroom():
    tasks = [a_task(f"s{i}").gpus(4).submitted(i) for i in range(5)]
    result = run(TWO_NODES, tasks, headroom=0.25, **FIXED)  # 4 of 16 kept free
    assert set(grants(result)) == {"s0", "s1", "s2"}
    assert reason_of(result, "s3") == R.RESERVED  # the first blocked task waits for the grants to end
    assert reason_of(result, "s4") == R.HEADROOM
    assert deferrals(result)["s4"].detail == "needs 4 GPUs of H100; 0 free after headroom (4 GPUs kept for core work)"


def test_standard_work_may_take_up_to_the_headroom_exactly():
    result = run(TWO_NODES, [a_task("s").gpus(8), a_task("t").gpus(6).submitted(1)], headroom=0.125, **FIXED)
    assert set(grants(result)) == {"s", "t"}  # 16 - 14 = 2 = headroom


def test_core_work_uses_the_headroom_at_once():
    filled_to_headroom = [a_node("a").free(0), a_node("b").free(4)]  # 4 of 16 free = the headroom
    assert reason_of(run(filled_to_headroom, [a_task("s").gpus(4)], headroom=0.25, **FIXED), "s") == R.HEADROOM
    assert "c" in grants(run(filled_to_headroom, [a_task("c").core().gpus(4)], headroom=0.25, **FIXED))


def test_opportunistic_work_may_borrow_the_headroom():
    tasks = [a_task("s").gpus(8), a_task("s2").gpus(4).submitted(1), a_task("o").opportunistic().gpus(4)]
    result = run(TWO_NODES, tasks, headroom=0.25, **FIXED)
    assert set(grants(result)) == {"s", "s2", "o"}


def test_headroom_is_per_card_type():
    nodes = [a_node("h").card("H100"), a_node("a").card("A10")]
    tasks = [a_task("s").gpus(8).on("H100", "A10")]
    result = run(nodes, tasks, headroom={"H100": 0.5}, **FIXED)
    assert grants(result)["s"].card_type == "A10"


def test_a_task_larger_than_the_free_gpus_is_blocked_by_capacity_not_headroom():
    result = run([a_node("a").free(2)], [a_task("s").gpus(4)], headroom=0.1, **FIXED)
    assert reason_of(result, "s") == R.NO_CAPACITY


def test_a_small_pool_keeps_no_headroom_so_a_full_node_standard_task_can_start():
    result = run([a_node("a").free(8)], [a_task("s").gpus(8)], headroom=0.1, **FIXED)  # 0.8 GPU -> none kept
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
    result = run(nodes, [HEAD, a_task("s").gpus(task_gpus)], leases=leases, headroom=0.25, **FIXED)
    assert ("s" in grants(result)) == started
    if started:  # it takes only free GPUs, never borrowed ones
        assert set(grants(result)["s"].placements[0].gpu_indices) <= {4, 5, 6, 7}
    else:
        assert reason_of(result, "s") == R.HEADROOM


def test_the_headroom_sentence_counts_borrowed_gpus():
    nodes, leases = _half_busy_fleet(opportunistic_gpus=2)
    result = run(nodes, [HEAD, a_task("s").gpus(4)], leases=leases, headroom=0.25, **FIXED)
    assert deferrals(result)["s"].detail == "needs 4 GPUs of H100; 2 free after headroom (4 GPUs kept for core work)"


def test_opportunistic_grants_of_the_same_cycle_count_as_borrowed_headroom():
    nodes = [a_node("a").free(8), a_node("b").free(0)]
    tasks = [a_task("o").opportunistic().gpus(4).submitted(0), a_task("s").gpus(4).submitted(1)]
    result = run(nodes, tasks, leases=[a_lease("Lb").on("b").gpus(*range(8))], headroom=0.25, order="fifo", **FIXED)
    assert set(grants(result)) == {"o", "s"}  # s leaves 0 free, but o's 4 GPUs cover the headroom


@pytest.mark.parametrize(("core_task_waits", "started"), [(False, True), (True, False)])
def test_opportunistic_leases_preempted_in_the_same_cycle_no_longer_count_as_headroom(core_task_waits, started):
    nodes = [a_node("a").free(0), a_node("b").free(4)]
    leases = [a_lease("La").on("a").gpus(*range(8)).opportunistic(), a_lease("Lb").on("b").gpus(0, 1, 2, 3)]
    core = [a_task("c").core().gpus(8)] if core_task_waits else []
    result = run(nodes, [*core, a_task("s").gpus(4)], leases=leases, headroom=0.25, **FIXED, **IMMEDIATE_PREEMPTION)
    assert [p.lease_id for p in result.preemptions] == (["La"] if core_task_waits else [])
    assert ("s" in grants(result)) == started


# -- The headroom follows core demand (cardflow): no core work, no headroom --------------------------

def test_without_core_work_the_headroom_costs_nothing():
    tasks = [a_task(f"s{i}").gpus(4).submitted(i) for i in range(4)]
    assert set(grants(run(TWO_NODES, tasks, headroom=0.25))) == {"s0", "s1", "s2", "s3"}


@pytest.mark.parametrize(("core_gpus", "kept"), [(0, 0), (1, 1), (2, 2), (6, 6), (8, 6)])
def test_the_headroom_is_at_most_what_core_work_holds_or_waits_for(core_gpus, kept):
    """24 H100 GPUs at 25% = 6 at most; core work holds `core_gpus` of node c; 1-GPU standard tasks
    take every free GPU but the `kept` ones."""
    nodes = [*TWO_NODES, a_node("c").free(8 - core_gpus)]
    leases = [a_lease("Lc").on("c").gpus(*range(8 - core_gpus, 8)).core()] if core_gpus else []
    tasks = [a_task(f"s{i:02d}").gpus(1).submitted(i) for i in range(24)]
    result = run(nodes, tasks, leases=leases, headroom=0.25, order="fifo")
    assert len(grants(result)) == 24 - core_gpus - kept


def test_core_work_on_another_card_type_keeps_no_headroom():
    nodes = [*TWO_NODES, a_node("x").card("A10").free(0)]
    leases = [a_lease("Lx").on("x").gpus(*range(8)).core()]
    tasks = [a_task(f"s{i}").gpus(4).submitted(i) for i in range(4)]
    assert len(grants(run(nodes, tasks, leases=leases, headroom=0.25))) == 4


def test_a_queued_core_task_keeps_headroom_on_every_card_type_it_accepts_even_before_its_data_is_ready():
    nodes = [a_node("h").card("H100").free(8), a_node("h2").card("H100").free(8)]
    waiting = a_task("c").core().gpus(2).on("H100", "A10").not_ready()
    standard = [a_task(f"s{i}").gpus(1).submitted(i) for i in range(16)]
    result = run(nodes, [waiting, *standard], headroom=0.25, order="fifo")
    assert len(grants(result)) == 14  # 2 of 16 kept: what the core task will need


# -- No starvation: a standard task wider than total − headroom may start once the rest is free ---------

def test_a_standard_task_wider_than_total_minus_headroom_starts_when_everything_else_is_free():
    wide = a_task("wide").gpus(16)
    core_elsewhere = [a_lease("Lc").on("c").gpus(0).core()]
    nodes = [*TWO_NODES, a_node("c").card("A10").free(7)]
    result = run(nodes, [wide], leases=core_elsewhere, headroom=0.25, **FIXED)
    assert "wide" in grants(result)


def test_a_standard_task_wider_than_total_minus_headroom_holds_the_reservation_until_the_rest_is_free():
    nodes = [a_node("a").free(8), a_node("b").free(6)]
    leases = [a_lease("Lb").on("b").gpus(6, 7).ends(NOW + 3600)]
    for gpus in (14, 15):  # it must leave min(4, 16 - gpus) free: 2 or 1 — not possible before b's lease ends
        result = run(nodes, [a_task("wide").gpus(gpus)], leases=leases, headroom=0.25, **FIXED)
        assert reason_of(result, "wide") == R.RESERVED
        assert result.reservations[0].start_at == NOW + 3600
    assert "wide" in grants(run(TWO_NODES, [a_task("wide").gpus(14)], headroom=0.25, **FIXED))


def test_only_the_task_that_would_hold_the_reservation_may_leave_less_than_the_headroom():
    head = a_task("head").gpus(16).priority(9)  # blocked first: it holds the reservation
    result = run(TWO_NODES, [head, a_task("wide").gpus(14)], headroom=0.25, **FIXED)
    assert "head" in grants(result)  # the first task considered: it may leave 16 - 16 = 0 free
    busy = [a_node("a").free(8), a_node("b").free(7)]
    lease = [a_lease("Lb").on("b").gpus(7).ends(NOW + 3600)]
    result = run(busy, [head, a_task("wide").gpus(14)], leases=lease, headroom=0.25, **FIXED)
    assert reason_of(result, "head") == R.RESERVED
    assert reason_of(result, "wide") == R.HEADROOM  # 15 free, but it is not the holder: 4 must stay free
    assert deferrals(result)["wide"].detail == "needs 14 GPUs of H100; 11 free after headroom (4 GPUs kept for core work)"


def test_a_task_wide_on_one_card_type_but_not_another_keeps_the_headroom_of_both():
    nodes = [a_node("h").card("H100"), a_node("a").card("A10")]
    result = run(nodes, [a_task("s").gpus(8).on("H100", "A10")], headroom={"H100": 0.5}, **FIXED)
    assert grants(result)["s"].card_type == "A10"


def test_standard_work_that_returns_the_gpus_within_the_preemption_grace_may_use_the_headroom():
    """A core task would wait no longer for such GPUs than it waits before it may preempt (600 s)."""
    full_but_headroom = [a_node("a").free(0), a_node("b").free(4)]  # 4 of 16 free = the headroom at 25%
    short = a_task("short").gpus(4).runs(600)
    long = a_task("long").gpus(4).runs(601)
    assert "short" in grants(run(full_but_headroom, [short], headroom=0.25, **FIXED))
    assert reason_of(run(full_but_headroom, [long], headroom=0.25, **FIXED), "long") == R.HEADROOM
    assert reason_of(run(full_but_headroom, [short], headroom=0.25, preemption=False, **FIXED), "short") == R.HEADROOM


# -- Standard work that ends within the grace borrows the headroom (opt-in) --------------------------

BORROWS = dict(standard_borrows_within_graces=1.0, preempt_after_s=600.0, **FIXED)


@pytest.mark.parametrize(
    ("ends_in", "lease_class", "policy", "started"),
    [
        (600, "standard", FIXED, False),  # off: a standard lease never covers the headroom
        (600, "standard", BORROWS, True),  # it gives the 4 GPUs back by itself within one grace
        (601, "standard", BORROWS, False),
        (1200, "standard", dict(BORROWS, standard_borrows_within_graces=2.0), True),
        (1201, "standard", dict(BORROWS, standard_borrows_within_graces=2.0), False),
        (300, "standard", dict(BORROWS, standard_borrows_within_graces=0.5), True),
        (301, "standard", dict(BORROWS, standard_borrows_within_graces=0.5), False),
        (-1, "standard", BORROWS, False),  # past its estimate: no known end
        (600, "standard", dict(BORROWS, preemption=False), False),  # nothing bounds a core task's wait then
        (600, "core", BORROWS, False),  # core work uses the headroom; it lends none
    ],
)
def test_a_running_standard_lease_that_ends_within_the_graces_covers_the_headroom(ends_in, lease_class, policy, started):
    """16 GPUs, headroom 4 at 25%: node a has 4 free GPUs and 4 held by the lease, b is full (core work,
    which lends nothing) until a core task's reservation there (so s, on node a, is told why it waits)."""
    nodes = [a_node("a").free(4), a_node("b").free(0)]
    lease = a_lease("Ls").on("a").gpus(0, 1, 2, 3).started(NOW - HOUR).ends(NOW + ends_in)
    lease = lease.core() if lease_class == "core" else lease
    leases = [lease, a_lease("Lb").on("b").gpus(*range(8)).core().ends(NOW + 200)]
    head = a_task("head").core().gpus(8)
    result = run(nodes, [head, a_task("s").gpus(4)], leases=leases, headroom=0.25, **policy)
    assert ("s" in grants(result)) == started
    if not started:
        assert reason_of(result, "s") == R.HEADROOM


@pytest.mark.parametrize(
    ("short_runtime_s", "policy", "long_started"),
    [
        (600, FIXED, False),  # off: the short task may use the headroom, but its GPUs do not cover it
        (600, BORROWS, True),  # on: they do, so the long task takes the other 4 free GPUs
        (1200, BORROWS, False),
        (1200, dict(BORROWS, standard_borrows_within_graces=2.0), True),
    ],
)
def test_standard_grants_of_the_cycle_that_end_within_the_graces_cover_the_headroom(short_runtime_s, policy, long_started):
    nodes = [a_node("a").free(8), a_node("b").free(0)]
    tasks = [a_task("short").gpus(4).runs(short_runtime_s).submitted(0), a_task("long").gpus(4).runs(HOUR).submitted(1)]
    result = run(nodes, tasks, leases=[a_lease("Lb").on("b").gpus(*range(8))], headroom=0.25, order="fifo", **policy)
    assert "short" in grants(result)
    assert ("long" in grants(result)) == long_started


@pytest.mark.parametrize(("graces", "started"), [(0.0, False), (1.0, False), (2.0, True)])
def test_standard_work_within_the_graces_may_use_the_headroom(graces, started):
    """The one-grace rule above, stretched to `standard_borrows_within_graces` graces when more."""
    full_but_headroom = [a_node("a").free(0), a_node("b").free(4)]
    result = run(full_but_headroom, [a_task("s").gpus(4).runs(1200)], headroom=0.25,
                 **dict(BORROWS, standard_borrows_within_graces=graces))
    assert ("s" in grants(result)) == started


# -- Only GPUs core work could have within the preemption grace cover the headroom (opt-in) ---------

RECLAIMABLE_ONLY = dict(headroom_counts_reclaimable_only=True, **FIXED)


def _opportunistic_lease(kind: str):
    """4 GPUs of node a (0-3), opportunistic, started an hour ago; estimated end in 2 h unless `kind` says."""
    lease = a_lease("Lo").on("a").gpus(0, 1, 2, 3).opportunistic().started(NOW - HOUR).ends(NOW + 2 * HOUR)
    change = {
        "checkpoints": lambda: lease.checkpoints_on_preempt(),
        "no checkpoint": lambda: lease,
        "no checkpoint, ends within the grace": lambda: lease.ends(NOW + 600),
        "no checkpoint, ends after the grace": lambda: lease.ends(NOW + 601),
        "no checkpoint, just started": lambda: lease.started(NOW - 30),
    }[kind]
    return change()


@pytest.mark.parametrize(
    ("kind", "policy", "started"),
    [
        ("checkpoints", RECLAIMABLE_ONLY, True),  # preempted after the grace, losing its write
        ("no checkpoint", RECLAIMABLE_ONLY, False),  # protected by the loss cap for good: no headroom
        ("no checkpoint", FIXED, True),  # the knob off: every opportunistic GPU counts
        ("no checkpoint, ends within the grace", RECLAIMABLE_ONLY, True),
        ("no checkpoint, ends after the grace", RECLAIMABLE_ONLY, False),
        # a victim now (lost 30 s < its 60 s write), but not once a core task's grace is over
        ("no checkpoint, just started", RECLAIMABLE_ONLY, False),
        ("no checkpoint", dict(RECLAIMABLE_ONLY, preempt_max_lost_gpu_hours=float("inf")), True),
        ("checkpoints", dict(RECLAIMABLE_ONLY, preemption=False), False),  # nobody would preempt it
    ],
)
def test_opportunistic_leases_cover_the_headroom_only_if_core_work_could_have_them_within_the_grace(kind, policy, started):
    """16 GPUs, headroom 4 at 25%: node a has 4 free GPUs and 4 held by the opportunistic lease, b is full."""
    nodes = [a_node("a").free(4), a_node("b").free(0)]
    leases = [_opportunistic_lease(kind), a_lease("Lb").on("b").gpus(*range(8))]
    result = run(nodes, [HEAD, a_task("s").gpus(4)], leases=leases, headroom=0.25, **policy)
    assert ("s" in grants(result)) == started
    if not started:
        assert reason_of(result, "s") == R.HEADROOM
        assert deferrals(result)["s"].detail == "needs 4 GPUs of H100; 0 free after headroom (4 GPUs kept for core work)"


@pytest.mark.parametrize(("checkpoints", "runtime_s", "started"), [(True, HOUR, True), (False, HOUR, False), (False, 600, True)])
def test_opportunistic_grants_of_the_cycle_cover_the_headroom_only_if_core_work_could_have_them_within_the_grace(
        checkpoints, runtime_s, started):
    nodes = [a_node("a").free(8), a_node("b").free(0)]
    opportunistic = a_task("o").opportunistic().gpus(4).runs(runtime_s).submitted(0)
    tasks = [opportunistic.checkpoints() if checkpoints else opportunistic, a_task("s").gpus(4).submitted(1)]
    result = run(nodes, tasks, leases=[a_lease("Lb").on("b").gpus(*range(8))], headroom=0.25, order="fifo",
                 **RECLAIMABLE_ONLY)
    assert "o" in grants(result)
    assert ("s" in grants(result)) == started


def test_preempting_a_lease_that_never_covered_the_headroom_does_not_count_it_twice():
    """The core task (its grace long over) preempts the young no-checkpoint lease — a victim now, not
    once a grace from now is over: the headroom count had left it out, so preempting it must not take
    its GPUs off the 4 the checkpointing lease covers."""
    nodes = [a_node("a").free(0), a_node("b").free(0), a_node("c").free(4)]
    young = a_lease("Ly").on("a").gpus(*range(8)).opportunistic().started(NOW - 30)
    cover = a_lease("Lb").on("b").gpus(0, 1, 2, 3).opportunistic().checkpoints_on_preempt()
    rest = [a_lease("Lb2").on("b").gpus(4, 5, 6, 7), a_lease("Lc").on("c").gpus(0, 1, 2, 3)]
    tasks = [a_task("c").core().gpus(8), a_task("s").gpus(4).submitted(1)]
    result = run(nodes, tasks, leases=[young, cover, *rest], headroom=1 / 6, order="fifo", **RECLAIMABLE_ONLY)
    assert [p.lease_id for p in result.preemptions] == ["Ly"]
    assert "s" in grants(result)  # 4 free - 4 + 4 borrowed by Lb = 4 = the headroom of 24 GPUs at 1/6


# -- Adaptive headroom (opt-in): only the core demand seen within the last preemption grace -----------

RECENT = dict(headroom_core_demand="recent", preempt_after_s=600.0)


@pytest.mark.parametrize(
    ("started_ago", "demand", "kept"),
    [
        (3600, "recent", 0),  # an hour-old core lease is not recent demand: nothing kept
        (3600, "present", 6),  # the default counts every core GPU held: 6 of 8 (the share's cap)
        (600, "recent", 6),  # started exactly a grace ago: still recent
        (601, "recent", 0),
        (60, "recent", 6),
        (3600, "queued-or-recent", 0),
    ],
)
def test_with_recent_core_demand_only_core_leases_started_within_the_grace_keep_headroom(started_ago, demand, kept):
    """24 H100 GPUs at 25% = 6 at most; an 8-GPU core lease on node c; 1-GPU standard tasks take
    every free GPU but the `kept` ones."""
    nodes = [*TWO_NODES, a_node("c").free(0)]
    leases = [a_lease("Lc").on("c").gpus(*range(8)).core().started(NOW - started_ago)]
    tasks = [a_task(f"s{i:02d}").gpus(1).submitted(i) for i in range(16)]
    result = run(nodes, tasks, leases=leases, headroom=0.25, order="fifo", **dict(RECENT, headroom_core_demand=demand))
    assert len(grants(result)) == 16 - kept


@pytest.mark.parametrize(
    ("submitted_ago", "demand", "kept"),
    [(0, "recent", 2), (600, "recent", 2), (601, "recent", 0), (7200, "recent", 0),
     (7200, "queued-or-recent", 2), (7200, "present", 2)],
)
def test_with_recent_core_demand_only_core_tasks_submitted_within_the_grace_keep_headroom(submitted_ago, demand, kept):
    """A queued 2-GPU core task (its data not ready, so it cannot start) keeps 2 GPUs only while it is
    younger than the grace; older, it may preempt or hold the reservation instead."""
    nodes = [a_node("h").free(8), a_node("h2").free(8)]
    waiting = a_task("c").core().gpus(2).not_ready().submitted(NOW - submitted_ago)
    standard = [a_task(f"s{i}").gpus(1).submitted(i) for i in range(16)]
    result = run(nodes, [waiting, *standard], headroom=0.25, order="fifo", **dict(RECENT, headroom_core_demand=demand))
    assert len(grants(result)) == 16 - kept


def test_recent_core_demand_never_keeps_more_than_the_share():
    nodes = [a_node("h").free(8), a_node("h2").free(8)]  # 16 GPUs at 25%: 4 at most
    burst = [a_task(f"c{i}").core().gpus(4).not_ready().submitted(NOW - 10) for i in range(3)]  # 12 GPUs of demand
    standard = [a_task(f"s{i}").gpus(1).submitted(i) for i in range(16)]
    assert len(grants(run(nodes, [*burst, *standard], headroom=0.25, **RECENT))) == 12


def test_an_unknown_core_demand_rule_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown headroom_core_demand 'sometimes'; known: present, recent, queued-or-recent"):
        run(TWO_NODES, [a_task("s")], headroom=0.25, headroom_core_demand="sometimes")


@pytest.mark.parametrize("kept_queue", [False, True])
def test_a_failure_remembered_for_a_long_standard_task_is_not_applied_to_one_that_borrows(kept_queue):
    """Same class, GPUs and card type, neither within one grace: after the reservation is settled the
    long one fails on the headroom, the one within two graces borrows it — the repeated-failure memo
    must tell them apart (`Cycle._shape`; over a kept queue `Cycle._walk_shape`)."""
    nodes = [a_node("a").free(4), a_node("b").free(0)]
    leases = [a_lease("Lb").on("b").gpus(*range(8)).core().ends(NOW + 200)]
    tasks = [a_task("head").core().gpus(8), a_task("long").gpus(4).runs(HOUR).submitted(1),
             a_task("within").gpus(4).runs(1200).submitted(2)]
    policy = replace(Policy(), headroom=0.25, order="fifo", **dict(BORROWS, standard_borrows_within_graces=2.0))
    snapshot = Snapshot(tuple(node.build() for node in nodes), tuple(lease.build() for lease in leases))
    queue = [task.build() for task in tasks]
    result = plan(snapshot, OrderedQueue.of(queue, policy) if kept_queue else queue, policy, NOW)
    assert reason_of(result, "long") == R.HEADROOM
    assert "within" in grants(result)
