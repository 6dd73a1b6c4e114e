"""Standard work that checkpoints yields to core work past its grace (`Policy.checkpointing_standard_yields`),
whether or not it borrowed the headroom — after every opportunistic victim and every standard filler; only core
work takes it, and never a standard lease that would lose its progress."""

from __future__ import annotations

import pytest

from .builders import HOUR, NOW, a_full_fleet_around, a_lease, a_node, a_task, run

YIELDS = dict(checkpointing_standard_yields=True)


def _full_fleet(checkpoints: bool):
    """16 GPUs all busy: a standard lease on node a (4 GPUs, started a minute ago, no filler), core work on the rest."""
    standard = a_lease("Ls").on("a").gpus(0, 1, 2, 3).started(NOW - 60).ends(NOW + 5 * HOUR)
    return a_full_fleet_around(standard.checkpoints_on_preempt() if checkpoints else standard)


@pytest.mark.parametrize(
    ("checkpoints", "policy", "task_class", "submitted", "preempted"),
    [
        (True, YIELDS, "core", NOW - HOUR, True),  # past its grace: it takes the standard lease's GPUs
        (True, YIELDS, "core", NOW - 60, False),  # inside its grace: it waits
        (True, dict(YIELDS, preempt_at_once="checkpointing"), "core", NOW - 60, False),  # at once: opportunistic only
        (True, dict(YIELDS, checkpointing_standard_borrows=True, fillers_yield_at_once=True), "core", NOW - 60, False),
        (False, YIELDS, "core", NOW - HOUR, False),  # preempting it would lose its progress
        (True, {}, "core", NOW - HOUR, False),  # off: standard work is no victim
        (True, dict(YIELDS, preemption=False), "core", NOW - HOUR, False),
        (True, YIELDS, "standard", NOW - HOUR, False),  # only core work preempts it
    ],
)
def test_core_work_past_its_grace_preempts_standard_work_that_checkpoints(checkpoints, policy, task_class, submitted,
                                                                          preempted):
    nodes, leases = _full_fleet(checkpoints)
    task = a_task("c").gpus(4).submitted(submitted)
    task = task.core() if task_class == "core" else task
    result = run(nodes, [task], leases=leases, **policy)
    assert ([p.lease_id for p in result.preemptions] == ["Ls"]) == preempted


def _two_victims(first: object, second: object):
    """Node a: `first` on GPUs 0-3, node b: `second` on GPUs 0-3; core work on the rest."""
    return a_full_fleet_around(first, second)


@pytest.mark.parametrize(
    ("other", "policy", "victim"),
    [
        ("opportunistic", YIELDS, "Lo"),  # opportunistic work goes first
        ("filler", dict(YIELDS, checkpointing_standard_borrows=True), "Lo"),  # then standard fillers
    ],
)
def test_standard_work_that_did_not_borrow_yields_last(other, policy, victim):
    """A plain standard lease (started later: the cheaper by loss and age alone) on node a, another victim on
    node b: the core task takes the other one."""
    standard = a_lease("Ls").on("a").gpus(0, 1, 2, 3).checkpoints_on_preempt().started(NOW - 60).ends(NOW + 5 * HOUR)
    lease = a_lease("Lo").on("b").gpus(0, 1, 2, 3).checkpoints_on_preempt().started(NOW - 120).ends(NOW + 5 * HOUR)
    lease = lease.opportunistic() if other == "opportunistic" else lease.borrows_headroom()
    nodes, leases = _two_victims(standard, lease)
    result = run(nodes, [a_task("c").core().gpus(4).submitted(NOW - HOUR)], leases=leases, **policy)
    assert [p.lease_id for p in result.preemptions] == [victim]


def test_a_yielding_standard_lease_does_not_cover_the_headroom():
    """Node a: 4 free GPUs and 4 held by a standard lease that checkpoints (no filler); node b full with core work.
    Yielding to core work does not make the lease headroom: the long standard task still may not take the 4 free
    GPUs (a filler's would: tests/unit/scheduling/test_headroom_fillers.py)."""
    lease = a_lease("Ls").on("a").gpus(0, 1, 2, 3).checkpoints_on_preempt().ends(NOW + 5 * HOUR)
    leases = [lease, a_lease("Lb").on("b").gpus(*range(8)).core()]
    result = run([a_node("a").free(4), a_node("b").free(0)], [a_task("t").gpus(4).runs(2 * HOUR)], leases=leases,
                 headroom_tracks_core=False, headroom=0.25, **YIELDS)
    assert not result.grants


WITHIN_WIDTH = dict(YIELDS, standard_yields_within_width=True)


@pytest.mark.parametrize(
    ("policy", "core_gpus", "preempted"),
    [
        (YIELDS, 1, True),  # without the rule a 1-GPU core task takes the 4-GPU standard task's node share
        (WITHIN_WIDTH, 1, False),  # the standard task is wider than the core task: it stays
        (WITHIN_WIDTH, 4, True),  # as wide: it yields
    ],
)
def test_a_standard_task_yields_only_to_a_core_task_at_least_as_wide(policy, core_gpus, preempted):
    nodes, leases = _full_fleet(checkpoints=True)
    task = a_task("c").core().gpus(core_gpus).submitted(NOW - HOUR)
    result = run(nodes, [task], leases=leases, **policy)
    assert ([p.lease_id for p in result.preemptions] == ["Ls"]) == preempted


