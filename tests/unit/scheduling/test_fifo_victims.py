"""Under fifo a lease whose task ranks ahead of the preemptor is no victim of it, at amortised linear cost.

`CyclePreemption._discard_ranked_ahead` discards, per victim index, only what a preemptor's prefix of the leases
sorted by (submission, task id) adds to what the index discarded before (`VictimIndex.discard` then costs what it
discards). Checked against the simple rule it replaces — every lease scanned for every preemptor and the ones
ranking ahead discarded (`ranks_ahead`) — on generated fifo scenarios whose leases have submission times, and by
counting the lease ids a walk hands to the indexes.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.scheduling.cycle import Cycle
from shared.scheduling.cycle_preemption import ranks_ahead
from shared.scheduling.model import Plan, QueuedTask, Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordering import order_queue
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES
from shared.scheduling.preemption import VictimIndex
from tests.unit.scheduling.test_fast_paths import HOUR, NOW, repetitive_scenarios

from .builders import NOW as BUILT_NOW
from .builders import a_lease, a_node, a_task, built


class SimpleRuleCycle(Cycle):
    """Discards, for every preemptor, every lease ranking ahead of it, found by scanning every lease (as first written)."""

    def _discard_ranked_ahead(self, index: VictimIndex, task: QueuedTask) -> None:
        index.discard([lease.lease_id for lease in self._victim_leases if ranks_ahead(lease, task)], self.fleet)


def simple_rule_plan(snapshot: Snapshot, queue: list[QueuedTask], policy: Policy, now: float) -> Plan:
    ordered = order_queue(queue, policy, now)
    cycle = SimpleRuleCycle(snapshot, policy, now, ordered)
    cycle.walk(ordered)
    return cycle.to_plan()


@st.composite
def fifo_scenarios(draw):
    """`repetitive_scenarios` under fifo with preemption on, each lease submitted before, among or after the tasks."""
    snapshot, queue, policy = draw(repetitive_scenarios())
    submissions = st.sampled_from((None, NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - HOUR, NOW - 300.0, NOW))
    leases = tuple(replace(lease, submitted_at=draw(submissions), task_id=f"{lease.task_id}-{draw(st.integers(0, 2))}")
                   for lease in snapshot.leases)
    policy = replace(policy, order="fifo", head_of_line_blocking=False, backfill=True, preemption=True)
    return replace(snapshot, leases=leases), queue, policy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=fifo_scenarios())
def test_fifo_victims_are_the_simple_rules(scenario) -> None:
    snapshot, queue, policy = scenario
    assert plan(snapshot, queue, policy, NOW) == simple_rule_plan(snapshot, queue, policy, NOW)


def test_a_walk_hands_each_lease_ranking_ahead_to_an_index_once(monkeypatch) -> None:
    """Ten full nodes, each with one opportunistic lease; ten core tasks, each submitted just after one lease (so that
    lease and the earlier ones rank ahead of it). The simple rule hands 1 + 2 + ... lease ids to the index, one prefix
    per preemptor; the amortised walk each lease at most once (plus each preemption's victims to the other indexes)."""
    nodes = [a_node(f"n{index}").free(0) for index in range(10)]
    leases = [a_lease(f"L{index}").on(f"n{index}").gpus(*range(8)).opportunistic().started(BUILT_NOW - 60.0)
              .ends(BUILT_NOW + 10 * HOUR).submitted(BUILT_NOW - 10 * HOUR + index * 60.0) for index in range(10)]
    tasks = [a_task(f"t{index}").core().gpus(8).submitted(BUILT_NOW - 10 * HOUR + index * 60.0 + 30.0)
             for index in range(10)]
    handed: list[int] = []
    discard = VictimIndex.discard

    def counting(self, lease_ids, fleet):
        lease_ids = list(lease_ids)
        handed.append(len(lease_ids))
        discard(self, lease_ids, fleet)

    monkeypatch.setattr(VictimIndex, "discard", counting)
    policy = replace(POLICIES["cardflow"], order="fifo", head_of_line_blocking=False, backfill=True)
    result = plan(Snapshot(tuple(map(built, nodes)), tuple(map(built, leases))), list(map(built, tasks)), policy, BUILT_NOW)
    assert len(result.preemptions) >= 3  # preemptors came, each with its prefix ranking ahead
    lease_of, task_of = {lease.lease_id: lease for lease in map(built, leases)}, {task.task_id: task for task in map(built, tasks)}
    assert not any(ranks_ahead(lease_of[taken.lease_id], task_of[taken.for_task_id]) for taken in result.preemptions)
    assert sum(handed) <= len(leases) + len(result.preemptions)
