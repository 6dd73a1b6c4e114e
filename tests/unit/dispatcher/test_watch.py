"""The cycle's watches (`shared.leasing.watch`) and why grants started (`queue_order`): tables, no PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from shared.events.reasons import StartReason
from shared.events.states import TaskState
from shared.leasing.queue_order import PREEMPTED_FOR_FLAG, RESERVED_FLAG, start_reasons
from shared.leasing.records import LeaseBook, QuotaRecord
from shared.leasing.watch import WatchRules, deadline_gate, watch
from shared.leasing.work import LeaseRules, LeaseWork
from shared.scheduling.estimate import StartEstimate
from shared.scheduling.model import CardOption, Deferral, DeferralReason, Grant, Plan, PriorityClass
from tests.unit.dispatcher.builders import NOW, a_book, a_task_record

H = timedelta(hours=1)
DAY = timedelta(days=1)
RULES = WatchRules(approval_alert_after_s=3600.0, reminder_days=(7.0, 3.0, 1.0))


def waiting(task_id: str = "T1", **changes):  # noqa: ANN003, ANN201
    base = {"state": TaskState.QUEUED, "options": (CardOption("H100", 3600.0, 1.0),)}
    return a_task_record(task_id, **(base | changes))


def estimate(task_id: str = "T1", start: timedelta = H, card: str = "H100") -> StartEstimate:
    begin = (NOW + start).timestamp()
    return StartEstimate(task_id, 1, begin, begin + 3600.0, card)


def run_watch(book: LeaseBook, estimates: dict, accounts=(), left=None):  # noqa: ANN001, ANN201
    work = LeaseWork(book, NOW, LeaseRules())
    watch(work, list(book.tasks.values()), estimates, list(accounts), left or {}, RULES)
    return work.changes()


def kinds(changes) -> list[str]:  # noqa: ANN001
    return [e.event_type.model_fields["type"].default for e in changes.emissions]


def test_a_deadline_at_risk_is_raised_once_and_cleared_when_it_recovers() -> None:
    book = a_book(waiting(deadline=NOW + 90 * timedelta(minutes=1)))
    changes = run_watch(book, {"T1": estimate(start=H)})  # ends at NOW + 2 h, 30 min late
    assert kinds(changes) == ["task.deadline_endangered"]
    assert "30m after its deadline" in changes.emissions[0].data["detail"]
    flagged = a_book(changes.tasks["T1"])
    assert not run_watch(flagged, {"T1": estimate(start=H)}).emissions  # once
    recovered = run_watch(flagged, {"T1": estimate(start=timedelta(0))})
    assert not recovered.emissions and "deadline_at_risk" not in recovered.tasks["T1"].flags


def account(valid_to: timedelta, card: str | None = None) -> QuotaRecord:
    return QuotaRecord("acct", "proj-a", 100.0, card, NOW - DAY, NOW + valid_to, alert_lead_days=15.0)


def test_core_work_ending_within_the_alert_lead_of_its_quota_is_watched_and_reminded() -> None:
    core = waiting(priority_class=PriorityClass.CORE)
    changes = run_watch(a_book(core), {"T1": estimate()}, [account(10 * DAY)], {"acct": 100.0})
    assert kinds(changes) == ["task.quota_endangered"]
    data = changes.emissions[0].data
    assert (data["account_id"], data["covered"], round(data["days_left"])) == ("acct", True, 10)
    again = run_watch(a_book(changes.tasks["T1"]), {"T1": estimate()}, [account(10 * DAY)], {"acct": 100.0})
    assert not again.emissions  # once per stage...
    later = run_watch(a_book(changes.tasks["T1"]), {"T1": estimate()}, [account(2 * DAY)], {"acct": 100.0})
    assert kinds(later) == ["task.quota_endangered"]  # ...and again at the 3-day reminder


def test_core_work_its_quota_will_not_cover_is_watched_even_far_from_expiry() -> None:
    core = waiting(priority_class=PriorityClass.CORE, gpus=8)
    changes = run_watch(a_book(core), {"T1": estimate()}, [account(90 * DAY)], {"acct": 2.0})
    assert changes.emissions[0].data["covered"] is False
    assert "needs 8.0 GPU-hours; account acct has 2.0 left" in changes.emissions[0].data["detail"]


def test_quota_watch_is_for_core_work_on_accounts_that_apply() -> None:
    standard = waiting()
    assert not run_watch(a_book(standard), {"T1": estimate()}, [account(10 * DAY)]).emissions
    core = waiting(priority_class=PriorityClass.CORE)
    assert not run_watch(a_book(core), {"T1": estimate()}, [account(10 * DAY, card="L40S")]).emissions


def test_an_approval_waiting_too_long_is_raised_once() -> None:
    held = waiting(state=TaskState.HELD, deferral_reason=DeferralReason.NOT_APPROVED, updated_at=NOW - 2 * H)
    changes = run_watch(a_book(held), {})
    assert kinds(changes) == ["task.approval_delayed"] and "has waited 2h00m" in changes.emissions[0].data["detail"]
    assert not run_watch(a_book(changes.tasks["T1"]), {}).emissions
    recent = waiting(state=TaskState.HELD, deferral_reason=DeferralReason.NOT_APPROVED, updated_at=NOW - 0.5 * H)
    assert not run_watch(a_book(recent), {}).emissions


def test_the_deadline_hold_keeps_out_only_tasks_that_cannot_make_it_even_now() -> None:
    hopeless = waiting("late", deadline=NOW + 0.5 * H).queued_task()
    fine = waiting("fine", deadline=NOW + 2 * H).queued_task()
    kept, held = deadline_gate([hopeless, fine], NOW.timestamp(), hold=True)
    assert [t.task_id for t in kept] == ["fine"]
    assert held[0].reason is DeferralReason.DEADLINE_UNREACHABLE and "30m after its deadline" in held[0].detail
    assert deadline_gate([hopeless], NOW.timestamp(), hold=False) == ([hopeless], [])


def test_why_each_grant_started() -> None:
    ordered = [waiting(f"T{i}").queued_task() for i in range(5)]
    decided = Plan(
        grants=tuple(Grant(t, "H100", (), 0.0) for t in ("T0", "T2", "T3", "T4")),
        deferrals=(Deferral("T1", DeferralReason.NO_CAPACITY, "no room"),),
    )
    flags = {"T3": frozenset({RESERVED_FLAG}), "T4": frozenset({PREEMPTED_FOR_FLAG})}
    reasons = start_reasons(decided, ordered, lambda t: flags.get(t, frozenset()))
    assert reasons == {"T0": (StartReason.IN_ORDER, 0), "T2": (StartReason.BACKFILL, 1),
                       "T3": (StartReason.RESERVATION, 1), "T4": (StartReason.PREEMPTION, 1)}


def test_a_task_that_started_at_once_is_flagged_once_when_its_lease_ends_after_its_deadline() -> None:
    from shared.leasing.watch import watch_started
    from tests.unit.dispatcher.builders import a_lease_record

    def flagged_by(task, lease):  # noqa: ANN001, ANN202
        work = LeaseWork(a_book(task, lease), NOW, LeaseRules())
        watch_started(work, [task])
        return work.changes()

    running = a_task_record("T1", state=TaskState.RUNNING, deadline=NOW + timedelta(minutes=4))
    late = flagged_by(running, a_lease_record(estimated_end=NOW + 6 * H))
    assert kinds(late) == ["task.deadline_endangered"]
    assert "after its deadline" in late.emissions[0].data["detail"] and "started" in late.emissions[0].data["detail"]
    assert not flagged_by(late.tasks["T1"], a_lease_record(estimated_end=NOW + 6 * H)).emissions  # once
    in_time = a_task_record("T1", state=TaskState.RUNNING, deadline=NOW + 7 * H)
    assert not flagged_by(in_time, a_lease_record(estimated_end=NOW + 6 * H)).emissions
    no_deadline = a_task_record("T1", state=TaskState.RUNNING)
    assert not flagged_by(no_deadline, a_lease_record(estimated_end=NOW + 6 * H)).emissions
