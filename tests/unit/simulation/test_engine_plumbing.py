"""Engine plumbing against a tiny stub plan (defined here, test-only): event order, true vs
estimated durations, readiness holds, checkpoints and preemption losses, quota cut-offs.

The real scheduling core is exercised in test_hand_computed.py; these tests pin down what the
engine does with whatever plan it gets.
"""

from __future__ import annotations

from typing import Sequence

import pytest

from shared.scheduling.model import (
    Deferral,
    DeferralReason,
    Grant,
    Placement,
    Plan,
    Preemption,
    PriorityClass,
    Profile,
    QueuedTask,
    QuotaAccount,
    Snapshot,
)
from shared.scheduling.policy_knobs import Policy
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.engine import Simulation
from shared.simulation.metrics import summarize
from shared.simulation.workload import SimTask

CORE, STANDARD, OPPORTUNISTIC = PriorityClass.CORE, PriorityClass.STANDARD, PriorityClass.OPPORTUNISTIC


def stub_plan(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy, now: float) -> Plan:
    """First-fit in (class, submit) order; a core task that does not fit preempts opportunistic leases."""
    free = {node.node_id: sorted(node.free) for node in snapshot.nodes}
    grants, deferrals, preemptions = [], [], []
    for task in sorted(queue, key=lambda t: (t.priority_class.rank, t.submitted_at, t.task_id)):
        if policy.readiness_gate and not task.data_ready:
            deferrals.append(Deferral(task.task_id, DeferralReason.DATA_NOT_READY, "waiting for data"))
            continue
        node = next((n for n in sorted(free) if len(free[n]) >= task.gpus), None)
        if node is None:
            victims = [l for l in snapshot.leases if l.priority_class is OPPORTUNISTIC]
            if task.priority_class is CORE and policy.preemption and victims and not preemptions:
                preemptions += [Preemption(v.lease_id, v.task_id, task.task_id, 0.0) for v in victims]
            deferrals.append(Deferral(task.task_id, DeferralReason.NO_CAPACITY, "no room"))
            continue
        gpus, free[node] = tuple(free[node][: task.gpus]), free[node][task.gpus :]
        option = task.options[0]
        grants.append(Grant(task.task_id, option.card_type, (Placement(node, gpus),), now + option.runtime_s))
    return Plan(grants=tuple(grants), preemptions=tuple(preemptions), deferrals=tuple(deferrals))


def a_task(task_id: str, submit: float, gpus: int, duration: float, *, estimate: float | None = None,
           klass: PriorityClass = STANDARD, ready: float | None = None, checkpoint: float | None = None,
           project: str = "p") -> SimTask:
    return SimTask(task_id, submit, gpus, duration, duration if estimate is None else estimate, klass, 0,
                   project, (), None, 0.0, submit if ready is None else ready, checkpoint,
                   Profile.BALANCED, False)


def simulate(tasks: list[SimTask], spec: str = "X:1x4", policy: Policy | None = None, **kwargs):
    sim = Simulation(tasks, parse_cluster_spec(spec), policy or Policy(), plan_fn=stub_plan, **kwargs)
    return sim.run()


def test_tasks_run_their_true_duration_not_the_estimate() -> None:
    outcome = simulate([a_task("a", 0, 4, 100, estimate=500), a_task("b", 10, 4, 50)])
    assert outcome.recorder.jcts == {"a": 100, "b": 140}
    assert outcome.recorder.waits == {"a": 0, "b": 90}


def test_readiness_blind_start_holds_gpus_idle_until_data_is_ready() -> None:
    blind = Policy(name="blind", readiness_gate=False)
    outcome = simulate([a_task("a", 0, 4, 100, ready=30), a_task("b", 0, 4, 10)], policy=blind)
    rec = outcome.recorder
    assert rec.waits == {"a": 30, "b": 130}  # a took the GPUs at 0, its work began at 30
    assert rec.idle == [(0, 30, 4)]
    assert rec.jcts["a"] == 130


