"""Preemption: core work takes GPUs back from opportunistic leases — the cheapest ones, and only those."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.scheduling.model import DeferralReason as R
from shared.scheduling.model import Node, Preemption
from shared.scheduling.placement import Fleet
from shared.scheduling.preemption import VictimIndex

from . import builders
from .builders import HOUR, IMMEDIATE_PREEMPTION, NOW, a_lease, a_node, a_task, deferrals, grants, reason_of


def run(*args, **kwargs):
    """Plan with immediate preemption (no grace, no loss cap) unless a test says otherwise."""
    return builders.run(*args, **{**IMMEDIATE_PREEMPTION, **kwargs})

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


def test_a_victim_that_checkpoints_on_preemption_loses_only_the_write():
    leases = [opp("long-ckpt", 0, 1, 2, 3, started=NOW - 5 * HOUR).checkpoints_on_preempt(),  # 4 GPUs x 60 s
              opp("young", 4, 5, 6, 7, started=NOW - HOUR)]  # no checkpoints: loses 4 GPU-h
    result = run(FULL, [a_task("c").core().gpus(4)], leases=leases)
    assert result.preemptions == (Preemption("long-ckpt", "run-long-ckpt", "c", pytest.approx(4 * 60 / 3600)),)


def test_a_checkpointing_victim_never_loses_more_than_its_progress_since_its_last_checkpoint():
    leases = [opp("fresh", 0, 1, 2, 3, 4, 5, 6, 7, started=NOW - 5 * HOUR, checkpoint=NOW - 30).checkpoints_on_preempt()]
    result = run(FULL, [a_task("c").core().gpus(8)], leases=leases)
    assert result.preemptions == (Preemption("fresh", "run-fresh", "c", pytest.approx(8 * 30 / 3600)),)


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


# -- when: the grace before preempting, and the most a victim may lose ------------------------

def test_a_core_task_inside_its_grace_waits_and_asks_to_be_revisited_when_it_ends():
    leases = [opp("o", *range(8), started=NOW - 60).checkpoints_on_preempt()]
    task = a_task("c").core().gpus(4).submitted(NOW - 100)
    result = builders.run(FULL, [task], leases=leases, preempt_after_s=600)
    assert not result.preemptions
    assert result.revisit_at == NOW + 500
    assert reason_of(result, "c") != R.AWAITING_PREEMPTION
    assert deferrals(result)["c"].detail.endswith("; if still waiting in 8m, it may preempt opportunistic work")


def test_a_core_task_whose_grace_is_over_preempts():
    leases = [opp("o", *range(8), started=NOW - 60).checkpoints_on_preempt()]
    task = a_task("c").core().gpus(4).submitted(NOW - 600)
    result = builders.run(FULL, [task], leases=leases, preempt_after_s=600)
    assert [p.lease_id for p in result.preemptions] == ["o"]
    assert result.revisit_at is None


def test_the_revisit_time_is_the_earliest_grace_end_among_waiting_core_tasks():
    leases = [opp("o", *range(8), started=NOW - 60).checkpoints_on_preempt()]
    tasks = [a_task(f"c{i}").core().gpus(8).submitted(NOW - age) for i, age in enumerate((10, 300, 50))]
    result = builders.run(FULL, tasks, leases=leases, preempt_after_s=600)
    assert result.revisit_at == NOW + 300


def test_a_lease_that_would_lose_more_than_the_cap_is_never_a_victim():
    leases = [opp("no-ckpt", 0, 1, 2, 3, started=NOW - HOUR),  # would lose 4 GPU-h
              opp("ckpt", 4, 5, 6, 7, started=NOW - 5 * HOUR).checkpoints_on_preempt()]  # 4 GPUs x 60 s
    capped = dict(preempt_after_s=0.0, preempt_max_lost_gpu_hours=0.25)
    result = builders.run(FULL, [a_task("c").core().gpus(8)], leases=leases, **capped)
    assert not result.preemptions  # only 4 GPUs can be freed within the cap
    result = builders.run(FULL, [a_task("c").core().gpus(4)], leases=leases, **capped)
    assert [p.lease_id for p in result.preemptions] == ["ckpt"]


def test_the_cardflow_preset_waits_ten_minutes_and_preempts_only_victims_losing_no_more_than_their_write():
    from shared.scheduling.policies import POLICIES

    cardflow = POLICIES["cardflow"]
    assert (cardflow.preempt_after_s, cardflow.preempt_max_lost_gpu_hours) == (600.0, None)


def test_by_default_a_victim_may_lose_only_its_own_checkpoint_write():
    """4 GPUs x 60 s = 1/15 GPU-hour: a lease that checkpoints on preemption is a victim whatever its
    size or age; one that does not only within its first minute."""
    leases = [opp("old", 0, 1, started=NOW - 120),  # 2 GPUs x 120 s > its write (2 x 60 s)
              opp("fresh", 2, 3, started=NOW - 30),  # 2 GPUs x 30 s: less than its write
              opp("ckpt", 4, 5, 6, 7, started=NOW - 5 * HOUR).checkpoints_on_preempt()]
    immediate = dict(preempt_after_s=0.0)
    result = builders.run(FULL, [a_task("c").core().gpus(6)], leases=leases, **immediate)
    assert sorted(p.lease_id for p in result.preemptions) == ["ckpt", "fresh"]
    result = builders.run(FULL, [a_task("c").core().gpus(8)], leases=leases, **immediate)
    assert not result.preemptions  # "old" would lose more than its write


# -- Reclaiming at once (opt-in): victims that lose only their checkpoint write ----------------------

def _one_victim_beside_standard_work(checkpoints: bool):
    """Node a: GPU 0 held by an opportunistic lease — one that checkpoints on preemption (it loses its write,
    1 GPU x 60 s) or one without checkpoints that started 30 s ago (it loses those 30 s and restarts from
    nothing); GPUs 1-7 by standard work."""
    victim = opp("ckpt", 0, started=NOW - 5 * HOUR).checkpoints_on_preempt() if checkpoints else opp("young", 0, started=NOW - 30)
    return [victim, a_lease("std").on("a").gpus(*range(1, 8)).ends(NOW + 10 * HOUR)]


@pytest.mark.parametrize(
    ("at_once", "checkpoints", "cap", "waited_s", "preempted"),
    [
        ("never", True, None, 100, False),  # the setting off (every preset): the grace (600 s) first
        ("fillers", True, None, 100, True),  # c holds the reservation: work that checkpoints yields to it at once
        ("fillers", False, None, 100, False),
        ("checkpointing", True, None, 100, True),  # a victim losing only its write is taken at once
        ("checkpointing", True, None, 0, True),  # ... even by a task submitted this instant
        ("checkpointing", False, None, 100, False),  # one that does not checkpoint still waits for the grace
        ("checkpointing", False, None, 600, True),  # ... and is a victim once it is over, as before
        ("checkpointing", True, 0.25, 100, True),  # a numeric cap: a checkpointing victim still loses only its write
        ("checkpointing", True, 0.001, 100, False),  # a cap below its write: never a victim
    ],
)
def test_with_preempt_at_once_core_work_takes_victims_that_checkpoint_without_the_grace(
        at_once, checkpoints, cap, waited_s, preempted):
    task = a_task("c").core().gpus(1).submitted(NOW - waited_s)
    result = builders.run(FULL, [task], leases=_one_victim_beside_standard_work(checkpoints), preempt_after_s=600,
                          preempt_max_lost_gpu_hours=cap, preempt_at_once=at_once)
    assert (len(result.preemptions) == 1) == preempted
    assert (reason_of(result, "c") == R.AWAITING_PREEMPTION) == preempted


@pytest.mark.parametrize("fillers_at_once", [True, False])
def test_with_preempt_at_once_fillers_only_the_reservation_holder_takes_victims_inside_its_grace(fillers_at_once):
    """c2 may preempt inside its grace with fillers yielding at once (the cardflow preset), but only standard fillers:
    the opportunistic victims "fillers" lets the holder take at once stay the holder's."""
    leases = [opp("o1", 0, 1, 2, 3, started=NOW - 5 * HOUR).checkpoints_on_preempt(),
              opp("o2", 4, 5, 6, 7, started=NOW - 5 * HOUR).checkpoints_on_preempt()]
    tasks = [a_task("c1").core().gpus(4).priority(9).submitted(NOW - 100), a_task("c2").core().gpus(4).submitted(NOW - 100)]
    result = builders.run(FULL, tasks, leases=leases, preempt_after_s=600, preempt_at_once="fillers",
                          fillers_yield_at_once=fillers_at_once)
    assert [p.for_task_id for p in result.preemptions] == ["c1"]
    assert reason_of(result, "c2") != R.AWAITING_PREEMPTION
    result = builders.run(FULL, tasks, leases=leases, preempt_after_s=600, preempt_at_once="checkpointing")
    assert [p.for_task_id for p in result.preemptions] == ["c1", "c2"]