def test_the_width_counts_every_lease_of_a_task_spanning_nodes():
    """An 8-GPU standard task on node a's GPUs 0-3 and node b's GPUs 0-3: a 4-GPU core task could take either
    half, but the task is 8 GPUs wide, so with the rule it stays."""
    halves = [a_lease(f"Ls{node}").of_task("wide").on(node).gpus(0, 1, 2, 3).checkpoints_on_preempt()
              .started(NOW - 60).ends(NOW + 5 * HOUR) for node in "ab"]
    nodes, leases = a_full_fleet_around(*halves)
    task = a_task("c").core().gpus(4).submitted(NOW - HOUR)
    assert run(nodes, [task], leases=leases, **YIELDS).preemptions
    assert not run(nodes, [task], leases=leases, **WITHIN_WIDTH).preemptions


def test_a_narrow_core_task_refused_a_wide_victim_leaves_it_to_a_wider_one_later_in_the_cycle():
    """Two core tasks past their grace, a 1-GPU one first: the standard task (4 GPUs) is too wide for it, not for
    the 4-GPU one behind it — a failure to preempt for 1 GPU says nothing about 4 GPUs under this rule."""
    nodes, leases = _full_fleet(checkpoints=True)
    narrow, wide = a_task("c1").core().gpus(1).submitted(NOW - 2 * HOUR), a_task("c4").core().gpus(4).submitted(NOW - HOUR)
    result = run(nodes, [narrow, wide], leases=leases, **WITHIN_WIDTH)
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == [("Ls", "c4")]


ANY_WIDTH_AFTER_2H = dict(WITHIN_WIDTH, standard_yields_any_width_after_s=2 * HOUR)


@pytest.mark.parametrize(
    ("policy", "waited", "preempted"),
    [
        (ANY_WIDTH_AFTER_2H, HOUR, False),  # past its grace, not yet 2 h: the 4-GPU standard task is too wide for it
        (ANY_WIDTH_AFTER_2H, 2 * HOUR, True),  # waited 2 h: any width yields
        (ANY_WIDTH_AFTER_2H, 3 * HOUR, True),
        (dict(ANY_WIDTH_AFTER_2H, standard_yields_any_width_after_s=60.0), HOUR, True),  # within the grace: at its end
        (WITHIN_WIDTH, 3 * HOUR, False),  # None: the width rule holds whatever the wait
        (dict(ANY_WIDTH_AFTER_2H, standard_yields_within_width=False), HOUR, True),  # no width rule to lift
        (dict(ANY_WIDTH_AFTER_2H, checkpointing_standard_yields=False), 3 * HOUR, False),  # the field needs yields on
    ],
)
def test_a_wider_standard_task_yields_to_a_core_task_that_has_waited_standard_yields_any_width_after_s(
        policy, waited, preempted):
    nodes, leases = _full_fleet(checkpoints=True)
    result = run(nodes, [a_task("c").core().gpus(1).submitted(NOW - waited)], leases=leases, **policy)
    assert ([p.lease_id for p in result.preemptions] == ["Ls"]) == preempted


def test_a_core_task_refused_a_wider_victim_for_its_wait_asks_to_be_planned_again_when_it_has_waited_long_enough():
    nodes, leases = _full_fleet(checkpoints=True)
    result = run(nodes, [a_task("c").core().gpus(1).submitted(NOW - HOUR)], leases=leases, **ANY_WIDTH_AFTER_2H)
    assert result.revisit_at == NOW + HOUR


def test_an_as_wide_victim_yields_before_that_wait():
    nodes, leases = _full_fleet(checkpoints=True)
    result = run(nodes, [a_task("c").core().gpus(4).submitted(NOW - HOUR)], leases=leases, **ANY_WIDTH_AFTER_2H)
    assert [p.lease_id for p in result.preemptions] == ["Ls"]


def test_a_younger_core_task_refused_a_wider_victim_leaves_it_to_an_older_one_of_the_same_shape_later_in_the_cycle():
    """Three 1-GPU core tasks past their grace: two younger ones ranked first (higher priority), refused the 4-GPU
    victim for their wait (the first holds the reservation), then an older one that has waited long enough — a
    younger task's failure says nothing about it (no failure of that shape is remembered before the wait)."""
    nodes, leases = _full_fleet(checkpoints=True)
    young = [a_task(f"y{index}").core().gpus(1).priority(10).submitted(NOW - HOUR) for index in (1, 2)]
    old = a_task("old").core().gpus(1).submitted(NOW - 3 * HOUR)
    result = run(nodes, [*young, old], leases=leases, **ANY_WIDTH_AFTER_2H)
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == [("Ls", "old")]
