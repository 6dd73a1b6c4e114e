"""Standard work that checkpoints borrows the headroom as a filler (`Policy.checkpointing_standard_borrows`):
its grant says so, its lease covers the headroom, and core work past its grace takes it back — after every
opportunistic victim; nothing else may."""

from __future__ import annotations

import pytest

from shared.scheduling.model import DeferralReason as R

from .builders import HOUR, NOW, a_full_fleet_around, a_lease, a_node, a_quota, a_task, grants, reason_of, run

# 4 of 16 GPUs kept, whatever core work there is; fillers off (the cardflow preset has them on)
FIXED = dict(headroom_tracks_core=False, headroom=0.25, checkpointing_standard_borrows=False,
             fillers_yield_at_once=False, fillers_after_opportunistic=False)
FILLERS = dict(FIXED, checkpointing_standard_borrows=True)
FULL_BUT_HEADROOM = [a_node("a").free(0), a_node("b").free(4)]  # 4 of 16 free = the headroom


@pytest.mark.parametrize(
    ("checkpoints", "policy", "borrows"),
    [
        (True, FILLERS, True),  # takes the headroom's 4 GPUs, and its grant says it borrowed them
        (False, FILLERS, None),  # preempting it would lose its progress: it stays out of the headroom
        (True, FIXED, None),  # off
        (True, dict(FILLERS, preemption=False), None),  # nothing could take the GPUs back
    ],
)
def test_standard_work_that_checkpoints_borrows_the_headroom(checkpoints, policy, borrows):
    task = a_task("s").gpus(4).runs(2 * HOUR)
    task = task.checkpoints() if checkpoints else task
    result = run(FULL_BUT_HEADROOM, [task], **policy)
    if borrows is None:
        assert reason_of(result, "s") == R.HEADROOM
    else:
        assert grants(result)["s"].borrowed_headroom is borrows


def test_a_standard_grant_outside_the_headroom_borrows_nothing():
    result = run([a_node("a").free(8), a_node("b").free(8)], [a_task("s").gpus(4).runs(2 * HOUR).checkpoints()], **FILLERS)
    assert grants(result)["s"].borrowed_headroom is False


@pytest.mark.parametrize(("flagged", "policy", "started"), [(True, FILLERS, True), (False, FILLERS, False), (True, FIXED, False)])
def test_a_standard_lease_that_borrowed_covers_the_headroom(flagged, policy, started):
    """Node a: 4 free GPUs and 4 held by a standard lease; node b full with core work. The long standard
    task (no checkpoints) may take the 4 free GPUs only if the lease's GPUs count as headroom."""
    lease = a_lease("Ls").on("a").gpus(0, 1, 2, 3).checkpoints_on_preempt().ends(NOW + 5 * HOUR)
    leases = [lease.borrows_headroom() if flagged else lease, a_lease("Lb").on("b").gpus(*range(8)).core()]
    result = run([a_node("a").free(4), a_node("b").free(0)], [a_task("t").gpus(4).runs(2 * HOUR)], leases=leases, **policy)
    assert ("t" in grants(result)) == started


def _full_fleet(flagged: bool):
    """16 GPUs all busy: a standard lease on node a (4 GPUs, checkpoints, started a minute ago), core work on the rest."""
    standard = a_lease("Ls").on("a").gpus(0, 1, 2, 3).checkpoints_on_preempt().started(NOW - 60).ends(NOW + 5 * HOUR)
    return a_full_fleet_around(standard.borrows_headroom() if flagged else standard)


@pytest.mark.parametrize(
    ("flagged", "policy", "task_class", "submitted", "preempted"),
    [
        (True, FILLERS, "core", NOW - HOUR, True),  # past its grace: it takes the filler's GPUs back
        (True, FILLERS, "core", NOW - 60, False),  # inside its grace: it waits
        (True, dict(FILLERS, fillers_yield_at_once=True), "core", NOW - 60, True),  # ... unless fillers yield at once
        (True, dict(FIXED, fillers_yield_at_once=True), "core", NOW - 60, False),  # (only with fillers on)
        (False, FILLERS, "core", NOW - HOUR, False),  # a standard lease that did not borrow is no victim
        (True, FIXED, "core", NOW - HOUR, False),  # off
        (True, FILLERS, "standard", NOW - HOUR, False),  # only core work preempts
    ],
)
def test_core_work_past_its_grace_preempts_a_standard_lease_that_borrowed(flagged, policy, task_class, submitted, preempted):
    nodes, leases = _full_fleet(flagged)
    task = a_task("c").gpus(4).submitted(submitted)
    task = task.core() if task_class == "core" else task
    result = run(nodes, [task], leases=leases, **policy)
    assert ([p.lease_id for p in result.preemptions] == ["Ls"]) == preempted


def test_inside_its_grace_a_core_task_takes_only_fillers_at_once():
    """A checkpointing opportunistic lease on node b, a standard filler on node a: inside its grace the core task
    takes the filler (it loses only its write, now or later); the opportunistic lease waits for the grace."""
    standard = a_lease("Ls").on("a").gpus(0, 1, 2, 3).checkpoints_on_preempt().borrows_headroom()
    opportunistic = a_lease("Lo").on("b").gpus(0, 1, 2, 3).checkpoints_on_preempt().opportunistic()
    nodes, leases = a_full_fleet_around(standard.started(NOW - 120).ends(NOW + 5 * HOUR),
                                        opportunistic.started(NOW - 60).ends(NOW + 5 * HOUR))
    result = run(nodes, [a_task("c").core().gpus(4).submitted(NOW - 60)], leases=leases,
                 **dict(FILLERS, fillers_yield_at_once=True))
    assert [p.lease_id for p in result.preemptions] == ["Ls"]


