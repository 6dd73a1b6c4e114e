"""A standard lease yields to core work only when the yield pays with the drain it lengthens counted too
(`Policy.standard_yields_drain_priced`, shared/scheduling/yield_drain.py): a long narrow task that yields restarts on
another node and pins it, and the wide task waiting for that node to empty waits the rest of its estimate longer."""

from __future__ import annotations

import pytest

from shared.scheduling.model import Node
from shared.scheduling.placement import Fleet
from shared.scheduling.yield_price import NEVER, HoleTimes

from .builders import HOUR, NOW, a_lease, a_node, a_quota, a_task, run

PRICED = dict(checkpointing_standard_yields=True, standard_yields_priced=True)
DRAIN_PRICED = dict(PRICED, standard_yields_drain_priced=True)

CORE = a_task("c").core().gpus(2).submitted(NOW - HOUR)  # past its grace; runs an hour
WIDE = a_task("w").standard().gpus(8).submitted(NOW - 2 * HOUR)  # fits nowhere now: it will hold the reservation
NARROWER = a_task("s4").standard().gpus(4).submitted(NOW - 3 * HOUR)  # fits nowhere now either, ahead of the wide one


def _victim_on_a(victim_ends: float):
    """Node a: GPU 7 free, a one-GPU standard lease that checkpoints on GPU 0 (ending at `victim_ends`), core work on
    1-6 for 9 h. Node b: GPU 7 free, core work on 0-6 for an hour — the first node to empty for an 8-GPU task. The
    2-GPU core task fits only on node a by taking the lease (without it, it would wait an hour for node b); the
    requeued lease restarts at once on node b's free GPU (best fit)."""
    nodes = [a_node("a").free_indices(7), a_node("b").free_indices(7)]
    leases = [a_lease("Va").on("a").gpus(0).checkpoints_on_preempt().started(NOW - 60).ends(victim_ends),
              a_lease("La").on("a").gpus(*range(1, 7)).core().ends(NOW + 9 * HOUR),
              a_lease("Lb").on("b").gpus(*range(7)).core().ends(NOW + HOUR)]
    return nodes, leases


@pytest.mark.parametrize(
    ("policy", "queue", "victim_ends", "preempted"),
    [
        # the restart price alone: the core task saves 2 GPU-hours, the lease restarts at once — it yields
        (PRICED, [CORE, WIDE], NOW + 100 * HOUR, ["Va"]),
        # ... but pinned on node b for its 100 h left, the 8-GPU task's hole there opens 99 h later: refused
        (DRAIN_PRICED, [CORE, WIDE], NOW + 100 * HOUR, []),
        # no wide task waiting: no drain to lengthen — the restart price decides, as without the field
        (DRAIN_PRICED, [CORE], NOW + 100 * HOUR, ["Va"]),
        # a 4-GPU task ahead of the wide one: node b still holds 4 GPUs in an hour, but the widest waiting task decides
        (DRAIN_PRICED, [CORE, NARROWER, WIDE], NOW + 100 * HOUR, []),
        (DRAIN_PRICED, [CORE, NARROWER], NOW + 100 * HOUR, ["Va"]),
        # the lease ends in 30 min: restarted on node b it is gone before node b empties anyway
        (DRAIN_PRICED, [CORE, WIDE], NOW + HOUR / 2, ["Va"]),
    ],
)
def test_a_yield_that_pins_the_node_a_wide_task_drains_is_refused(policy, queue, victim_ends, preempted):
    nodes, leases = _victim_on_a(victim_ends)
    result = run(nodes, queue, leases=leases, **policy)
    assert [p.lease_id for p in result.preemptions] == preempted


@pytest.mark.parametrize(("quota_gpu_hours", "preempted"), [(100.0, []), (1.0, ["Va"])])
def test_a_wide_task_its_quota_refuses_holds_no_drain(quota_gpu_hours, preempted):
    """As above (100 h left on the lease), the wide task in a project with a quota: with 100 GPU-hours left it may
    start on node b once that empties, and the yield that pins node b is refused; with 1 GPU-hour it cannot start at
    all, its drain is none, and the yield pays by its restart price alone."""
    nodes, leases = _victim_on_a(NOW + 100 * HOUR)
    queue = [CORE, a_task("w").standard().gpus(8).submitted(NOW - 2 * HOUR).project("q")]
    result = run(nodes, queue, leases=leases, quotas=[a_quota("q", quota_gpu_hours)], **DRAIN_PRICED)
    assert [p.lease_id for p in result.preemptions] == preempted


def test_a_refused_node_leaves_the_core_task_the_next_node_whose_yield_pays():
    """As above, plus node c: GPU 7 free, a one-GPU standard lease (100 h left, started earlier than node a's, so node
    a is the cheaper choice) and core work on 1-6 for 9 h. Node a's lease would restart on node b and pin it; node c's
    would restart on node a (best fit, lowest rank), which its own long lease pins as long anyway."""
    nodes, leases = _victim_on_a(NOW + 100 * HOUR)
    nodes.append(a_node("c").free_indices(7))
    leases += [a_lease("Vc").on("c").gpus(0).checkpoints_on_preempt().started(NOW - 120).ends(NOW + 100 * HOUR),
               a_lease("Lc").on("c").gpus(*range(1, 7)).core().ends(NOW + 9 * HOUR)]
    assert [p.lease_id for p in run(nodes, [CORE, WIDE], leases=leases, **PRICED).preemptions] == ["Va"]
    assert [p.lease_id for p in run(nodes, [CORE, WIDE], leases=leases, **DRAIN_PRICED).preemptions] == ["Vc"]


