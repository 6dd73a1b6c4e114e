"""Property: nothing starves. In simulation, over generated workloads and whatever the headroom,
preemption, backfill, heavy-spreading and quota settings, every task that fits the fleet finishes —
unless its project's quota stops it (cut off at the quota's expiry, or last told a quota reason:
exhausted, expiring, not yet valid). Headroom is the classic way to break this: a standard task wider
than total − headroom must still start once everything else is free (docs/scheduling.md, Headroom).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shared.scheduling.model import DeferralReason, Plan, PriorityClass, Profile, QueuedTask, QuotaAccount, Snapshot
from shared.scheduling.policy_knobs import Policy, PreemptAtOnce
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.engine import Simulation
from shared.simulation.workload import SimTask
from tests.unit.scheduling.policy_draws import standard_yield_knobs

CLASSES = tuple(PriorityClass)
QUOTA_REASONS = {DeferralReason.QUOTA_EXHAUSTED, DeferralReason.QUOTA_EXPIRES, DeferralReason.QUOTA_NOT_YET_VALID}


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    base = POLICIES[draw(st.sampled_from(sorted(POLICIES)))]
    if draw(st.booleans()):
        return base
    return replace(
        base,
        headroom=draw(st.one_of(st.sampled_from((0.0, 0.1, 0.3, 0.5, 0.9)), st.just({"A": 0.5}))),
        headroom_tracks_core=draw(st.booleans()),
        preemption=draw(st.booleans()),
        preempt_after_s=draw(st.sampled_from((0.0, 60.0, 600.0))),
        preempt_max_lost_gpu_hours=draw(st.sampled_from((0.0, 0.25, float("inf")))),
        fill_reservations=draw(st.booleans()),
        headroom_counts_reclaimable_only=draw(st.booleans()),
        headroom_core_demand=draw(st.sampled_from(("present", "recent", "queued-or-recent"))),
        preemption_spares_ending=draw(st.booleans()),
        preempt_at_once=draw(st.sampled_from(tuple(PreemptAtOnce))),
        preemption_budget_share=draw(st.sampled_from((0.0, 0.5, 1.0, 4.0))),
        preemption_budget_basis=draw(st.sampled_from(("wait", "drain"))),
        standard_borrows_within_graces=draw(st.sampled_from((0.0, 0.5, 1.0, 3.0))),
        checkpointing_standard_borrows=draw(st.booleans()),
        fillers_yield_at_once=draw(st.booleans()),
        holder_consolidates=draw(st.booleans()),
        **draw(standard_yield_knobs()),
        holder_reclaims_within_headroom=draw(st.booleans()),
        reclaiming_holder_keeps_headroom=draw(st.booleans()),
        fillers_after_opportunistic=draw(st.booleans()),
        backfill=draw(st.booleans()),
        head_of_line_blocking=draw(st.booleans()),
        readiness_gate=draw(st.booleans()),
        max_heavy_per_node=draw(st.integers(1, 2)),
        quota_expiry_gate=draw(st.booleans()),
        quota_expiry_margin_s=draw(st.sampled_from((0.0, 600.0))),
    )


@st.composite
def workloads(draw: st.DrawFn) -> tuple[str, list[SimTask], dict[str, QuotaAccount]]:
    """One or two card types of 1-3 nodes; 1-10 tasks of any class, size up to the largest pool,
    estimates off by up to x3 either way, late data, checkpoints or none, heavy or not; maybe quotas."""
    pools = {"A": (draw(st.integers(1, 3)), draw(st.sampled_from((2, 4, 8))))}
    if draw(st.booleans()):
        pools["B"] = (draw(st.integers(1, 2)), draw(st.sampled_from((2, 4))))
    spec = ",".join(f"{card}:{nodes}x{gpus}" for card, (nodes, gpus) in pools.items())
    tasks = []
    for index in range(draw(st.integers(1, 10))):
        cards = draw(st.sampled_from([("A",), ("B",), ("A", "B"), ()]) if "B" in pools else st.just(()))
        largest = max(pools[card][0] * pools[card][1] for card in (cards or pools))
        run = float(draw(st.integers(1, 40)) * 30)
        estimate = max(30.0, run * draw(st.sampled_from((0.3, 1.0, 2.0, 3.0))))
        submit = float(draw(st.integers(0, 60)) * 10)
        ready = submit + float(draw(st.sampled_from((0, 0, 50, 400))))
        tasks.append(SimTask(
            f"t{index}", submit, draw(st.integers(1, largest)), run, estimate, draw(st.sampled_from(CLASSES)),
            draw(st.integers(0, 2)), draw(st.sampled_from(("p", "q"))), cards, None, 0.0, ready,
            draw(st.sampled_from((None, 300.0))), Profile.BALANCED, draw(st.booleans()),
        ))
    quotas = {}
    if draw(st.booleans()):
        quotas["q"] = QuotaAccount("q", draw(st.sampled_from((0.01, 1.0, 100.0))), draw(st.sampled_from((0.0, 300.0))),
                                   draw(st.sampled_from((2_000.0, 100_000.0))))
    return spec, tasks, quotas


# Found by this property (a seed of a CI run): under fifo, core t1 preempted t0 and t2 in turn, each submitted
# before it, so each came back into the queue ahead of t1 and took its GPUs again — the plan never settled.
FIFO_PING_PONG = (
    ("A:2x8,B:1x4", [
        SimTask("t0", 190.0, 6, 900.0, 270.0, PriorityClass.OPPORTUNISTIC, 2, "p", ("A",), None, 0.0, 190.0, 300.0,
                Profile.BALANCED, False),
        SimTask("t1", 430.0, 4, 150.0, 45.0, PriorityClass.CORE, 0, "q", ("A", "B"), None, 0.0, 480.0, 300.0,
                Profile.BALANCED, True),
        SimTask("t2", 100.0, 2, 1200.0, 1200.0, PriorityClass.OPPORTUNISTIC, 2, "q", ("B",), None, 0.0, 150.0, 300.0,
                Profile.BALANCED, True),
        SimTask("t3", 560.0, 14, 1110.0, 1110.0, PriorityClass.OPPORTUNISTIC, 0, "q", ("A", "B"), None, 0.0, 960.0,
                300.0, Profile.BALANCED, False),
        SimTask("t4", 50.0, 3, 180.0, 54.0, PriorityClass.OPPORTUNISTIC, 2, "q", ("B",), None, 0.0, 50.0, None,
                Profile.BALANCED, False),
        SimTask("t5", 420.0, 8, 360.0, 360.0, PriorityClass.OPPORTUNISTIC, 0, "q", (), None, 0.0, 420.0, None,
                Profile.BALANCED, False),
    ], {}),
    replace(POLICIES["fifo"], headroom={"A": 0.5}, preemption=True, preempt_after_s=60.0, preempt_max_lost_gpu_hours=0.25,
            fill_reservations=True, headroom_core_demand="recent", preempt_at_once=PreemptAtOnce.FILLERS,
            max_heavy_per_node=1, quota_expiry_margin_s=600.0, head_of_line_blocking=False, readiness_gate=True,
            quota_expiry_gate=True, standard_borrows_within_graces=0.5),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), policies())
@example(*FIFO_PING_PONG)
def test_every_task_that_fits_the_fleet_finishes_unless_its_quota_stops_it(workload, policy: Policy) -> None:
    spec, tasks, quotas = workload
    last_reason: dict[str, DeferralReason] = {}

    def recording_plan(snapshot: Snapshot, queue: Sequence[QueuedTask], chosen: Policy, now: float) -> Plan:
        result = plan(snapshot, queue, chosen, now)
        last_reason.update((deferral.task_id, deferral.reason) for deferral in result.deferrals)
        for grant in result.grants:
            last_reason.pop(grant.task_id, None)
        return result

    outcome = Simulation(tasks, parse_cluster_spec(spec), policy, plan_fn=recording_plan, quotas=quotas).run()
    finished, cut_off = set(outcome.recorder.jcts), set(outcome.cut_off)
    for task in outcome.tasks:
        if task.task_id in finished or task.task_id in cut_off:
            continue
        reason = last_reason.get(task.task_id)
        assert reason in QUOTA_REASONS, (
            f"{task.task_id} ({task.priority_class}, {task.gpus} GPUs) never finished on {spec}; last told {reason}")
