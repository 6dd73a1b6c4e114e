"""The sweep's fold (`shared.leasing.expiry.expire`): expired leases and lost nodes, no PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from shared.events.reasons import ReleaseReason
from shared.events.states import TaskState
from shared.leasing.expiry import expire
from shared.leasing.records import LeaseState
from shared.leasing.work import LeaseRules
from tests.unit.dispatcher.builders import NOW, a_book, a_lease_record, a_node_record, a_task_record

RULES = LeaseRules(lease_ttl_s=30.0, node_lost_after_s=60.0)


def kinds(changes) -> list[str]:  # noqa: ANN001
    return [e.event_type.model_fields["type"].default for e in changes.emissions]


def test_an_overdue_lease_expires_and_its_task_is_requeued_from_its_checkpoint() -> None:
    book = a_book(a_node_record(), a_task_record(resume_from="s3://ckpt/1"),
                  a_lease_record(expires_at=NOW - timedelta(seconds=1)))
    changes = expire(book, NOW, RULES)
    assert kinds(changes) == ["lease.expired", "lease.released", "task.requeued"]
    assert changes.leases["L1"].end_reason is ReleaseReason.EXPIRED and changes.tasks["T1"].state is TaskState.QUEUED
    assert changes.emissions[-1].data["resume_from"] == "s3://ckpt/1"
    assert changes.nodes["n1"].lease_expired_at == NOW


def test_a_lease_still_within_its_ttl_and_a_node_heard_from_recently_change_nothing() -> None:
    assert not expire(a_book(a_node_record(), a_task_record(), a_lease_record()), NOW, RULES)


def test_an_expiry_waiting_for_a_cancel_cancels_the_task() -> None:
    book = a_book(a_node_record(), a_task_record(cancel_requested=True, cancel_reason="no longer needed"),
                  a_lease_record(expires_at=NOW - timedelta(seconds=1)))
    changes = expire(book, NOW, RULES)
    assert changes.tasks["T1"].state is TaskState.CANCELLED and kinds(changes)[-1] == "task.cancelled"


def test_a_node_silent_for_node_lost_after_is_lost_naming_its_leases() -> None:
    book = a_book(a_node_record(last_seen=NOW - timedelta(seconds=61)), a_task_record(), a_lease_record())
    changes = expire(book, NOW, RULES)
    assert kinds(changes) == ["node.lost"] and changes.nodes["n1"].alive is False
    assert changes.emissions[0].data["lease_ids"] == ["L1"] and "61" not in changes.emissions[0].data["detail"]


def test_a_node_silent_for_a_ttl_since_one_of_its_leases_expired_is_lost_sooner() -> None:
    silent = a_node_record(last_seen=NOW - timedelta(seconds=31), lease_expired_at=NOW - timedelta(seconds=5))
    heard_after = a_node_record(last_seen=NOW - timedelta(seconds=31), lease_expired_at=NOW - timedelta(seconds=40))
    assert kinds(expire(a_book(silent), NOW, RULES)) == ["node.lost"]
    assert not expire(a_book(heard_after), NOW, RULES)


def test_a_lost_node_is_not_lost_again() -> None:
    assert not expire(a_book(a_node_record(alive=False, last_seen=NOW - timedelta(hours=1))), NOW, RULES)


def test_a_lease_of_an_earlier_run_only_frees_its_gpus() -> None:
    book = a_book(a_node_record(), a_task_record(run=2), a_lease_record(expires_at=NOW - timedelta(seconds=1)))
    changes = expire(book, NOW, RULES)
    assert kinds(changes) == ["lease.expired", "lease.released"] and changes.leases["L1"].state is LeaseState.ENDED
