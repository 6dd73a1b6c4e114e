"""Building plan()'s inputs from the dispatcher's records (pure)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.events.reasons import RevokeReason
from shared.events.states import TaskState
from shared.leasing.records import QuotaRecord
from shared.leasing.snapshot import build_queue, build_snapshot
from shared.scheduling.model import CardOption, PriorityClass
from tests.unit.dispatcher.builders import NOW, a_lease_record, a_node_record, a_task_record

NODES = [a_node_record("n1", gpus=4), a_node_record("n2", "a2", gpus=2, card_type="A100")]
TASKS = {t.task_id: t for t in (a_task_record("T1", priority_class=PriorityClass.OPPORTUNISTIC, heavy=True),
                                a_task_record("T2", priority_class=PriorityClass.OPPORTUNISTIC))}


def snapshot(leases: list, accounts: list = ()):  # noqa: ANN201
    return build_snapshot(NODES, leases, TASKS, accounts, NOW.timestamp())


def test_free_gpus_are_those_no_active_lease_holds_and_heavy_leases_are_counted() -> None:
    leases = [a_lease_record("L1", "T1", gpus=(0, 2)), a_lease_record("L2", "T2", gpus=(3,), preempting=True)]
    by_id = {node.node_id: node for node in snapshot(leases).nodes}
    assert by_id["n1"].free == frozenset({1}) and by_id["n1"].heavy_running == 1
    assert by_id["n2"].free == frozenset({0, 1}) and by_id["n2"].heavy_running == 0


def test_lost_nodes_are_not_in_the_snapshot() -> None:
    fleet = build_snapshot([a_node_record("n1", alive=False)], [], {}, [], NOW.timestamp())
    assert fleet.nodes == ()


@pytest.mark.parametrize("stopping", [{"preempting": True}, {"revoke_reason": RevokeReason.CANCELLED}])
def test_a_lease_being_stopped_holds_its_gpus_but_is_no_running_lease(stopping: dict[str, object]) -> None:
    fleet = snapshot([a_lease_record("L1", "T2", gpus=(0,)), a_lease_record("L2", "T2", gpus=(1,), **stopping)])
    assert [lease.lease_id for lease in fleet.leases] == ["L1"]
    assert fleet.nodes[0].free == frozenset({2, 3})
    running = fleet.leases[0]
    assert running.priority_class is PriorityClass.OPPORTUNISTIC and running.gpu_indices == (0,)
    assert running.started_at == (NOW - timedelta(minutes=1)).timestamp() and running.last_checkpoint_at is None
    assert running.submitted_at == TASKS["T2"].submitted_at.timestamp()  # the fifo order ranks victims by it


@pytest.mark.parametrize(("interval", "checkpoints"), [(600.0, True), (None, False)])
def test_a_lease_checkpoints_on_preemption_when_its_task_has_a_checkpoint_interval(
    interval: float | None, checkpoints: bool
) -> None:
    tasks = {"T1": a_task_record("T1", checkpoint_interval_s=interval)}
    fleet = build_snapshot(NODES, [a_lease_record("L1", "T1")], tasks, [], NOW.timestamp())
    assert fleet.leases[0].checkpoints_on_preempt is checkpoints


@pytest.mark.parametrize("borrowed", [True, False])
def test_a_running_lease_borrows_the_headroom_as_its_record_says(borrowed: bool) -> None:
    tasks = {"T1": a_task_record("T1", checkpoint_interval_s=600.0)}
    fleet = build_snapshot(NODES, [a_lease_record("L1", "T1", borrowed_headroom=borrowed)], tasks, [], NOW.timestamp())
    assert fleet.leases[0].borrowed_headroom is borrowed


def test_each_account_left_subtracts_its_usage_and_the_rest_of_running_estimates_it_counts() -> None:
    accounts = [QuotaRecord("q1", "proj-a", 10.0, None, NOW - timedelta(days=1), NOW + timedelta(days=9),
                            used_gpu_seconds=3 * 3600.0),
                QuotaRecord("q2", "proj-a", 5.0, "A100", NOW, NOW + timedelta(days=20)),
                QuotaRecord("q3", "proj-a", 5.0, None, NOW - timedelta(days=1), NOW + timedelta(minutes=30))]
    leases = [a_lease_record("L1", "T1", gpus=(0, 1), estimated_end=NOW + timedelta(hours=1))]  # 2 GPUs x 1 h on H100
    quotas = snapshot(leases, accounts).quotas
    assert quotas["q1"].remaining_gpu_hours == pytest.approx(10 - 3 - 2)
    assert quotas["q2"].remaining_gpu_hours == pytest.approx(5)  # an A100 account: the H100 lease is not its business
    assert quotas["q3"].remaining_gpu_hours == pytest.approx(5 - 1)  # only the half hour inside its window
    assert (quotas["q2"].card_type, quotas["q2"].account_id, quotas["q2"].valid_to) == (
        "A100", "q2", (NOW + timedelta(days=20)).timestamp())


def test_projects_without_an_account_have_no_quota_entry() -> None:
    assert snapshot([a_lease_record("L1", "T1")]).quotas == {}


def test_a_task_record_becomes_a_queued_task_with_options_in_matcher_order() -> None:
    options = (CardOption("H100", 900.0, 2.5), CardOption("A100", 1800.0, 3.0))
    task = a_task_record("T1", state=TaskState.QUEUED, priority_class=PriorityClass.CORE, priority=5, gpus=2,
                         checkpoint_interval_s=600.0, options=options).queued_task()
    assert task.options == options
    assert (task.priority_class, task.priority, task.gpus, task.heavy, task.data_ready) == (
        PriorityClass.CORE, 5, 2, False, True)
    assert task.submitted_at == (NOW - timedelta(minutes=5)).timestamp() and task.checkpoint_interval_s == 600.0


def test_an_unmatchable_task_has_no_options_and_unready_data_is_kept() -> None:
    task = a_task_record("T1", matched=False, data_ready=False).queued_task()
    assert task.options == () and task.data_ready is False


def test_only_complete_waiting_tasks_not_being_cancelled_are_queued_and_those_awaiting_preemption_sit_out() -> None:
    tasks = [a_task_record("T1", state=TaskState.QUEUED), a_task_record("T2", state=TaskState.HELD),
             a_task_record("T3", state=TaskState.QUEUED), a_task_record("T4", state=TaskState.LEASED),
             a_task_record("T5", state=TaskState.QUEUED, data_ready=None),
             a_task_record("T6", state=TaskState.QUEUED, cancel_requested=True)]
    assert [task.task_id for task in build_queue(tasks, frozenset({"T3"}))] == ["T1", "T2"]
