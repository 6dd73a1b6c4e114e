"""Building plan()'s inputs from table rows (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.leasing.snapshot import build_queue, build_snapshot, card_options, queued_task
from shared.scheduling.model import CardOption, PriorityClass

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def a_lease(lease_id: str, node_id: str, gpus: list[int], **overrides: object) -> dict[str, object]:
    row: dict[str, object] = {
        "lease_id": lease_id, "task_id": f"T-{lease_id}", "node_id": node_id, "card_type": "H100",
        "gpu_indices": gpus, "granted_at": NOW - timedelta(hours=1), "estimated_end": NOW + timedelta(hours=1),
        "last_checkpoint_at": None, "preempting": False, "preempted_for": None, "revoke_reason": None,
        "project": "p", "priority_class": "opportunistic", "heavy": False,
    }
    return row | overrides


def a_task(task_id: str, **overrides: object) -> dict[str, object]:
    row: dict[str, object] = {
        "task_id": task_id, "project": "p", "priority_class": "core", "priority": 5, "gpus": 2, "heavy": None,
        "checkpoint_interval_s": 600.0, "submitted_at": NOW, "options": [["H100", 900, 2.5], ["A100", 1800, 3]],
        "matched": True, "data_ready": True,
    }
    return row | overrides


NODES = [{"node_id": "n1", "card_type": "H100", "gpus": 4}, {"node_id": "n2", "card_type": "A100", "gpus": 2}]


def test_free_gpus_are_those_no_active_lease_holds_and_heavy_leases_are_counted() -> None:
    leases = [a_lease("L1", "n1", [0, 2], heavy=True), a_lease("L2", "n1", [3], preempting=True)]
    snapshot = build_snapshot(NODES, leases, [], [], NOW.timestamp())
    by_id = {node.node_id: node for node in snapshot.nodes}
    assert by_id["n1"].free == frozenset({1}) and by_id["n1"].heavy_running == 1
    assert by_id["n2"].free == frozenset({0, 1}) and by_id["n2"].heavy_running == 0


@pytest.mark.parametrize("stopping", [{"preempting": True}, {"revoke_reason": "cancelled"}])
def test_a_lease_being_stopped_holds_its_gpus_but_is_no_running_lease(stopping: dict[str, object]) -> None:
    leases = [a_lease("L1", "n1", [0]), a_lease("L2", "n1", [1], **stopping)]
    snapshot = build_snapshot(NODES, leases, [], [], NOW.timestamp())
    assert [lease.lease_id for lease in snapshot.leases] == ["L1"]
    assert snapshot.nodes[0].free == frozenset({2, 3})
    running = snapshot.leases[0]
    assert running.priority_class is PriorityClass.OPPORTUNISTIC and running.gpu_indices == (0,)
    assert running.started_at == (NOW - timedelta(hours=1)).timestamp() and running.last_checkpoint_at is None


@pytest.mark.parametrize(("interval", "checkpoints"), [(600.0, True), (None, False)])
def test_a_lease_checkpoints_on_preemption_when_its_task_has_a_checkpoint_interval(
    interval: float | None, checkpoints: bool
) -> None:
    snapshot = build_snapshot(NODES, [a_lease("L1", "n1", [0], checkpoint_interval_s=interval)], [], [], NOW.timestamp())
    assert snapshot.leases[0].checkpoints_on_preempt is checkpoints


def test_quota_left_subtracts_recorded_usage_and_the_rest_of_running_estimates() -> None:
    accounts = [
        {"project": "p", "gpu_hours": 10.0, "valid_from": NOW - timedelta(days=1), "valid_to": NOW + timedelta(days=9)},
        {"project": "p", "gpu_hours": 5.0, "valid_from": NOW, "valid_to": NOW + timedelta(days=20)},
    ]
    usage = [{"project": "p", "gpu_seconds": 3 * 3600.0}]
    leases = [a_lease("L1", "n1", [0, 1])]  # 2 GPUs x 1 h still to run
    quota = build_snapshot(NODES, leases, accounts, usage, NOW.timestamp()).quotas["p"]
    assert quota.remaining_gpu_hours == pytest.approx(15 - 3 - 2)
    assert (quota.valid_from, quota.valid_to) == ((NOW - timedelta(days=1)).timestamp(),
                                                  (NOW + timedelta(days=20)).timestamp())


def test_projects_without_an_account_have_no_quota_entry() -> None:
    assert build_snapshot(NODES, [a_lease("L1", "n1", [0])], [], [], NOW.timestamp()).quotas == {}


def test_a_task_row_becomes_a_queued_task_with_options_in_matcher_order() -> None:
    task = queued_task(a_task("T1"))
    assert task.options == (CardOption("H100", 900.0, 2.5), CardOption("A100", 1800.0, 3.0))
    assert (task.priority_class, task.priority, task.gpus, task.heavy, task.data_ready) == (
        PriorityClass.CORE, 5, 2, False, True)
    assert task.submitted_at == NOW.timestamp() and task.checkpoint_interval_s == 600.0


def test_an_unmatchable_task_has_no_options_and_unready_data_is_kept() -> None:
    task = queued_task(a_task("T1", matched=False, options=None, data_ready=False))
    assert task.options == () and task.data_ready is False


def test_tasks_waiting_for_their_preemptions_sit_the_cycle_out() -> None:
    queue = build_queue([a_task("T1"), a_task("T2")], frozenset({"T2"}))
    assert [task.task_id for task in queue] == ["T1"]


def test_card_options_of_nothing_is_empty() -> None:
    assert card_options(None) == ()
