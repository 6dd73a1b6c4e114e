"""A standard lease yields to core work only when the yield pays (`Policy.standard_yields_priced`): the core task's
GPUs × its wait for a hole without preempting exceed the yielding task's width × its wait for a hole of its width
with the core task on its node (shared/scheduling/yield_price.py)."""

from __future__ import annotations

import pytest

from shared.scheduling.model import Node
from shared.scheduling.placement import Fleet
from shared.scheduling.yield_price import NEVER, HoleTimes, yield_pays

from .builders import HOUR, NOW, a_full_fleet_around, a_lease, a_node, a_task, run

YIELDS = dict(checkpointing_standard_yields=True)
WITHIN_WIDTH = dict(YIELDS, standard_yields_within_width=True)
PRICED = dict(YIELDS, standard_yields_priced=True)


def _narrow_victim(victim_ends: float, hole_on_b_at: float):
    """Node a: a 2-GPU standard lease that checkpoints (GPUs 0-1, ending at `victim_ends`), GPUs 2-3 free, core work
    on 4-7 for 9 h; node b: core work on GPUs 0-1 until `hole_on_b_at`, on 2-7 for 9 h. A 4-GPU core task fits only
    on node a by taking the standard lease; without it, it would wait for the lease's end."""
    nodes = [a_node("a").free_indices(2, 3), a_node("b").free(0)]
    leases = [a_lease("Ls").on("a").gpus(0, 1).checkpoints_on_preempt().started(NOW - 60).ends(victim_ends),
              a_lease("La").on("a").gpus(4, 5, 6, 7).core().ends(NOW + 9 * HOUR),
              a_lease("Lb1").on("b").gpus(0, 1).core().ends(hole_on_b_at),
              a_lease("Lb2").on("b").gpus(*range(2, 8)).core().ends(NOW + 9 * HOUR)]
    return nodes, leases


@pytest.mark.parametrize(
    ("policy", "victim_ends", "hole_on_b_at", "preempted"),
    [
        # pays: the core task would wait 5 h on 4 GPUs (20 GPU-hours); the victim restarts on node b in 1 h (2)
        (PRICED, NOW + 5 * HOUR, NOW + HOUR, True),
        # does not pay: the lease ends in 30 min (the core task waits 2 GPU-hours), its restart waits 2 h on 2 (4)
        (PRICED, NOW + HOUR / 2, NOW + 2 * HOUR, False),
        (WITHIN_WIDTH, NOW + HOUR / 2, NOW + 2 * HOUR, True),  # the width rule alone takes it: narrower
        (YIELDS, NOW + HOUR / 2, NOW + 2 * HOUR, True),
    ],
)
def test_a_narrower_standard_task_yields_only_when_its_restart_costs_less_than_the_core_tasks_wait(
        policy, victim_ends, hole_on_b_at, preempted):
    nodes, leases = _narrow_victim(victim_ends, hole_on_b_at)
    result = run(nodes, [a_task("c").core().gpus(4).submitted(NOW - HOUR)], leases=leases, **policy)
    assert ([p.lease_id for p in result.preemptions] == ["Ls"]) == preempted


@pytest.mark.parametrize(("policy", "preempted"), [(WITHIN_WIDTH, True), (PRICED, False)])
def test_an_as_wide_standard_task_does_not_yield_it_would_only_swap_who_waits(policy, preempted):
    """A 4-GPU standard lease on node a (ends in 5 h), core work everywhere else for 9 h: the 4-GPU core task would
    wait 5 h for it; taken, it would wait 9 h for a 4-GPU hole on node b."""
    standard = a_lease("Ls").on("a").gpus(0, 1, 2, 3).checkpoints_on_preempt().started(NOW - 60).ends(NOW + 5 * HOUR)
    nodes, leases = a_full_fleet_around(standard)
    result = run(nodes, [a_task("c").core().gpus(4).submitted(NOW - HOUR)], leases=leases, **policy)
    assert ([p.lease_id for p in result.preemptions] == ["Ls"]) == preempted


