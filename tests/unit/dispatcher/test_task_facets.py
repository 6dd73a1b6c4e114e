"""What the events the dispatcher consumes do to its records (`task_facets.apply_events`), no PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from shared.events.reasons import RevokeReason
from shared.events.states import TaskState
from shared.leasing.records import LeaseBook, QuotaRecord
from shared.leasing.task_facets import APPLIED_ONCE_BY_THE_FOLD, apply_events, task_ids_of
from shared.leasing.work import LeaseRules
from shared.scheduling.model import CardOption, PriorityClass
from tests.unit.dispatcher.builders import (
    NOW,
    a_book,
    a_lease_record,
    a_node_record,
    a_ready_task,
    a_task_record,
    cancel_requested,
    matched,
    quota_adjusted,
    quota_granted,
    readiness,
    submitted,
    unmatchable,
    usage_recorded,
)

RULES = LeaseRules()


def kinds(effects) -> list[str]:  # noqa: ANN001
    return [e.event_type.model_fields["type"].default for e in effects.changes.emissions]


def test_facets_in_any_order_make_a_complete_task() -> None:
    for events in (a_ready_task("T1"), list(reversed(a_ready_task("T1")))):
        task = apply_events(LeaseBook(), events, NOW, RULES).changes.tasks["T1"]
        assert task.complete and task.in_queue and task.state is TaskState.QUEUED
        assert (task.project, task.priority_class, task.options) == (
            "proj-a", PriorityClass.CORE, (CardOption("H100", 600.0, 1.0),))


def test_an_older_readiness_or_match_never_overwrites_a_newer_one() -> None:
    events = [submitted("T1"), readiness("T1", ready=True, seq=3), readiness("T1", ready=False, seq=2),
              matched("T1", seq=5), unmatchable("T1", seq=4)]
    task = apply_events(LeaseBook(), events, NOW, RULES).changes.tasks["T1"]
    assert (task.data_ready, task.readiness_seq, task.matched, task.match_seq) == (True, 3, True, 5)


def test_a_submission_is_written_once() -> None:
    book = a_book(a_task_record("T1", project="first"))
    assert apply_events(book, [submitted("T1", project="second")], NOW, RULES).changes.tasks["T1"].project == "first"


def test_cancelling_a_queued_task_cancels_it_at_once_even_before_its_submission() -> None:
    effects = apply_events(LeaseBook(), [cancel_requested("T1"), *a_ready_task("T1")], NOW, RULES)
    task = effects.changes.tasks["T1"]
    assert task.state is TaskState.CANCELLED and task.submitted and not task.in_queue
    assert kinds(effects) == ["task.cancelled"]


def test_cancelling_a_leased_task_revokes_its_leases() -> None:
    book = a_book(a_node_record(), a_task_record("T1"), a_lease_record("L1", "T1"))
    effects = apply_events(book, [cancel_requested("T1", "wrong data")], NOW, RULES)
    assert kinds(effects) == ["command.revoke", "lease.revoked"]
    assert effects.changes.leases["L1"].revoke_reason is RevokeReason.CANCELLED
    assert effects.changes.tasks["T1"].state is TaskState.LEASED and effects.changes.tasks["T1"].cancel_requested
    assert effects.changes.emissions[1].data["detail"] == "the task was cancelled: wrong data"


def test_quotas_and_usage() -> None:
    effects = apply_events(LeaseBook(), [quota_granted("proj-a", 10.0, used_gpu_hours=2.0), quota_adjusted("proj-a", 5.0),
                                         quota_adjusted("proj-b", 5.0)], NOW, RULES)
    assert [(a.account_id, a.gpu_hours, a.used_gpu_seconds) for a in effects.accounts.values()] == [
        ("acct-proj-a", 15.0, 7200.0)]
    assert isinstance(effects.accounts["acct-proj-a"], QuotaRecord) and effects.wake


def test_an_adjustment_carries_the_ledgers_count_under_the_new_terms() -> None:
    book = LeaseBook(accounts={"acct-proj-a": QuotaRecord("acct-proj-a", "proj-a", 10.0, None, NOW - timedelta(days=1),
                                                          NOW + timedelta(days=1), used_gpu_seconds=100.0)})
    effects = apply_events(book, [quota_adjusted("proj-a", 0.0, used_gpu_hours=1.0)], NOW, RULES)
    assert effects.accounts["acct-proj-a"].used_gpu_seconds == 3600.0


def test_usage_counts_against_each_account_it_applies_to_cut_at_its_window() -> None:
    window = (NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    book = LeaseBook(accounts={
        "all": QuotaRecord("all", "proj-a", 10.0, None, *window, used_gpu_seconds=100.0),
        "h100": QuotaRecord("h100", "proj-a", 10.0, "H100", *window),
        "a100": QuotaRecord("a100", "proj-a", 10.0, "A100", *window),
        "ended": QuotaRecord("ended", "proj-a", 10.0, None, NOW - timedelta(hours=2), NOW - timedelta(minutes=90)),
        "other": QuotaRecord("other", "proj-b", 10.0, None, *window)})
    usage = usage_recorded("proj-a", 7200.0, start=NOW - timedelta(hours=2), end=NOW, gpus=2)  # H100
    effects = apply_events(book, [usage], NOW, RULES)
    assert {i: a.used_gpu_seconds for i, a in effects.accounts.items()} == {
        "all": 100.0 + 2 * 3600.0, "h100": 2 * 3600.0, "ended": 2 * 1800.0}
    assert not effects.wake


def test_usage_without_its_interval_counts_as_one_gpu_up_to_when_it_was_recorded() -> None:
    usage = usage_recorded("proj-a", 50.0)
    recorded_at = usage.occurred_at
    book = LeaseBook(accounts={"all": QuotaRecord("all", "proj-a", 10.0, None, recorded_at - timedelta(seconds=20),
                                                  recorded_at + timedelta(days=1))})
    effects = apply_events(book, [usage], NOW, RULES)
    assert effects.accounts["all"].used_gpu_seconds == 20.0  # the 20 s of it inside the window


def test_the_tasks_a_batch_names() -> None:
    assert task_ids_of([*a_ready_task("T1"), cancel_requested("T2"), quota_granted("p", 1.0)]) == {"T1", "T2"}


def test_a_redelivered_facet_changes_nothing_so_it_needs_no_inbox_row() -> None:
    facets = [submitted("T1"), readiness("T1", ready=True, seq=2), matched("T1", seq=3), unmatchable("T1", seq=3)]
    assert {type(e) for e in facets} == set(APPLIED_ONCE_BY_THE_FOLD)
    first = apply_events(LeaseBook(), facets, NOW, RULES).changes
    again = apply_events(a_book(first.tasks["T1"]), facets, NOW, RULES).changes
    assert again.tasks in ({}, first.tasks) and not again.emissions  # the same record at most (a repeated submission puts it unchanged)