def test_the_field_needs_yields_a_preset_without_them_never_takes_a_standard_lease():
    nodes, leases = _victim_on_a(NOW + 100 * HOUR)
    assert run(nodes, [CORE, WIDE], leases=leases, standard_yields_drain_priced=True).preemptions == ()


def test_hole_times_count_the_cycles_grants_as_coming_free_at_their_end():
    """Node a was empty when the cycle began and a grant took all of it (its release: 2 h); node b is full for 3 h.
    Read after the grant, the hole estimate counts the grant's end — without it node a would never empty."""
    nodes = [Node("a", "H100", 8, frozenset(range(8))), Node("b", "H100", 8, frozenset())]
    fleet = Fleet(nodes, 8, lambda card_type, total: 0)
    fleet.take([(0, 8)], False)
    leases = [a_lease("b1").on("b").gpus(*range(8)).ends(NOW + 3 * HOUR).build()]
    assert HoleTimes(leases, fleet, NOW, [(NOW + 2 * HOUR, 0, 8)]).wait("H100", 8) == 2 * HOUR
    assert HoleTimes(leases, fleet, NOW).wait("H100", 8, excluding=1) == NEVER


KTH_HOLE = dict(DRAIN_PRICED, standard_yields_drain_kth_hole=True)
WIDE_TOO = a_task("w2").standard().gpus(8).submitted(NOW - 2 * HOUR + 60)  # a second task as wide, behind the first


def _node_c_empties_first():
    """As `_victim_on_a` (100 h left on the one-GPU lease), plus node c: full of core work for 30 min — the first node
    to empty for an 8-GPU task, ahead of node b, which the requeued lease would pin (best fit among nodes with room)."""
    nodes, leases = _victim_on_a(NOW + 100 * HOUR)
    nodes.append(a_node("c").free_indices())
    leases.append(a_lease("Lc").on("c").gpus(*range(8)).core().ends(NOW + HOUR / 2))
    return nodes, leases


@pytest.mark.parametrize(
    ("policy", "queue", "preempted"),
    [
        # each touched node's delay summed: node b pinned for 99 h more, refused although node c empties first
        (DRAIN_PRICED, [CORE, WIDE], []),
        # the k-th hole (k = 1 task that wide): node c's, as soon after the yield as before — it yields
        (KTH_HOLE, [CORE, WIDE], ["Va"]),
        # two tasks that wide: the second hole was node b's in an hour, now node a's in 100 h — refused
        (KTH_HOLE, [CORE, WIDE, WIDE_TOO], []),
    ],
)
def test_a_pin_is_priced_by_the_kth_hole_of_the_holders_width(policy, queue, preempted):
    nodes, leases = _node_c_empties_first()
    assert [p.lease_id for p in run(nodes, queue, leases=leases, **policy).preemptions] == preempted


def test_without_another_node_emptying_sooner_the_kth_hole_refuses_the_pin_too():
    nodes, leases = _victim_on_a(NOW + 100 * HOUR)
    assert run(nodes, [CORE, WIDE], leases=leases, **KTH_HOLE).preemptions == ()


def test_a_node_holds_one_hole_per_multiple_of_the_width_and_a_changed_node_opens_no_sooner():
    """Node a: 2 GPUs free, 2 more in 1 h, 4 more in 3 h — 2-GPU holes now, in 1 h, 3 h and 3 h. Node b: full for 2 h.
    Changed, node a emptied at once still opens its holes no sooner than before (narrow work refills it)."""
    nodes = [Node("a", "H100", 8, frozenset({0, 1})), Node("b", "H100", 8, frozenset())]
    fleet = Fleet(nodes, 8, lambda card_type, total: 0)
    leases = [a_lease("a1").on("a").gpus(2, 3).ends(NOW + HOUR).build(),
              a_lease("a2").on("a").gpus(4, 5, 6, 7).ends(NOW + 3 * HOUR).build(),
              a_lease("b1").on("b").gpus(*range(8)).ends(NOW + 2 * HOUR).build()]
    holes = HoleTimes(leases, fleet, NOW)
    assert [holes.kth_opening("H100", 2, k) - NOW for k in (1, 2, 3, 4)] == [0, HOUR, 2 * HOUR, 2 * HOUR]
    assert holes.kth_opening("H100", 8, 2) - NOW == 3 * HOUR
    assert holes.kth_opening("H100", 8, 1, {1: (0, [(NOW + 5 * HOUR, 8)])}) - NOW == 3 * HOUR
    assert holes.kth_opening("H100", 8, 1, {0: (8, [])}) - NOW == 2 * HOUR


AFTER_HEADROOM = dict(DRAIN_PRICED, standard_yields_restart_after_headroom=True)