def test_gated_policy_waits_for_data_and_lets_others_run() -> None:
    outcome = simulate([a_task("a", 0, 4, 100, ready=30), a_task("b", 0, 4, 10)])
    assert outcome.recorder.waits == {"b": 0, "a": 30}
    assert outcome.recorder.idle == []


def test_preemption_loses_progress_since_last_checkpoint_and_requeues_the_rest() -> None:
    tasks = [a_task("opp", 0, 4, 100, klass=OPPORTUNISTIC, checkpoint=30), a_task("core", 70, 4, 10, klass=CORE)]
    rec = simulate(tasks).recorder
    assert rec.preemptions == 1
    assert rec.lost == [(60, 70, 4)]  # checkpoints at 30 and 60; 60..70 is lost
    assert rec.waits == {"core": 0, "opp": 0}
    assert rec.jcts == {"core": 10, "opp": 120}  # resumes at 80 with 40 s left
    assert rec.lost_gpu_hours() == pytest.approx(40 / 3600)


def test_preempted_task_that_checkpoints_writes_a_checkpoint_and_loses_only_the_write() -> None:
    """No periodic checkpoint before 400 (interval 600): on the PreemptCommand at 400 it checkpoints,
    losing the default 60 s write x 4 GPUs (340..400); it resumes at 410 with 1000 - 340 = 660 s left."""
    tasks = [a_task("opp", 0, 4, 1000, klass=OPPORTUNISTIC, checkpoint=600), a_task("core", 400, 4, 10, klass=CORE)]
    rec = simulate(tasks).recorder
    assert rec.preemptions == 1
    assert rec.useful[0] == (0, 340, 4) and rec.lost == [(340, 400, 4)]
    assert rec.jcts == {"core": 10, "opp": 1070}
    assert rec.lost_gpu_hours() == pytest.approx(240 / 3600)


def test_checkpoint_write_cost_is_a_parameter() -> None:
    tasks = [a_task("opp", 0, 4, 1000, klass=OPPORTUNISTIC, checkpoint=600), a_task("core", 400, 4, 10, klass=CORE)]
    free_write = simulate(tasks, preempt_checkpoint_cost_s=0.0).recorder
    assert free_write.lost == [] and free_write.jcts == {"core": 10, "opp": 1010}  # resumes at 410, 600 s left
    slow_write = simulate(tasks, preempt_checkpoint_cost_s=500.0).recorder
    assert slow_write.lost == [(0, 400, 4)] and slow_write.jcts["opp"] == 1410  # the write outlasts the progress


def test_preempted_task_without_checkpoints_loses_everything_since_its_start() -> None:
    tasks = [a_task("opp", 0, 4, 1000, klass=OPPORTUNISTIC), a_task("core", 400, 4, 10, klass=CORE)]
    rec = simulate(tasks).recorder
    assert rec.preemptions == 1
    assert rec.lost == [(0, 400, 4)]
    assert rec.jcts == {"core": 10, "opp": 1410}  # starts over at 410


def test_leases_of_tasks_that_checkpoint_are_shown_to_the_plan_as_checkpointing_on_preemption() -> None:
    seen: dict[str, bool] = {}

    def recording_plan(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy, now: float) -> Plan:
        seen.update((lease.task_id, lease.checkpoints_on_preempt) for lease in snapshot.leases)
        return stub_plan(snapshot, queue, policy, now)

    tasks = [a_task("ckpt", 0, 2, 100, klass=OPPORTUNISTIC, checkpoint=600),
             a_task("plain", 0, 2, 100, klass=OPPORTUNISTIC), a_task("core", 50, 1, 10, klass=CORE)]
    Simulation(tasks, parse_cluster_spec("X:1x4"), Policy(), plan_fn=recording_plan).run()
    assert seen["ckpt"] is True and seen["plain"] is False


def test_quota_cut_off_gets_no_warning_checkpoint() -> None:
    """Cut off at 50 with a 5 s write cost: a preemption would keep 0..45; the cut-off keeps 0..40."""
    quotas = {"p": QuotaAccount("p", 100.0, 0.0, 50.0)}
    outcome = simulate([a_task("a", 0, 4, 100, checkpoint=20)], quotas=quotas, preempt_checkpoint_cost_s=5.0)
    assert outcome.recorder.lost == [(40, 50, 4)]


