"""Watches over the waiting queue, each cycle: deadlines, quotas of core work, approvals (pure).

`watch(work, tasks, estimates, left, now, rules)` looks at every waiting task with the cycle's
estimated starts (`shared.scheduling.estimate`) and raises, once per occasion (the occasion is
kept in the task's `flags`):

- `task.deadline_endangered` — its estimated end (or, without an estimate, now plus its shortest
  runtime) is past its deadline; raised again if it recovers and falls behind once more. A task
  that already started (it may have started at once, never queued) is flagged once when its
  lease's estimated end is past its deadline (`watch_started`);
- `task.quota_endangered` — a CORE task whose estimated end falls within the alert lead of an account
  it needs (the account's `alert_lead_days`, 15 by default) of that account's expiry, or which that
  account's GPU-hours left will not cover: before it starts, and again at each of the policy's
  `alerts.reminder_days` as the expiry nears;
- `task.approval_delayed` — it has been held for approval longer than `approvals.alert_after_hours`.

`deadline_gate` holds, when the policy says so (`deadlines.hold_unreachable`), a task that would end
after its deadline even if it started now: it leaves the cycle's queue with a `deadline_unreachable`
deferral instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from shared.events import TaskApprovalDelayed, TaskDeadlineEndangered, TaskQuotaEndangered
from shared.events.states import TaskState
from shared.events.subjects import task_subject
from shared.leasing.records import QuotaRecord, TaskRecord
from shared.leasing.work import LeaseWork
from shared.scheduling.estimate import StartEstimate
from shared.scheduling.model import Deferral, DeferralReason, PriorityClass, QueuedTask
from shared.scheduling.quota_balance import coverage
from shared.scheduling.reasons import format_duration

DAY_S = 86_400.0
DEADLINE_FLAG = "deadline_at_risk"
APPROVAL_FLAG = "approval_waiting"


@dataclass(frozen=True, slots=True)
class WatchRules:
    approval_alert_after_s: float = 24 * 3600.0
    reminder_days: tuple[float, ...] = (7.0, 3.0, 1.0)
    hold_unreachable: bool = False
    quota_margin_s: float = 0.0  # the policy's quota expiry margin


def watch(work: LeaseWork, tasks: Iterable[TaskRecord], estimates: Mapping[str, StartEstimate],
          accounts: Sequence[QuotaRecord], left: Mapping[str, float], rules: WatchRules) -> None:
    """Raise what is due about the waiting `tasks` (see the module docstring)."""
    for task in sorted(tasks, key=lambda t: t.task_id):
        if task.state not in (TaskState.QUEUED, TaskState.HELD) or not task.matched or not task.options:
            continue
        estimate = estimates.get(task.task_id)
        _watch_deadline(work, task, estimate)
        if task.priority_class is PriorityClass.CORE:
            _watch_quota(work, work.task(task.task_id) or task, estimate, accounts, left, rules)
        _watch_approval(work, work.task(task.task_id) or task, rules)


STARTED = frozenset({TaskState.LEASED, TaskState.RUNNING})


def watch_started(work: LeaseWork, tasks: Iterable[TaskRecord]) -> None:
    """Flag, once, each started task whose lease is estimated to end after the task's deadline."""
    for task in sorted(tasks, key=lambda t: t.task_id):
        if task.state not in STARTED or task.deadline is None or DEADLINE_FLAG in task.flags:
            continue
        ends = [lease.estimated_end for lease in work.leases_of_task(task.task_id) if lease.estimated_end is not None]
        if not ends or max(ends) <= task.deadline:
            continue
        end, lease = max(ends), work.leases_of_task(task.task_id)[0]
        late = format_duration((end - task.deadline).total_seconds())
        detail = (f"started {_iso(lease.granted_at.timestamp())} on {lease.card_type}: estimated to end"
                  f" {end.isoformat(timespec='seconds')}, {late} after its deadline {task.deadline.isoformat(timespec='seconds')}")
        work.emit(TaskDeadlineEndangered, task_subject(task.task_id), {
            "task_id": task.task_id, "deadline": task.deadline, "detail": detail, "estimated_end": end,
            "estimated_start": lease.granted_at,
        })
        _flag(work, task, add=DEADLINE_FLAG)


def _end(task: TaskRecord, estimate: StartEstimate | None, now: datetime) -> tuple[datetime, str]:
    """When the task is expected to end, and on which card type."""
    if estimate is not None and estimate.end_at is not None and estimate.card_type is not None:
        return datetime.fromtimestamp(estimate.end_at, UTC), estimate.card_type
    fastest = min(task.options, key=lambda option: option.runtime_s)
    return now + timedelta(seconds=fastest.runtime_s), fastest.card_type


def _flag(work: LeaseWork, task: TaskRecord, add: str | None = None, remove: str | None = None) -> None:
    flags = (task.flags - {remove} if remove else task.flags) | ({add} if add else set())
    if flags != task.flags:
        work.put(replace(task, flags=frozenset(flags)))