def test_an_unknown_preempt_at_once_is_refused_with_the_known_values():
    with pytest.raises(ValueError, match="unknown preempt_at_once 'soon'; known: never, fillers, checkpointing"):
        builders.run(FULL, [a_task("c").core()], preempt_at_once="soon")


def test_with_preempt_at_once_a_fresh_core_task_takes_the_cheapest_checkpointing_victim():
    leases = [opp("young", 0, 1, 2, 3, started=NOW - 10),  # loses 4 GPUs x 10 s, less than the other, but no checkpoint
              opp("long", 4, 5, 6, 7, started=NOW - 5 * HOUR).checkpoints_on_preempt()]
    task = a_task("c").core().gpus(4).submitted(NOW)
    result = builders.run(FULL, [task], leases=leases, preempt_after_s=600, preempt_at_once="checkpointing")
    assert result.preemptions == (Preemption("long", "run-long", "c", pytest.approx(4 * 60 / 3600)),)
    older = builders.run(FULL, [task.submitted(NOW - 600)], leases=leases, preempt_after_s=600, preempt_at_once="checkpointing")
    assert [p.lease_id for p in older.preemptions] == ["young"]  # past its grace: the cheapest of all, as before


def test_with_preempt_at_once_a_victim_taken_at_once_is_no_victim_for_a_later_task():
    leases = [opp("long", *range(8), started=NOW - 5 * HOUR).checkpoints_on_preempt()]
    tasks = [a_task("c1").core().gpus(4).submitted(NOW), a_task("c2").core().gpus(4).submitted(NOW - 600)]
    result = builders.run(FULL, tasks, leases=leases, preempt_after_s=600, preempt_at_once="checkpointing")
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == [("long", "c2")]  # c2 comes first: older
    assert reason_of(result, "c1") != R.AWAITING_PREEMPTION
    tasks[0] = tasks[0].priority(9)  # c1 first: it takes the victim at once, c2 (past its grace) finds none
    result = builders.run(FULL, tasks, leases=leases, preempt_after_s=600, preempt_at_once="checkpointing")
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == [("long", "c1")]