@pytest.mark.parametrize(
    ("policy", "preempted"),
    [
        # a restart in any free GPU: node b's, at once — gone 30 min later, before node b empties: it yields
        (DRAIN_PRICED, ["Va"]),
        # the headroom (1 of 16 GPUs) keeps node b's free GPU from standard work once the core task holds node a's:
        # the lease restarts only when node b empties (1 h), pins it 30 min more — priced above the core task's wait
        (AFTER_HEADROOM, []),
    ],
)
def test_a_restart_waits_for_free_gpus_beyond_the_headroom(policy, preempted):
    nodes, leases = _victim_on_a(NOW + HOUR / 2)
    assert [p.lease_id for p in run(nodes, [CORE, WIDE], leases=leases, **policy).preemptions] == preempted


def test_hole_times_restart_after_what_the_headroom_keeps():
    """Node a: 1 GPU free, node b: 1 GPU free and the rest for 1 h. Keeping 1 GPU, with node a's free GPU taken by a
    core task: a one-GPU restart waits until node b's lease ends; with node a as it is, it restarts at once."""
    nodes = [Node("a", "H100", 8, frozenset({7})), Node("b", "H100", 8, frozenset({7}))]
    fleet = Fleet(nodes, 8, lambda card_type, total: 0)
    leases = [a_lease("a1").on("a").gpus(*range(7)).ends(NOW + 9 * HOUR).build(),
              a_lease("b1").on("b").gpus(*range(7)).ends(NOW + HOUR).build()]
    taken = {0: (0, [(NOW + 9 * HOUR, 7), (NOW + 2 * HOUR, 1)])}
    assert HoleTimes(leases, fleet, NOW).restart_wait("H100", 1, 0, taken) == 0
    kept = HoleTimes(leases, fleet, NOW, kept={"H100": 1})
    assert kept.restart_wait("H100", 1, 0, taken) == HOUR
    assert kept.restart_node("H100", 1, 0, taken) == (1, NOW + HOUR)
    assert kept.restart_node("H100", 1, 0) == (1, NOW)


AFTER_QUEUE = dict(DRAIN_PRICED, standard_yields_restart_after_queue=True)
AHEAD = a_task("s1").standard().gpus(1).submitted(NOW - 11 * HOUR)  # ready, ranked ahead of the victim's task
BEHIND = a_task("s1").standard().gpus(1).submitted(NOW - 9 * HOUR)  # ready, ranked behind it


@pytest.mark.parametrize(
    ("policy", "queue", "preempted"),
    [
        # a restart in any free GPU: node b's, at once — gone 30 min later, before node b empties: it yields
        (DRAIN_PRICED, [CORE, WIDE, AHEAD], ["Va"]),
        # a one-GPU standard task ranks ahead of the requeued one and takes node b's free GPU first: the lease
        # restarts only when node b empties (1 h), pins it 30 min more — priced above the core task's wait
        (AFTER_QUEUE, [CORE, WIDE, AHEAD], []),
        # ranked behind it (submitted later; the wide task too): nothing ahead, it restarts at once and yields
        (AFTER_QUEUE, [CORE, WIDE, BEHIND], ["Va"]),
        # ranked ahead by its priority although submitted later
        (AFTER_QUEUE, [CORE, WIDE, a_task("s1").standard().gpus(1).submitted(NOW - 9 * HOUR).priority(5)], []),
    ],
)
def test_a_restart_waits_for_the_standard_work_ranked_ahead_of_it(policy, queue, preempted):
    nodes, leases = _victim_on_a(NOW + HOUR / 2)
    leases[0] = leases[0].submitted(NOW - 10 * HOUR)  # the victim's task, requeued, keeps its place in the queue
    assert [p.lease_id for p in run(nodes, queue, leases=leases, **policy).preemptions] == preempted


def test_hole_times_restart_after_the_queue_ahead():
    """As `test_hole_times_restart_after_what_the_headroom_keeps`, with one GPU of standard work ranked ahead
    instead of one GPU of headroom kept: the same wait; with none ahead, at once."""
    nodes = [Node("a", "H100", 8, frozenset({7})), Node("b", "H100", 8, frozenset({7}))]
    fleet = Fleet(nodes, 8, lambda card_type, total: 0)
    leases = [a_lease("a1").on("a").gpus(*range(7)).ends(NOW + 9 * HOUR).build(),
              a_lease("b1").on("b").gpus(*range(7)).ends(NOW + HOUR).build()]
    victim = a_lease("v").on("a").gpus(0).build()
    taken = {0: (0, [(NOW + 9 * HOUR, 7), (NOW + 2 * HOUR, 1)])}
    one_ahead = HoleTimes(leases, fleet, NOW, ahead=lambda card_type, lease: 1)
    assert one_ahead.restart_wait("H100", 1, 0, taken, victim) == HOUR
    assert one_ahead.restart_node("H100", 1, 0, taken, victim) == (1, NOW + HOUR)
    assert HoleTimes(leases, fleet, NOW, ahead=lambda card_type, lease: 0).restart_wait("H100", 1, 0, taken, victim) == 0