def _watch_deadline(work: LeaseWork, task: TaskRecord, estimate: StartEstimate | None) -> None:
    if task.deadline is None:
        return
    end, card = _end(task, estimate, work.now)
    at_risk = end > task.deadline
    if at_risk and DEADLINE_FLAG not in task.flags:
        start = estimate.start_at if estimate is not None else None
        late = format_duration((end - task.deadline).total_seconds())
        when = "if it started now" if start is None else f"from its estimated start {_iso(start)}"
        detail = (f"estimated to end {end.isoformat(timespec='seconds')} on {card} ({when}), {late} after its deadline"
                  f" {task.deadline.isoformat(timespec='seconds')}")
        work.emit(TaskDeadlineEndangered, task_subject(task.task_id), {
            "task_id": task.task_id, "deadline": task.deadline, "detail": detail, "estimated_end": end,
            "estimated_start": datetime.fromtimestamp(start, UTC) if start is not None else None,
        })
        _flag(work, task, add=DEADLINE_FLAG)
    elif not at_risk and DEADLINE_FLAG in task.flags:
        _flag(work, task, remove=DEADLINE_FLAG)


def _watch_quota(work: LeaseWork, task: TaskRecord, estimate: StartEstimate | None, accounts: Sequence[QuotaRecord],
                 left: Mapping[str, float], rules: WatchRules) -> None:
    end, card = _end(task, estimate, work.now)
    now_s = work.now.timestamp()
    project = task.project or ""
    runtime_s = next(o.runtime_s for o in task.options if o.card_type == card)
    need = (task.gpus or 1) * runtime_s / 3600.0
    for account in sorted(accounts, key=lambda a: a.account_id):
        spec = account.terms()
        if not spec.applies_to(project, card) or not spec.in_force(now_s):
            continue
        days_left = (spec.valid_to - now_s) / DAY_S
        lead_s = account.alert_lead_days * DAY_S
        near = end.timestamp() >= spec.valid_to - lead_s
        verdict = coverage([spec], {spec.account_id: left.get(spec.account_id, spec.gpu_hours)}, project, card, need,
                           runtime_s, now_s, rules.quota_margin_s)
        if not near and verdict.coverage.allows:
            continue
        stage = min((d for d in (account.alert_lead_days, *rules.reminder_days) if d >= days_left),
                    default=account.alert_lead_days)
        key = f"quota_at_risk:{account.account_id}:{stage:g}"
        current = work.task(task.task_id) or task
        if key in current.flags:
            continue
        detail = _quota_detail(account, end, days_left, near, verdict.coverage.allows, need, left)
        work.emit(TaskQuotaEndangered, task_subject(task.task_id), {
            "task_id": task.task_id, "account_id": account.account_id, "project": project, "valid_to": account.valid_to,
            "estimated_end": end, "days_left": round(days_left, 3), "covered": verdict.coverage.allows, "detail": detail,
        })
        _flag(work, current, add=key)


def _quota_detail(account: QuotaRecord, end: datetime, days_left: float, near: bool, covered: bool, need: float,
                  left: Mapping[str, float]) -> str:
    parts = []
    if near:
        parts.append(f"its estimated end {end.isoformat(timespec='minutes')} is within {account.alert_lead_days:g} days"
                     f" of the expiry of quota account {account.account_id} ({account.valid_to.isoformat(timespec='minutes')},"
                     f" {days_left:.1f} days left)")
    if not covered:
        parts.append(f"it needs {need:.1f} GPU-hours; account {account.account_id} has "
                     f"{max(0.0, left.get(account.account_id, account.gpu_hours)):.1f} left")
    return "; ".join(parts)


def _watch_approval(work: LeaseWork, task: TaskRecord, rules: WatchRules) -> None:
    if task.state is not TaskState.HELD or task.deferral_reason is not DeferralReason.NOT_APPROVED:
        return
    since = task.updated_at or work.now
    if APPROVAL_FLAG in task.flags or (work.now - since).total_seconds() < rules.approval_alert_after_s:
        return
    waited = format_duration((work.now - since).total_seconds())
    work.emit(TaskApprovalDelayed, task_subject(task.task_id), {
        "task_id": task.task_id, "waiting_since": since,
        "detail": f"has waited {waited} for approval ({task.deferral_detail or 'no reviewer yet'})",
    })
    _flag(work, task, add=APPROVAL_FLAG)


def deadline_gate(queue: list[QueuedTask], now: float, hold: bool) -> tuple[list[QueuedTask], list[Deferral]]:
    """With `hold`, the tasks that would end after their deadline even if they started now leave the queue,
    each with a `deadline_unreachable` deferral."""
    if not hold:
        return queue, []
    kept, held = [], []
    for task in queue:
        fastest = min((o.runtime_s for o in task.options), default=None)
        if task.deadline is not None and fastest is not None and now + fastest > task.deadline:
            late = format_duration(now + fastest - task.deadline)
            held.append(Deferral(task.task_id, DeferralReason.DEADLINE_UNREACHABLE,
                                 f"even if it started now it would end {late} after its deadline (runs about "
                                 f"{format_duration(fastest)} on its fastest card type)"))
        else:
            kept.append(task)
    return kept, held


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