def test_quota_expiry_cuts_off_running_tasks() -> None:
    quotas = {"p": QuotaAccount("p", 100.0, 0.0, 50.0)}
    outcome = simulate([a_task("a", 0, 4, 100, checkpoint=20)], quotas=quotas)
    rec = outcome.recorder
    assert rec.quota_cutoffs == 1 and outcome.unfinished == 1
    assert rec.useful == [(0, 40, 4)] and rec.lost == [(40, 50, 4)]


def test_summary_measures_utilisation_inside_the_submission_window() -> None:
    tasks = [a_task("a", 0, 2, 100), a_task("b", 100, 2, 100)]
    outcome = simulate(tasks)
    result = summarize(outcome.recorder, list(outcome.tasks), capacity=4, unfinished=outcome.unfinished)
    assert result["utilisation"] == pytest.approx(0.5)  # 2 of 4 GPUs busy over [0, 100]
    assert result["bound"] == pytest.approx(0.5)
    assert result["makespan_s"] == 200
    assert result["utilisation_when_queued"] == 0.0  # nothing ever waited
    assert set(result["wait_s"]) == {"standard"}


def test_tasks_larger_than_the_fleet_are_set_aside_as_unplaceable() -> None:
    outcome = simulate([a_task("big", 0, 8, 10), a_task("ok", 0, 1, 10)])
    assert outcome.unplaceable == ("big",)
    assert set(outcome.recorder.jcts) == {"ok"}


def test_utilisation_while_queued_counts_only_backlogged_time() -> None:
    tasks = [a_task("a", 0, 3, 100), a_task("b", 0, 2, 50), a_task("c", 150, 1, 50)]
    outcome = simulate(tasks)  # b waits for a (0-100) while 3 of 4 GPUs work
    result = summarize(outcome.recorder, list(outcome.tasks), capacity=4, unfinished=0)
    assert result["utilisation_when_queued"] == pytest.approx(0.75)


def test_utilisation_while_queued_ignores_tasks_still_waiting_for_data() -> None:
    tasks = [a_task("a", 0, 2, 100), a_task("b", 0, 4, 50), a_task("c", 0, 1, 10, ready=300),
             a_task("d", 150, 1, 10)]
    outcome = simulate(tasks)  # b (ready) waits 0-100 beside a's 2 GPUs; c only waits for its data
    result = summarize(outcome.recorder, list(outcome.tasks), capacity=4, unfinished=0)
    assert result["utilisation_when_queued"] == pytest.approx(0.5)


def test_the_engine_plans_over_a_queue_kept_sorted_from_its_changes() -> None:
    """Arrivals, data becoming ready, starts and preemption requeues all reach the kept queue: at every
    plan it holds exactly the queued tasks as they are, and the real plan decides on it as on a list."""
    from shared.scheduling.ordered_queue import OrderedQueue
    from shared.scheduling.plan import plan

    queues, sims = [], []

    def checking_plan(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy, now: float) -> Plan:
        assert isinstance(queue, OrderedQueue)
        assert {task.task_id: task for task in queue} == sims[0]._queue  # the queued tasks, as they are now
        assert plan(snapshot, queue, policy, now) == plan(snapshot, list(queue), policy, now)
        queues.append(list(queue))
        return stub_plan(snapshot, queue, policy, now)

    tasks = [a_task("late-data", 0, 2, 100, ready=40), a_task("opp", 0, 4, 500, klass=OPPORTUNISTIC, checkpoint=60),
             a_task("core", 10, 2, 50, klass=CORE), *(a_task(f"t{i}", 5 * i, 1, 30) for i in range(6))]
    sims.append(Simulation(tasks, parse_cluster_spec("X:1x4"), Policy(), plan_fn=checking_plan))
    sims[0].run()
    assert len(queues) > 3
    assert any(task.task_id == "late-data" and not task.data_ready for queue in queues for task in queue)
    assert any(task.task_id == "late-data" and task.data_ready for queue in queues for task in queue)