def test_with_preempt_at_once_a_victim_taken_at_once_is_gone_from_the_index_built_before():
    """c0 (first, inside its grace) cannot be helped by the checkpointing victim alone and is told of its
    grace (which reads every victim); c1 (inside its grace) then takes "long" at once; c2 (past its grace)
    must not take "long" again, although it would be the cheapest."""
    leases = [opp("long", 0, 1, 2, 3, started=NOW - 5 * HOUR, checkpoint=NOW - 5).checkpoints_on_preempt(),
              opp("young", 4, 5, 6, 7, started=NOW - 10)]
    tasks = [a_task("c0").core().gpus(8).priority(10).submitted(NOW), a_task("c1").core().gpus(4).priority(9).submitted(NOW),
             a_task("c2").core().gpus(4).submitted(NOW - 600)]
    result = builders.run(FULL, tasks, leases=leases, preempt_after_s=600, preempt_at_once="checkpointing")
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == [("long", "c1"), ("young", "c2")]


def test_with_preempt_at_once_a_core_task_whose_victim_does_not_checkpoint_is_told_of_its_grace():
    result = builders.run(FULL, [a_task("c").core().gpus(1).submitted(NOW - 100)],
                          leases=_one_victim_beside_standard_work(checkpoints=False), preempt_after_s=600,
                          preempt_at_once="checkpointing")
    assert not result.preemptions
    assert result.revisit_at == NOW + 500
    assert deferrals(result)["c"].detail.endswith("; if still waiting in 8m, it may preempt opportunistic work")


# -- A preemption must pay: never free GPUs the preempting task could not use ------------------------