def _filler_beside_opportunistic(checkpoints: bool):
    """Node a: an opportunistic lease on GPUs 0-3 (checkpointing or not) and a standard filler on 4-7; node b full of
    core work."""
    opportunistic = a_lease("Lo").on("a").gpus(0, 1, 2, 3).opportunistic().started(NOW - 60).ends(NOW + 5 * HOUR)
    filler = a_lease("Ls").on("a").gpus(4, 5, 6, 7).checkpoints_on_preempt().borrows_headroom()
    core = a_lease("Lb").on("b").gpus(*range(8)).core().ends(NOW + 9 * HOUR)
    return [a_node("a").free(0), a_node("b").free(0)], [
        opportunistic.checkpoints_on_preempt() if checkpoints else opportunistic,
        filler.started(NOW - 120).ends(NOW + 5 * HOUR), core]


@pytest.mark.parametrize(
    ("at_once", "fillers_at_once", "gpus", "checkpoints", "preempted"),
    [
        ("never", True, 4, True, ["Ls"]),  # fillers at once: only the filler, though the other is cheaper
        ("fillers", True, 4, True, ["Ls"]),  # "fillers" lets only a reservation's holder reclaiming take more
        ("fillers", True, 8, True, []),  # ... so the 8-GPU task, needing both, waits out its grace
        ("checkpointing", False, 4, True, ["Lo"]),  # checkpointing opportunistic leases only
        ("checkpointing", False, 8, True, []),
        ("checkpointing", True, 4, True, ["Lo"]),  # both: either kind, opportunistic first
        ("checkpointing", True, 8, True, ["Lo", "Ls"]),  # ... and both together
        ("checkpointing", True, 8, False, []),  # an opportunistic lease that does not checkpoint keeps the grace
        ("checkpointing", True, 4, False, ["Ls"]),
    ],
)
def test_inside_its_grace_a_core_task_takes_the_union_of_what_each_setting_allows(
        at_once, fillers_at_once, gpus, checkpoints, preempted):
    nodes, leases = _filler_beside_opportunistic(checkpoints)
    task = a_task("c").core().gpus(gpus).submitted(NOW - 60)
    result = run(nodes, [task], leases=leases, preempt_at_once=at_once,
                 **dict(FILLERS, fillers_yield_at_once=fillers_at_once))
    assert sorted(p.lease_id for p in result.preemptions) == preempted


def test_opportunistic_victims_go_before_standard_ones():
    """A cheaper standard filler (started later, same loss) on node a, an opportunistic lease on node b: the
    core task takes the opportunistic one."""
    standard = a_lease("Ls").on("a").gpus(0, 1, 2, 3).checkpoints_on_preempt().borrows_headroom()
    opportunistic = a_lease("Lo").on("b").gpus(0, 1, 2, 3).checkpoints_on_preempt().opportunistic()
    nodes, leases = a_full_fleet_around(standard.started(NOW - 60).ends(NOW + 5 * HOUR),
                                        opportunistic.started(NOW - 120).ends(NOW + 5 * HOUR))
    result = run(nodes, [a_task("c").core().gpus(4).submitted(NOW - HOUR)], leases=leases, **FILLERS)
    assert [p.lease_id for p in result.preemptions] == ["Lo"]


AFTER_OPPORTUNISTIC = dict(FILLERS, fillers_after_opportunistic=True)


@pytest.mark.parametrize(
    ("policy", "opportunistic_gpus", "filled"),
    [
        (FILLERS, 2, True),  # the filler ranks ahead of the opportunistic task and takes the headroom
        (AFTER_OPPORTUNISTIC, 2, False),  # a ready opportunistic task would borrow it: the filler waits
        (AFTER_OPPORTUNISTIC, 8, True),  # one the free GPUs could not hold lends nothing: the filler takes them
    ],
)
def test_a_filler_leaves_the_headroom_to_opportunistic_work_that_would_borrow_it(policy, opportunistic_gpus, filled):
    queue = [a_task("s").gpus(4).runs(2 * HOUR).checkpoints(), a_task("o").opportunistic().gpus(opportunistic_gpus)]
    result = run(FULL_BUT_HEADROOM, queue, **policy)
    assert ("s" in grants(result)) == filled
    if not filled:
        assert reason_of(result, "s") == R.HEADROOM and "o" in grants(result)


@pytest.mark.parametrize(("quota_gpu_hours", "filled"), [(100.0, False), (0.5, True)])
def test_opportunistic_work_its_quota_refuses_leaves_the_headroom_to_a_filler(quota_gpu_hours, filled):
    """`fillers_after_opportunistic` keeps the filler out only for opportunistic work that would borrow the GPUs: one
    whose project's quota refuses it (2 GPUs for an hour against 0.5 GPU-hours) borrows nothing, so the filler may."""
    queue = [a_task("s").gpus(4).runs(2 * HOUR).checkpoints(),
             a_task("o").opportunistic().gpus(2).runs(HOUR).project("q")]
    result = run(FULL_BUT_HEADROOM, queue, quotas=[a_quota("q", gpu_hours=quota_gpu_hours)], **AFTER_OPPORTUNISTIC)
    assert ("s" in grants(result)) == filled and ("o" in grants(result)) != filled
    if filled:
        assert grants(result)["s"].borrowed_headroom and reason_of(result, "o") == R.QUOTA_EXHAUSTED
