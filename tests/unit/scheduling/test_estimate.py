"""Estimated starts (`estimate.estimate_starts`): a replay of the queue over each node's free GPUs."""

from __future__ import annotations

from dataclasses import replace

from shared.scheduling.estimate import estimate_starts
from shared.scheduling.model import Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordering import order_queue
from shared.scheduling.plan import plan

from .builders import HOUR, NOW, a_lease, a_node, a_task, built

POLICY = replace(Policy(), headroom=0.0)


def estimates(nodes, tasks, leases=()):  # noqa: ANN001, ANN201
    snapshot = Snapshot(tuple(built(n) for n in nodes), tuple(built(lease) for lease in leases))
    queue = [built(t) for t in tasks]
    decided = plan(snapshot, queue, POLICY, NOW)
    ordered = order_queue(queue, POLICY, NOW)
    return {task_id: (e.position, e.start_at, e.end_at)
            for task_id, e in estimate_starts(snapshot, ordered, decided, NOW).items()}


def busy_until(at: float, *gpus: int):  # noqa: ANN201
    return a_lease("L").on("n1").gpus(*gpus).started(NOW - HOUR).ends(at)


def test_a_granted_task_starts_now_and_the_next_waits_for_it():
    result = estimates([a_node("n1").free(8)], [a_task("a").gpus(8).submitted(0), a_task("b").gpus(8).submitted(1)])
    assert result == {"a": (1, NOW, NOW + HOUR), "b": (2, NOW + HOUR, NOW + 2 * HOUR)}


def test_the_reservation_holder_starts_when_the_running_lease_ends():
    lease = busy_until(NOW + 2 * HOUR, *range(8))
    result = estimates([a_node("n1").free(0)], [a_task("a").gpus(4)], [lease])
    assert result["a"] == (1, NOW + 2 * HOUR, NOW + 3 * HOUR)


def test_later_tasks_queue_up_behind_in_order_and_small_ones_fill_gaps():
    lease = busy_until(NOW + 2 * HOUR, 0, 1, 2, 3, 4, 5)  # 2 GPUs free now, all 8 in 2 h
    tasks = [a_task("wide").gpus(8).submitted(0), a_task("wide2").gpus(8).submitted(1),
             a_task("small").gpus(2).submitted(2).runs(HOUR)]
    result = estimates([a_node("n1").free(2)], tasks, [lease])
    assert result["wide"][1:] == (NOW + 2 * HOUR, NOW + 3 * HOUR)
    assert result["wide2"][1:] == (NOW + 3 * HOUR, NOW + 4 * HOUR)
    assert result["small"][1] == NOW  # it ends before the wide task's GPUs come free: backfill


def test_a_task_waiting_for_something_else_has_no_estimate_but_keeps_its_position():
    result = estimates([a_node("n1").free(8)], [a_task("a").not_ready().submitted(0), a_task("b").submitted(1)])
    assert result["a"] == (1, None, None) and result["b"] == (2, NOW, NOW + HOUR)


def test_a_lease_past_its_estimate_counts_as_ending_now():
    result = estimates([a_node("n1").free(0)], [a_task("a").gpus(8)], [busy_until(NOW - HOUR, *range(8))])
    assert result["a"][1] == NOW