def _reserved_drain(core_runs_s: float):
    """Node b is reserved for c1 (8 GPUs, first in order, inside its grace, so it reserves instead of preempting) at
    +1h, when standard Lb ends; opportunistic F (checkpoints) fills b's other half meanwhile. c2 (core,
    4 GPUs, grace over) finds no free GPU anywhere."""
    nodes = [a_node("a").free(0), a_node("b").free(0)]
    leases = [a_lease("La").on("a").gpus(*range(8)).ends(NOW + 10 * HOUR),
              a_lease("Lb").on("b").gpus(0, 1, 2, 3).ends(NOW + HOUR),
              a_lease("F").on("b").gpus(4, 5, 6, 7).opportunistic().started(NOW - 5 * HOUR)
              .ends(NOW + 10 * HOUR).checkpoints_on_preempt()]
    tasks = [a_task("c1").core().gpus(8).priority(9).submitted(NOW).runs(HOUR),
             a_task("c2").core().gpus(4).submitted(NOW - HOUR).runs(core_runs_s)]
    return builders.run(nodes, tasks, leases=leases)


def test_a_core_task_does_not_preempt_work_whose_gpus_the_reservation_keeps_from_it():
    result = _reserved_drain(core_runs_s=5 * HOUR)  # c2 would still run at c1's start
    assert result.reservations[0].task_id == "c1"
    assert not result.preemptions  # F's GPUs would only idle until c1 starts: no victim's work is thrown away
    assert reason_of(result, "c2") != R.AWAITING_PREEMPTION


def test_a_core_task_that_ends_before_the_reservation_may_still_preempt_there():
    result = _reserved_drain(core_runs_s=HOUR / 4)
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == [("F", "c2")]


# -- Preemption that pays (opt-in): a lease ending within the grace is spared --------------------------

@pytest.mark.parametrize(
    ("ends_in", "spares", "preempted"),
    [
        (600, True, False),  # ends within the grace: it gives its GPUs back about as soon by itself
        (300, True, False),
        (601, True, True),
        (-60, True, True),  # past its estimate: when it ends is unknown, so it is not spared
        (300, False, True),  # the setting off (every preset): preempted as before
    ],
)
def test_with_spares_ending_a_lease_that_ends_within_the_grace_is_never_a_victim(ends_in, spares, preempted):
    leases = [opp("o", *range(8), started=NOW - HOUR).checkpoints_on_preempt().ends(NOW + ends_in)]
    task = a_task("c").core().gpus(4).submitted(NOW - 600)
    result = builders.run(FULL, [task], leases=leases, preempt_after_s=600, preemption_spares_ending=spares)
    assert ([p.lease_id for p in result.preemptions] == ["o"]) == preempted


def test_with_spares_ending_the_cheapest_victim_that_does_not_end_soon_is_chosen():
    leases = [opp("ending", 0, 1, 2, 3, started=NOW - HOUR).checkpoints_on_preempt().ends(NOW + 120),
              opp("long", 4, 5, 6, 7, started=NOW - 5 * HOUR).checkpoints_on_preempt().ends(NOW + 5 * HOUR)]
    task = a_task("c").core().gpus(4).submitted(NOW - 600)
    result = builders.run(FULL, [task], leases=leases, preempt_after_s=600, preemption_spares_ending=True)
    assert [p.lease_id for p in result.preemptions] == ["long"]


# -- Preemption that pays for its loss (opt-in): the reservation's holder within a budget -------------

def _budget_run(tasks, leases, share: float, nodes=FULL, **policy):
    """The cardflow defaults (grace 600 s, loss cap = the victim's own write, fillers yielding at once: a core task
    inside its grace may preempt, but never within a budget) with a budget share."""
    return builders.run(nodes, tasks, leases=leases, preempt_after_s=600, preemption_budget_share=share, **policy)