def test_a_pricing_failure_for_one_core_task_leaves_the_victim_to_a_wider_one_it_pays_for():
    """Node a: the 2-GPU standard lease (5 h left), one free GPU, core work on the rest; node b: a 2-GPU hole in 1 h.
    A 2-GPU core task first: it would wait 1 h for node b's hole, as the lease would — no yield. A 3-GPU one behind
    it would wait 5 h (15 GPU-hours) against the lease's 2: the lease yields to it — a failure to preempt for 2 GPUs
    says nothing about 3 under this rule (no failure is learnt by GPU count)."""
    nodes = [a_node("a").free_indices(2), a_node("b").free(0)]
    leases = [a_lease("Ls").on("a").gpus(0, 1).checkpoints_on_preempt().started(NOW - 60).ends(NOW + 5 * HOUR),
              a_lease("La").on("a").gpus(3, 4, 5, 6, 7).core().ends(NOW + 9 * HOUR),
              a_lease("Lb1").on("b").gpus(0, 1).core().ends(NOW + HOUR),
              a_lease("Lb2").on("b").gpus(*range(2, 8)).core().ends(NOW + 9 * HOUR)]
    narrow = a_task("c2").core().gpus(2).submitted(NOW - 2 * HOUR)
    wide = a_task("c3").core().gpus(3).submitted(NOW - HOUR)
    assert [(p.lease_id, p.for_task_id) for p in run(nodes, [narrow], leases=leases, **PRICED).preemptions] == []
    result = run(nodes, [narrow, wide], leases=leases, **PRICED)
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == [("Ls", "c3")]


def _holes(*leases, free: dict[str, int] | None = None) -> HoleTimes:
    """Two 8-GPU H100 nodes a and b (free GPUs per node: `free`, default none) with these leases."""
    free = free or {}
    nodes = [Node(node_id, "H100", 8, frozenset(range(8 - free.get(node_id, 0), 8))) for node_id in "ab"]
    return HoleTimes([lease.build() for lease in leases], Fleet(nodes, 8, lambda card_type, total: 0), NOW)


def test_a_hole_opens_when_free_gpus_and_ending_leases_on_one_node_add_up():
    holes = _holes(a_lease("a1").on("a").gpus(0, 1).ends(NOW + HOUR), a_lease("a2").on("a").gpus(2, 3, 4, 5).ends(NOW + 3 * HOUR),
                   a_lease("b1").on("b").gpus(*range(8)).ends(NOW + 2 * HOUR), free={"a": 2})
    assert holes.wait("H100", 2) == 0.0  # node a's two free GPUs
    assert holes.wait("H100", 4) == HOUR  # ... and a1's two
    assert holes.wait("H100", 8) == 2 * HOUR  # node b empties before node a
    assert holes.wait("H100", 4, excluding=0) == 2 * HOUR  # not on node a (rank 0): node b's
    assert holes.wait("H100", 16) == 3 * HOUR  # spanning both nodes: once every lease has ended
    assert holes.wait("A100", 1) == NEVER  # no such card type


def test_a_lease_past_its_estimate_counts_as_ending_now():
    holes = _holes(a_lease("a1").on("a").gpus(*range(8)).ends(NOW - HOUR), a_lease("b1").on("b").gpus(*range(8)))
    assert holes.wait("H100", 8) == 0.0


@pytest.mark.parametrize(
    ("core_gpus", "victim_width", "pays"),
    [
        (4, 2, True),  # 4 × 1 h waiting against 2 × 0 h (node b has two free GPUs)
        (4, 4, False),  # 4 × 1 h against 4 × 2 h (node b empties in 2 h)
        (2, 2, False),  # 2 × 0 h: the core task itself fits node b now
    ],
)
def test_a_yield_pays_when_the_core_tasks_gpu_time_waiting_exceeds_the_victims(core_gpus, victim_width, pays):
    holes = _holes(a_lease("a1").on("a").gpus(*range(8)).ends(NOW + HOUR),
                   a_lease("b1").on("b").gpus(*range(6)).ends(NOW + 2 * HOUR), free={"b": 2})
    assert yield_pays(holes, "H100", core_gpus, victim_width, victim_rank=0) == pays
