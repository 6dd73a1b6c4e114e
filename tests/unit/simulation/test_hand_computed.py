"""A five-task trace on one 4-GPU node whose waits were computed by hand for every policy.

    task  submit  GPUs  run  class     data ready
    A        0     2    100  standard  0
    B       10     3     50  standard  10
    C       20     1     30  standard  20
    D       30     2    200  standard  30
    E       40     1     20  core      60   (estimates = run times)

fifo: A runs 0-100; B blocks the line until A ends; at 100 B and C start (C fits beside B), D
  blocks; at 150 D and E start (E's data has long been ready).
priority: like fifo, but core E jumps the queue at 40 and, readiness-blind, holds its GPU idle
  until its data arrives at 60 (wait 20, 20 idle GPU-seconds).
easy-backfill: B reserves t=100; C (ends 50) and E (estimated end 60) backfill; D would run past
  100 on GPUs the reservation needs, so it waits for B; E still holds its GPU idle 40-60.
cardflow: as easy-backfill, but E is not started before its data is ready (starts at 60, no idle
  GPU); the one GPU of headroom (10% of 4, rounded up) never stops B (3 of 4) or D (2 of 4) here.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.scheduling.model import PriorityClass, Profile
from shared.scheduling.policies import POLICIES
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.engine import Simulation
from shared.simulation.metrics import deadline_outcomes
from shared.simulation.workload import SimTask

STANDARD, CORE, OPPORTUNISTIC = PriorityClass.STANDARD, PriorityClass.CORE, PriorityClass.OPPORTUNISTIC


def task(task_id: str, submit: float, gpus: int, run: float, klass: PriorityClass = STANDARD,
         ready: float | None = None, checkpoint: float | None = None) -> SimTask:
    return SimTask(task_id, submit, gpus, run, run, klass, 0, "p", (), None, 0.0,
                   submit if ready is None else ready, checkpoint, Profile.BALANCED, False)


TRACE = [
    task("A", 0, 2, 100), task("B", 10, 3, 50), task("C", 20, 1, 30), task("D", 30, 2, 200),
    task("E", 40, 1, 20, CORE, ready=60),
]

EXPECTED_WAITS = {
    "fifo": {"A": 0, "B": 90, "C": 80, "D": 120, "E": 110},
    "priority": {"A": 0, "B": 90, "C": 80, "D": 120, "E": 20},
    "easy-backfill": {"A": 0, "B": 90, "C": 0, "D": 120, "E": 20},
    "cardflow": {"A": 0, "B": 90, "C": 0, "D": 120, "E": 20},
}
EXPECTED_IDLE_GPU_S = {"fifo": 0, "priority": 20, "easy-backfill": 20, "cardflow": 0}


@pytest.mark.parametrize("name", list(EXPECTED_WAITS))
def test_waits_match_the_hand_computation(name: str) -> None:
    outcome = Simulation(TRACE, parse_cluster_spec("X:1x4"), POLICIES[name]).run()
    recorder = outcome.recorder
    assert recorder.waits == EXPECTED_WAITS[name]
    assert sum((end - start) * gpus for start, end, gpus in recorder.idle) == EXPECTED_IDLE_GPU_S[name]
    assert recorder.last_finish == 350  # D runs 150-350 under every policy
    assert recorder.preemptions == 0


PREEMPTION_TRACE = [task("O", 0, 2, 100, OPPORTUNISTIC, checkpoint=30), task("K", 50, 2, 10, CORE)]
# cardflow, but preempting at once and whatever the victim loses (the mechanics under test below).
IMMEDIATE = replace(POLICIES["cardflow"], preempt_after_s=0.0, preempt_max_lost_gpu_hours=float("inf"))


def test_cardflow_preempts_opportunistic_work_for_core_work() -> None:
    """O checkpoints at 30; K preempts it at 50 (20 s x 2 GPUs lost), runs 50-60; O resumes at 60
    with 70 s left and ends at 130."""
    recorder = Simulation(PREEMPTION_TRACE, parse_cluster_spec("X:1x2"), IMMEDIATE).run().recorder
    assert recorder.waits == {"O": 0, "K": 0}
    assert recorder.jcts == {"K": 10, "O": 130}
    assert recorder.preemptions == 1
    assert recorder.lost == [(30, 50, 2)]


def test_easy_backfill_makes_core_work_wait_instead() -> None:
    recorder = Simulation(PREEMPTION_TRACE, parse_cluster_spec("X:1x2"), POLICIES["easy-backfill"]).run().recorder
    assert recorder.waits == {"O": 0, "K": 50}
    assert recorder.preemptions == 0


@pytest.mark.parametrize(("checkpoint", "lost", "o_jct"), [
    (600, [(340, 400, 2)], 1070),  # checkpoints on the PreemptCommand: loses the 60 s write; 660 s left
    (None, [(0, 400, 2)], 1410),  # cannot checkpoint: starts over at 410
])
def test_cardflow_preemption_keeps_what_the_victim_could_checkpoint(checkpoint, lost, o_jct) -> None:
    """O (2 GPUs, 1000 s) runs from 0; core K arrives at 400 and preempts it, runs 400-410; O resumes
    at 410 with what it kept."""
    trace = [task("O", 0, 2, 1000, OPPORTUNISTIC, checkpoint=checkpoint), task("K", 400, 2, 10, CORE)]
    recorder = Simulation(trace, parse_cluster_spec("X:1x2"), IMMEDIATE).run().recorder
    assert recorder.preemptions == 1
    assert recorder.lost == lost
    assert recorder.jcts == {"K": 10, "O": o_jct}


def test_cardflow_core_work_preempts_only_once_its_grace_is_over() -> None:
    """O (2 GPUs, 3000 s, checkpoints every 600 s) runs from 0; core K arrives at 400. The cardflow
    preset lets K wait `preempt_after_s` = 600 s first: at 1000 (nothing else happens then, the
    plan's revisit time wakes the simulator) K preempts O, which writes a checkpoint (loses the 60 s
    write: 940-1000), K runs 1000-1010, O resumes at 1010 with 2060 s left and ends at 3070."""
    assert POLICIES["cardflow"].preempt_after_s == 600
    trace = [task("O", 0, 2, 3000, OPPORTUNISTIC, checkpoint=600), task("K", 400, 2, 10, CORE)]
    recorder = Simulation(trace, parse_cluster_spec("X:1x2"), POLICIES["cardflow"]).run().recorder
    assert recorder.waits == {"O": 0, "K": 600}
    assert recorder.preemptions == 1
    assert recorder.lost == [(940, 1000, 2)]
    assert recorder.jcts == {"K": 610, "O": 3070}


def test_cardflow_never_preempts_a_victim_that_would_lose_much_work() -> None:
    """Same, but O cannot checkpoint: at 1000 preempting it would throw away 1000 s x 2 GPUs = 0.56
    GPU-h, more than its own checkpoint write would cost (2 GPUs x 60 s, the preset's loss cap), so K
    waits until O ends."""
    trace = [task("O", 0, 2, 3000, OPPORTUNISTIC), task("K", 400, 2, 10, CORE)]
    recorder = Simulation(trace, parse_cluster_spec("X:1x2"), POLICIES["cardflow"]).run().recorder
    assert recorder.preemptions == 0
    assert recorder.waits == {"O": 0, "K": 2600}


DRAIN_TRACE = [task("L", 0, 2, 1000), task("W", 10, 4, 100), task("F", 20, 2, 3000, OPPORTUNISTIC, checkpoint=600)]


def test_cardflow_fills_the_drain_and_the_filler_yields_when_the_reservation_is_due() -> None:
    """4 GPUs. L holds 2 until 1000; W (4 GPUs) reserves t=1000. Opportunistic F (checkpoints) fills
    the 2 idle GPUs at 20 instead of waiting; at 1000 W's reservation is due (its grace ended at
    610), so W preempts F, which writes a checkpoint (loses the 60 s write: 940-1000); W runs
    1000-1100 as reserved; F resumes at 1100 with 3000 - 920 = 2080 s left and ends at 3180."""
    recorder = Simulation(DRAIN_TRACE, parse_cluster_spec("X:1x4"), POLICIES["cardflow"]).run().recorder
    assert recorder.waits == {"L": 0, "W": 990, "F": 0}
    assert recorder.preemptions == 1
    assert recorder.lost == [(940, 1000, 2)]
    assert recorder.jcts == {"L": 1000, "W": 1090, "F": 3160}


@pytest.mark.parametrize("name", ["easy-backfill", "cardflow-no-fill"])
def test_without_filling_the_drain_idles_and_the_opportunistic_task_waits(name) -> None:
    """F may not run past W's start on GPUs W needs: it waits for W to end (1100) and ends at 4100;
    W starts at 1000 either way."""
    policy = replace(POLICIES["cardflow"], name=name, fill_reservations=False) if name == "cardflow-no-fill" \
        else POLICIES[name]
    recorder = Simulation(DRAIN_TRACE, parse_cluster_spec("X:1x4"), policy).run().recorder
    assert recorder.waits == {"L": 0, "W": 990, "F": 1080}
    assert recorder.preemptions == 0
    assert recorder.jcts == {"L": 1000, "W": 1090, "F": 4080}


def test_the_simulator_runs_the_deadline_order_of_the_live_dispatcher() -> None:
    """Two 4-GPU tasks on one 4-GPU node behind a running one: the later-submitted task with the
    earlier deadline goes first in the cardflow order (as `plan()` orders it live), the baselines
    keep submission order; the report counts deadlines missed."""
    busy = task("busy", 0, 4, 100)
    first = task("first", 10, 4, 100)
    urgent = replace(task("urgent", 20, 4, 100), deadline_s=250.0)
    trace = [busy, first, urgent]
    cardflow = Simulation(trace, parse_cluster_spec("X:1x4"), POLICIES["cardflow"]).run()
    assert cardflow.recorder.waits == {"busy": 0, "urgent": 80, "first": 190}
    easy = Simulation(trace, parse_cluster_spec("X:1x4"), POLICIES["easy-backfill"]).run()
    assert easy.recorder.waits == {"busy": 0, "first": 90, "urgent": 180}
    assert deadline_outcomes(cardflow.recorder, trace) == {"with_deadline": 1, "met": 1, "missed": 0, "missed_tasks": []}
    assert deadline_outcomes(easy.recorder, trace) == {
        "with_deadline": 1, "met": 0, "missed": 1,
        "missed_tasks": [{"task_id": "urgent", "deadline_s": 250.0, "finished_s": 300.0, "late_s": 50.0}]}


def test_the_report_names_the_task_that_provably_missed_its_deadline_and_not_the_one_that_met_it() -> None:
    """One 4-GPU node busy until 100. `late` (deadline 150) needs the whole node for 100 s, so it
    cannot end before 200: missed by 50 s under any policy. `met` (deadline 350) starts when `late`
    ends (earlier deadline first) and ends at 300."""
    busy = task("busy", 0, 4, 100)
    late = replace(task("late", 10, 4, 100), deadline_s=150.0)
    met = replace(task("met", 20, 4, 100), deadline_s=350.0)
    trace = [busy, late, met]
    result = Simulation(trace, parse_cluster_spec("X:1x4"), POLICIES["cardflow"]).run()
    assert result.recorder.jcts == {"busy": 100, "late": 190, "met": 280}
    assert deadline_outcomes(result.recorder, trace) == {
        "with_deadline": 2, "met": 1, "missed": 1,
        "missed_tasks": [{"task_id": "late", "deadline_s": 150.0, "finished_s": 200.0, "late_s": 50.0}]}


def test_a_task_that_never_finishes_missed_its_deadline() -> None:
    never = replace(task("never", 0, 8, 100), deadline_s=500.0)  # 8 GPUs on a 4-GPU node: it never runs
    result = Simulation([never], parse_cluster_spec("X:1x4"), POLICIES["cardflow"]).run()
    outcome = deadline_outcomes(result.recorder, [never])
    assert outcome["missed"] == 1 and outcome["missed_tasks"] == [
        {"task_id": "never", "deadline_s": 500.0, "finished_s": None, "late_s": None}]