@pytest.mark.parametrize(
    ("share", "standard_ends_in", "submitted_ago", "preempted"),
    [
        (0.0, 2 * HOUR, 600, False),  # off (every preset): the victim would lose more than its write
        (1.0, 2 * HOUR, 600, True),  # loses 4 GPU-h; the 4-GPU holder would wait 2 h: budget 8 GPU-h
        (0.5, 2 * HOUR, 600, True),  # budget 4 GPU-h: exactly the loss
        (0.5, 1.9 * HOUR, 600, False),  # budget 3.8 GPU-h < 4
        (1.0, 2 * HOUR, 599, False),  # still inside its grace (where fillers, or with preempt_at_once victims
        # that checkpoint, may be taken: not this one)
    ],
)
@pytest.mark.parametrize("at_once", ["never", "checkpointing"])
def test_with_a_budget_the_holder_preempts_work_losing_at_most_a_share_of_its_wait(
        share, standard_ends_in, submitted_ago, preempted, at_once):
    leases = [opp("o", 0, 1, 2, 3, started=NOW - HOUR).ends(NOW + 10 * HOUR),  # no checkpoints: loses 4 GPU-h
              a_lease("s").on("a").gpus(4, 5, 6, 7).ends(NOW + standard_ends_in)]
    result = _budget_run([a_task("c").core().gpus(4).submitted(NOW - submitted_ago)], leases, share,
                         preempt_at_once=at_once)
    assert [p.lease_id for p in result.preemptions] == (["o"] if preempted else [])
    assert reason_of(result, "c") == (R.AWAITING_PREEMPTION if preempted else R.RESERVED)


def test_with_a_budget_the_cheapest_victims_are_chosen_whole_nodes_for_a_wide_task():
    nodes = [a_node("a").free(0), a_node("b").free(0), a_node("c").free(0)]
    leases = [opp("young1", 0, 1, 2, 3, started=NOW - HOUR / 2, node="a").ends(NOW + 10 * HOUR),  # 2 GPU-h
              opp("young2", 4, 5, 6, 7, started=NOW - HOUR / 2, node="a").ends(NOW + 10 * HOUR),  # 2 GPU-h
              opp("old", *range(8), started=NOW - 2 * HOUR, node="b").ends(NOW + 10 * HOUR),  # 16 GPU-h
              a_lease("s").on("c").gpus(*range(8)).ends(NOW + 3 * HOUR)]
    result = _budget_run([a_task("c").core().gpus(8).submitted(NOW - 600)], leases, 1.0, nodes)
    assert sorted(p.lease_id for p in result.preemptions) == ["young1", "young2"]  # 4 GPU-h of a budget of 24


def test_with_a_budget_only_a_core_holder_preempts():
    leases = [opp("o", 0, 1, 2, 3, started=NOW - HOUR).ends(NOW + 10 * HOUR),
              a_lease("s").on("a").gpus(4, 5, 6, 7).ends(NOW + 5 * HOUR)]
    result = _budget_run([a_task("std").gpus(4).submitted(NOW - HOUR)], leases, 1.0)
    assert not result.preemptions
    assert reason_of(result, "std") == R.RESERVED


def test_a_victim_the_budget_took_is_not_taken_again_in_the_same_cycle():
    leases = [opp("fresh", 0, 1, 2, 3, started=NOW - 30).ends(NOW + 10 * HOUR),  # within its write: any core task's
              opp("old", 4, 5, 6, 7, started=NOW - HOUR).ends(NOW + 10 * HOUR)]  # only the budget's
    nodes = [a_node("a").free(0), a_node("b").free(0)]
    leases.append(a_lease("s").on("b").gpus(*range(8)).ends(NOW + 3 * HOUR))
    tasks = [a_task("c1").core().gpus(8).priority(9).submitted(NOW - 600),
             a_task("c2").core().gpus(4).submitted(NOW - 600)]
    result = _budget_run(tasks, leases, 1.0, nodes)
    assert sorted((p.lease_id, p.for_task_id) for p in result.preemptions) == [("fresh", "c1"), ("old", "c1")]
    assert reason_of(result, "c2") != R.AWAITING_PREEMPTION


@pytest.mark.parametrize(
    ("free_on_a", "basis", "preempted"),
    [
        (2, "drain", True),  # 2 reserved GPUs idle for 2 h: budget 4 GPU-h, the victim loses 4
        (1, "drain", False),  # 1 idle GPU: budget 2 GPU-h
        (1, "wait", True),  # the holder's 4 GPUs for 2 h: budget 8 GPU-h
    ],
)
def test_with_the_drain_basis_the_budget_is_what_the_reservation_holds_idle(free_on_a, basis, preempted):
    nodes = [a_node("a").free(free_on_a)]
    leases = [opp("o", 0, 1, 2, 3, started=NOW - HOUR).ends(NOW + 10 * HOUR),  # no checkpoints: loses 4 GPU-h
              a_lease("s").on("a").gpus(*range(4, 8 - free_on_a)).ends(NOW + 2 * HOUR)]
    task = a_task("c").core().gpus(4).submitted(NOW - 600)
    result = builders.run(nodes, [task], leases=leases, preempt_after_s=600, preemption_budget_share=1.0,
                          preemption_budget_basis=basis)
    assert [p.lease_id for p in result.preemptions] == (["o"] if preempted else [])


