"""What a cycle's plan does to the dispatcher's records (`plan_effects.apply_plan`), no PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.events import LeaseGranted
from shared.events.states import TaskState
from shared.leasing.plan_effects import apply_plan, leases_needed
from shared.leasing.records import LeaseBook
from shared.leasing.work import LeaseRules
from shared.scheduling.model import Deferral, DeferralReason, Grant, Placement, Plan, Preemption, PriorityClass
from tests.unit.dispatcher.builders import NOW, a_book, a_lease_record, a_node_record, a_task_record

RULES = LeaseRules(lease_ttl_s=30.0, capacity_reason_every_s=10.0)
WAITING = a_task_record("T1", state=TaskState.QUEUED, run=0, queued_announced=False, resume_from="s3://ckpt/1")


def grant(task_id: str = "T1", *placements: Placement) -> Grant:
    placed = placements or (Placement("n1", (1,)),)
    return Grant(task_id, "H100", placed, estimated_end=(NOW + timedelta(minutes=10)).timestamp())


def apply(book: LeaseBook, decided: Plan):  # noqa: ANN201
    fresh = iter([(f"L{n}", 100 + n) for n in range(1, leases_needed(decided) + 1)])
    return apply_plan(book, decided, NOW, RULES, fresh)


def kinds(effects) -> list[tuple[str, str]]:  # noqa: ANN001
    return [(e.event_type.model_fields["type"].default, e.stream) for e in effects.changes.emissions]


def test_a_grant_leases_the_task_and_tells_the_agent_first() -> None:
    effects = apply(a_book(a_node_record(), WAITING), Plan(grants=(grant(),)))
    task, lease = effects.changes.tasks["T1"], effects.changes.leases["L1"]
    assert (task.state, task.run, task.queued_announced) == (TaskState.LEASED, 1, True)
    assert (lease.fencing_token, lease.agent_id, lease.gpu_indices, lease.run, lease.resume_from) == (
        101, "a1", (1,), 1, "s3://ckpt/1")
    assert lease.expires_at == NOW + timedelta(seconds=30) and effects.changes.granted == {"L1"}
    assert kinds(effects) == [("command.lease_grant", "cf:agent:a1"), ("lease.granted", "cf:events")]
    assert effects.changes.emissions[0].data["estimated_runtime_s"] == 600.0 and effects.leases == 1


@pytest.mark.parametrize("borrowed", [True, False])
def test_each_lease_of_a_grant_keeps_whether_it_borrowed_the_headroom(borrowed: bool) -> None:
    """A standard filler's lease row says so (`leases.borrowed_headroom`): a dispatcher that reloads it plans
    with the flag the grant had, as the simulator's lease does; each lease's `lease.granted` says so too, for the
    audit replay and story."""
    spanning = replace(grant("T1", Placement("n1", (0, 1)), Placement("n2", (0,))), borrowed_headroom=borrowed)
    effects = apply(a_book(a_node_record("n1"), a_node_record("n2", "a2"), WAITING), Plan(grants=(spanning,)))
    assert [lease.borrowed_headroom for lease in effects.changes.leases.values()] == [borrowed, borrowed]
    told = [e.data["borrowed_headroom"] for e in effects.changes.emissions if e.event_type is LeaseGranted]
    assert told == [borrowed, borrowed]


def test_a_grant_carries_the_queue_entry_of_a_task_never_announced_as_queued() -> None:
    never_announced = apply(a_book(a_node_record(), WAITING), Plan(grants=(grant(),)))
    [granted] = [e for e in never_announced.changes.emissions if e.event_type is LeaseGranted]
    assert granted.data["queued"] == {"project": "proj-a", "priority_class": PriorityClass.STANDARD, "priority": 0}
    announced = apply(a_book(a_node_record(), replace(WAITING, queued_announced=True)), Plan(grants=(grant(),)))
    [granted] = [e for e in announced.changes.emissions if e.event_type is LeaseGranted]
    assert granted.data["queued"] is None and kinds(announced) == kinds(never_announced)


def test_a_grant_spanning_nodes_carries_the_queue_entry_once() -> None:
    book = a_book(a_node_record("n1"), a_node_record("n2", "a2"), WAITING)
    effects = apply(book, Plan(grants=(grant("T1", Placement("n1", (0, 1)), Placement("n2", (0,))),)))
    entries = [e.data["queued"] for e in effects.changes.emissions if e.event_type is LeaseGranted]
    assert len(entries) == 2 and entries[0] is not None and entries[1] is None


def test_a_grant_spanning_nodes_makes_one_lease_per_node() -> None:
    book = a_book(a_node_record("n1"), a_node_record("n2", "a2"), WAITING)
    effects = apply(book, Plan(grants=(grant("T1", Placement("n1", (0, 1)), Placement("n2", (0,))),)))
    assert sorted((lease.node_id, lease.parts) for lease in effects.changes.leases.values()) == [("n1", 2), ("n2", 2)]


def test_a_grant_whose_task_was_cancelled_or_whose_node_is_gone_is_dropped() -> None:
    cancelled = a_book(a_node_record(), a_task_record("T1", state=TaskState.CANCELLED))
    node_lost = a_book(a_node_record(alive=False), WAITING)
    being_cancelled = a_book(a_node_record(), a_task_record("T1", state=TaskState.QUEUED, cancel_requested=True))
    for book in (cancelled, node_lost, being_cancelled):
        effects = apply(book, Plan(grants=(grant(),)))
        assert not effects.changes and effects.leases == 0


def test_deferrals_follow_the_waiting_rule() -> None:
    book = a_book(WAITING, a_task_record("T2", state=TaskState.QUEUED, updated_at=NOW - timedelta(seconds=11)))
    decided = Plan(deferrals=(Deferral("T1", DeferralReason.NO_CAPACITY, "no room"),
                              Deferral("T2", DeferralReason.QUOTA_EXHAUSTED, "out of quota")))
    effects = apply(book, decided)
    assert kinds(effects) == [("task.queued", "cf:events"), ("task.held", "cf:events")]
    assert effects.changes.tasks["T1"].deferral_reason is None and effects.changes.tasks["T2"].state is TaskState.HELD
    assert effects.changes.tasks["T2"].deferral_detail == "out of quota" and effects.held == 1


def test_a_preemption_orders_the_agent_to_yield_naming_the_task_it_yields_to() -> None:
    book = a_book(a_node_record(), a_task_record("C1", state=TaskState.QUEUED, priority_class=PriorityClass.CORE),
                  a_task_record("T1"), a_lease_record("L9", "T1"))
    effects = apply(book, Plan(preemptions=(Preemption("L9", "T1", "C1", 0.1),)))
    assert kinds(effects) == [("command.preempt", "cf:agent:a1"), ("lease.revoked", "cf:events")]
    assert effects.changes.emissions[1].data["detail"] == "core task C1 needs the GPUs"
    assert effects.changes.leases["L9"].preempted_for == "C1" and effects.preempted == 1
    again = apply(a_book(*book.nodes.values(), *book.tasks.values(), effects.changes.leases["L9"]),
                  Plan(preemptions=(Preemption("L9", "T1", "C1", 0.1),)))
    assert not again.changes  # a lease is preempted once
