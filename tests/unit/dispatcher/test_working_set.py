"""The leader's working set follows the changes of committed steps (`services.dispatcher.working_set`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from services.dispatcher.working_set import WorkingSet
from shared.events.reasons import ReleaseReason
from shared.events.states import TaskState
from shared.leasing.records import LeaseState
from shared.leasing.work import BookChanges
from tests.unit.dispatcher.builders import NOW, a_lease_record, a_node_record, a_task_record


def a_working_set() -> WorkingSet:
    return WorkingSet(
        tasks={"T1": a_task_record("T1"), "T2": a_task_record("T2", state=TaskState.QUEUED)},
        leases={"L1": a_lease_record("L1", "T1")}, nodes={"n1": a_node_record()},
    )


def test_indexes_and_queue_are_built_from_the_records() -> None:
    state = a_working_set()
    assert state.by_task == {"T1": {"L1"}} and state.by_node == {"n1": {"L1"}}
    assert [task.task_id for task in state.plan_queue()] == ["T2"]


def test_a_final_task_leaves_with_its_last_lease() -> None:
    state = a_working_set()
    ended = replace(a_lease_record("L1", "T1"), state=LeaseState.ENDED, ended_at=NOW, end_reason=ReleaseReason.SUCCEEDED)
    state.apply(BookChanges(tasks={"T1": a_task_record("T1", state=TaskState.SUCCEEDED)}, leases={"L1": ended}))
    assert "T1" not in state.tasks and state.leases == {} and state.by_task == {} and state.by_node == {}


def test_a_final_task_with_a_part_still_active_stays_until_that_part_ends() -> None:
    state = WorkingSet(tasks={"T1": a_task_record("T1")},
                       leases={"L1": a_lease_record("L1", parts=2), "L2": a_lease_record("L2", parts=2, gpus=(1,))})
    ended = replace(state.leases["L1"], state=LeaseState.ENDED, ended_at=NOW, end_reason=ReleaseReason.FAILED)
    state.apply(BookChanges(tasks={"T1": a_task_record("T1", state=TaskState.FAILED)}, leases={"L1": ended}))
    assert state.tasks["T1"].state is TaskState.FAILED and state.by_task == {"T1": {"L2"}}
    state.apply(BookChanges(leases={"L2": replace(state.leases["L2"], state=LeaseState.ENDED, ended_at=NOW)}))
    assert "T1" not in state.tasks


def test_a_granted_task_leaves_the_queue_and_a_requeued_one_comes_back() -> None:
    state = a_working_set()
    state.apply(BookChanges(tasks={"T2": a_task_record("T2", state=TaskState.LEASED)}))
    assert state.plan_queue() == []
    state.apply(BookChanges(tasks={"T2": a_task_record("T2", state=TaskState.QUEUED)}))
    assert [task.task_id for task in state.plan_queue()] == ["T2"]


def test_a_task_whose_victims_are_checkpointing_sits_the_cycle_out() -> None:
    state = a_working_set()
    state.apply(BookChanges(leases={"L1": replace(state.leases["L1"], preempting=True, preempted_for="T2")}))
    assert state.plan_queue() == []


def test_quiet_renewals_are_kept_in_memory() -> None:
    state = a_working_set()
    renewed = replace(state.leases["L1"], renewals_unreported=3)
    state.apply(BookChanges(quiet_leases={"L1": renewed}))
    assert state.leases["L1"].renewals_unreported == 3


def test_records_loaded_for_a_batch_are_seen_on_top_of_memory() -> None:
    state = a_working_set()
    old = a_task_record("T9", state=TaskState.SUCCEEDED)
    book = state.book(tasks={"T9": old})
    assert book.tasks["T9"] is old and book.tasks["T1"] is state.tasks["T1"] and "T9" not in state.tasks
    assert book.active_lease_ids_on_node("n1") == {"L1"}


def test_the_kept_queue_follows_every_change_and_orders_as_a_fresh_sort() -> None:
    """Tasks queued, granted, requeued with another priority, and sitting a cycle out: after each change
    `kept_queue` holds exactly `plan_queue()`'s tasks, in the order a fresh sort gives them."""
    from shared.scheduling.policy_knobs import Policy
    from shared.scheduling.ordered_queue import OrderedQueue
    from shared.scheduling.ordering import order_queue

    policy, now = Policy(), NOW.timestamp()
    state = a_working_set()
    queued = {f"Q{i}": a_task_record(f"Q{i}", state=TaskState.QUEUED, priority=i % 3,
                                     submitted_at=NOW - timedelta(minutes=7 * i)) for i in range(6)}
    steps = [
        BookChanges(tasks=queued),
        BookChanges(tasks={"Q1": replace(queued["Q1"], state=TaskState.LEASED)}),
        BookChanges(tasks={"Q2": replace(queued["Q2"], priority=9), "Q1": queued["Q1"]}),
        BookChanges(leases={"L1": replace(state.leases["L1"], preempting=True, preempted_for="Q3")}),
        BookChanges(tasks={"Q4": replace(queued["Q4"], state=TaskState.CANCELLED)}),
    ]
    for changes in steps:
        state.apply(changes)
        kept = state.kept_queue(policy)
        assert isinstance(kept, OrderedQueue)
        assert order_queue(kept, policy, now) == order_queue(state.plan_queue(), policy, now)
        assert sorted(task.task_id for task in kept) == sorted(task.task_id for task in state.plan_queue())
    assert "Q3" not in {task.task_id for task in state.kept_queue(policy)}  # sits the cycle out
    assert state.kept_queue(Policy(order="fifo")).order == "fifo"  # another order: sorted afresh