# Under fifo a preempted task goes back into the queue at its submission time. A victim submitted before the
# preempting task would be ahead of it there and get the GPUs it gave up back at the next plan — which preempts it
# again: the plan never settles (found by the no-starvation property). So only later-submitted work is a victim.
@pytest.mark.parametrize(("victim_submitted", "preempted"), [
    (NOW - 2 * HOUR, False),  # ahead of the core task in fifo order: no victim
    (NOW - HOUR, False),  # submitted at the same moment, smaller task id ("run-..." < "z-core"): ahead too
    (NOW - HOUR / 2, True),  # behind it: a victim as in every other order
    (None, True),  # submission unknown: ranks behind every task
])
def test_under_fifo_a_task_preempts_only_work_submitted_after_it(victim_submitted, preempted):
    lease = opp("o", *range(8), started=NOW - 10).checkpoints_on_preempt()
    if victim_submitted is not None:
        lease = lease.submitted(victim_submitted)
    core = a_task("z-core").core().gpus(4).submitted(NOW - HOUR)
    result = run(FULL, [core], leases=[lease], order="fifo")
    assert [p.lease_id for p in result.preemptions] == (["o"] if preempted else [])


@pytest.mark.parametrize("order", ["cardflow", "priority"])
def test_orders_that_rank_by_class_first_preempt_earlier_submitted_work_too(order):
    lease = opp("o", *range(8), started=NOW - 10).checkpoints_on_preempt().submitted(NOW - 2 * HOUR)
    result = run(FULL, [a_task("c").core().gpus(4).submitted(NOW - HOUR)], leases=[lease], order=order)
    assert [p.lease_id for p in result.preemptions] == ["o"]


def test_a_pool_whose_victims_are_taken_offers_a_spanning_task_no_choice_without_reading_its_nodes(monkeypatch):
    """`VictimIndex._choose_span`: with no victim left on the pool there is no choice, and a heavy task's free GPUs
    are not summed over the pool's nodes first (the core-heavy variant of the scale headline asked 13 times a plan,
    over 2,000–3,000 nodes each)."""
    nodes = [Node("a", "H100", 8, frozenset(range(4))), Node("b", "H100", 8, frozenset())]
    fleet = Fleet(nodes, 8, lambda card_type, total: 0)
    victim = opp("v", *range(8), started=NOW - HOUR, node="b").build()
    index, pool = VictimIndex([victim], fleet, NOW), fleet.pools["H100"]
    choice = index.choose(fleet, pool, 12, True)
    assert choice is not None and [item.lease.lease_id for item in choice.victims] == ["v"]  # 4 free + 8 freed
    index.commit(choice, fleet)
    read = []
    usable_free = Fleet.usable_free
    monkeypatch.setattr(Fleet, "usable_free", lambda self, rank, heavy: read.append(rank) or usable_free(self, rank, heavy))
    assert index.choose(fleet, pool, 12, True) is None
    assert index.choose(fleet, pool, 12, False) is None
    assert read == []


def _victim_world(data, node_count: int):
    """Nodes of 4 H100 GPUs (some free, some running heavy work), the rest held by opportunistic leases, and the
    loss cap that protects some of them."""
    nodes, leases = [], []
    for i in range(node_count):
        free = data.draw(st.integers(0, 4))
        nodes.append(Node(f"n{i}", "H100", 4, frozenset(range(free)), data.draw(st.integers(0, 2))))
        busy = list(range(free, 4))
        while busy:
            size = data.draw(st.integers(1, len(busy)))
            lease = opp(f"l{i}-{busy[0]}", *busy[:size], started=NOW - data.draw(st.integers(1, 4)) * HOUR, node=f"n{i}")
            leases.append((lease.heavy() if data.draw(st.booleans()) else lease).build())
            busy = busy[size:]
    return nodes, leases


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_victim_search_said_to_fail_again_fails_and_not_making_it_changes_no_later_choice(data):
    """`VictimIndex.fails_again`: two copies of one cycle take the same grants, guard charges, placement failures and
    victim searches (under a guard's limit or none), but one skips every search `fails_again` answers: that search
    would have found none, and every choice of both copies, then and later, is the same."""
    nodes, leases = _victim_world(data, data.draw(st.integers(1, 4)))
    caps = {rank: data.draw(st.integers(0, 4)) for rank in range(len(nodes)) if data.draw(st.booleans())}
    worlds = []
    for _ in range(2):
        fleet = Fleet(nodes, 2, lambda card_type, total: 0)
        worlds.append((fleet, VictimIndex(leases, fleet, NOW, max_lost_gpu_hours=6.0), dict(caps)))

    def said(choice):
        return None if choice is None else ([victim.lease.lease_id for victim in choice.victims], choice.holds)

    for _ in range(data.draw(st.integers(1, 30))):
        action = data.draw(st.sampled_from(["search", "search", "search", "grant", "charge", "place"]))
        rank, count = data.draw(st.integers(0, len(nodes) - 1)), data.draw(st.integers(1, 4))
        heavy, under_limit, commit = data.draw(st.booleans()), data.draw(st.booleans()), data.draw(st.booleans())
        choices = []
        for skipping, (fleet, index, limit) in enumerate(worlds):
            pool = fleet.pools["H100"]
            if action == "grant":
                taken = min(count, fleet.free_count[rank])
                if taken:
                    fleet.take([(rank, taken)], heavy)
            elif action == "charge" and rank in limit:  # as `ReservationGuard.charge`: only the reserved nodes
                limit[rank] -= count
            elif action == "place":
                fleet.place(pool, count, heavy)
            elif action == "search":
                within, version = (limit, sum(limit.values())) if under_limit else (None, None)
                if skipping and index.fails_again(pool, count, heavy, within, version):
                    choices.append("skipped")
                    continue
                choice = index.choose(fleet, pool, count, heavy, within, version)
                choices.append(said(choice))
                if choice is not None and commit:
                    for held_rank, held in choice.holds:
                        fleet.hold(held_rank, held)
                    index.commit(choice, fleet)
        if action == "search":
            plain, memo = choices
            assert memo == plain or (memo == "skipped" and plain is None)
    for gpus in range(1, 9):
        for heavy in (False, True):
            assert said(worlds[0][1].choose(worlds[0][0], worlds[0][0].pools["H100"], gpus, heavy)) == \
                said(worlds[1][1].choose(worlds[1][0], worlds[1][0].pools["H100"], gpus, heavy))


def test_a_victim_search_that_failed_is_made_again_once_victims_were_taken():
    """`VictimIndex.fails_again`: node a had room for 1 GPU, so the search for 1 GPU under a limit that rules out node b
    dropped it; once a 4-GPU task took two victims on a and held its free GPUs, a needs preemption for 1 GPU too
    (`commit` pushes it back) — the failure is not said again, and the search finds a's last victim."""
    nodes = [Node("a", "H100", 8, frozenset({0, 1})), Node("b", "H100", 8, frozenset())]
    fleet = Fleet(nodes, 2, lambda card_type, total: 0)
    leases = [opp("a1", 2, started=NOW - 60, node="a").build(), opp("a2", 3, started=NOW - 60, node="a").build(),
              opp("a3", 4, 5, 6, 7, started=NOW - HOUR, node="a").build(),
              opp("b1", *range(8), started=NOW - HOUR, node="b").build()]
    index, pool, limit = VictimIndex(leases, fleet, NOW), fleet.pools["H100"], {fleet.rank_of["b"]: 0}
    assert index.choose(fleet, pool, 1, False, limit, 0) is None
    assert not index.fails_again(pool, 1, False, limit, 0)  # a node has room for it: not said either
    wide = index.choose(fleet, pool, 4, False)
    assert wide is not None and [victim.lease.lease_id for victim in wide.victims] == ["a1", "a2"]
    for rank, held in wide.holds:
        fleet.hold(rank, held)
    index.commit(wide, fleet)
    assert pool.free_total == 0 and not index.fails_again(pool, 1, False, limit, 0)
    again = index.choose(fleet, pool, 1, False, limit, 0)
    assert again is not None and [victim.lease.lease_id for victim in again.victims] == ["a3"]
