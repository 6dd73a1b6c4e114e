"""`apply_events`: what the `cf:events` the dispatcher consumes do to its records — a pure fold.

Each service owns its facet of a task, and facets arrive in ANY order (readiness may be known
before the submission): whichever arrives first creates the task's record. Readiness and match
facets carry their producer's `subject_seq`; an older one never overwrites a newer one. A task
enters the queue once its facets are complete (`TaskRecord.complete`).

- `task.submitted`: project, class, priority, GPUs, heavy, checkpointing, estimate, command (once);
- `task.readiness_changed`, `task.matched` / `task.unmatchable`: the newest of each wins;
- `task.cancel_requested`: a queued or held task is cancelled at once (`task.cancelled`); a leased
  or running one has its leases revoked and is cancelled when they end. A request that arrives
  before the submission cancels the task as soon as it is known;
- `task.reviewed`: a reviewer approves a waiting task (`task.approved`) or denies one that waits
  for approval (`task.denied`, `task.cancelled`) — `approvals.apply_review`;
- `quota.granted` / `quota.adjusted`: the project's accounts, with the usage each counted so far
  (the ledger's count in the event); `usage.recorded` (on its own in events from before, or carried by a
  `usage.batch_recorded`, one per ledger batch and project): every account the usage applies to counts
  its part (`quota_balance.counted_gpu_seconds`, cut at the account's window).
- operators' requests (`task.hold_requested` ... `node.undrain_requested`): `operator.apply_operator_request`;
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from shared.events import (
    Envelope,
    QuotaAdjusted,
    QuotaGranted,
    TaskCancelled,
    TaskCancelRequested,
    TaskMatched,
    TaskReadinessChanged,
    TaskReviewed,
    TaskSubmitted,
    TaskUnmatchable,
    UsageBatchRecorded,
    UsageRecorded,
)
from shared.events.carried import carried_usage
from shared.events.operator import OPERATOR_REQUESTS, TASK_REQUESTS
from shared.events.reasons import RevokeReason
from shared.events.states import TaskState
from shared.events.subjects import task_subject
from shared.leasing.approvals import apply_review
from shared.leasing.operator import apply_operator_request
from shared.leasing.records import WAITING_STATES, LeaseBook, QuotaRecord, TaskRecord
from shared.leasing.work import BookChanges, LeaseRules, LeaseWork
from shared.scheduling.model import CardOption
from shared.scheduling.quota_balance import SECONDS_PER_HOUR, UsageSlice, counted_gpu_seconds

RELEVANT: tuple[type[Envelope], ...] = (
    TaskSubmitted, TaskReadinessChanged, TaskMatched, TaskUnmatchable, TaskCancelRequested, TaskReviewed,
    QuotaGranted, QuotaAdjusted, UsageRecorded, UsageBatchRecorded, *OPERATOR_REQUESTS,
)
"""The `cf:events` types the dispatcher consumes; it skips every other type unparsed."""

APPLIED_ONCE_BY_THE_FOLD: tuple[type[Envelope], ...] = (TaskSubmitted, TaskReadinessChanged, TaskMatched, TaskUnmatchable)
"""Facets `apply_events` itself applies at most once: the submission is written once, readiness and
match only when newer by `subject_seq`, so a redelivered one changes nothing and needs no inbox
row (the others do: usage counts, cancellations revoke, reviews and requests act)."""

USAGE: tuple[type[Envelope], ...] = (UsageRecorded, UsageBatchRecorded)
"""The usage events: they only lower quotas, so a batch of nothing else wakes no cycle."""

_RUNNING_STATES = frozenset({TaskState.LEASED, TaskState.RUNNING})


@dataclass(frozen=True)
class EventEffects:
    """What a batch of events changes."""

    changes: BookChanges
    accounts: dict[str, QuotaRecord] = field(default_factory=dict)  # new or changed accounts (usage counted too)
    wake: bool = False  # a cycle may decide something new (usage alone only lowers quotas)
    refused: tuple[str, ...] = ()  # reviews and operators' requests not carried out, and why (for the log)


def task_ids_of(events: Sequence[Envelope]) -> set[str]:
    """The tasks a batch names (their records must be in the book)."""
    return {event.data.task_id for event in events if isinstance(event, _TASK_EVENTS + TASK_REQUESTS)}


def apply_events(book: LeaseBook, events: Sequence[Envelope], now: datetime, rules: LeaseRules) -> EventEffects:
    """Fold `events` in order (the module docstring says what each does)."""
    work = LeaseWork(book, now, rules)
    accounts: dict[str, QuotaRecord] = {}
    refused: list[str] = []
    for event in events:
        if isinstance(event, _TASK_EVENTS):
            if (refusal := _apply_task_event(work, event)) is not None:
                refused.append(refusal)
        elif isinstance(event, OPERATOR_REQUESTS):
            if (refusal := apply_operator_request(work, event)) is not None:
                refused.append(refusal)
        elif isinstance(event, QuotaGranted | QuotaAdjusted):
            _apply_quota(book, accounts, event)
        elif isinstance(event, UsageRecorded):
            _count_usage(book, accounts, event)
        elif isinstance(event, UsageBatchRecorded):
            for piece in carried_usage(event):
                _count_usage(book, accounts, piece)
    wake = any(not isinstance(event, USAGE) for event in events)
    return EventEffects(work.changes(), accounts, wake, tuple(refused))


def _apply_task_event(work: LeaseWork, event: Envelope) -> str | None:
    task_id = event.data.task_id
    task = work.task(task_id) or TaskRecord(task_id, updated_at=work.now)
    if isinstance(event, TaskReviewed):
        return apply_review(work, task, event) if task.submitted else f"task {task_id} is not known: no review"
    if isinstance(event, TaskSubmitted):
        work.put(_submitted(task, event))
    elif isinstance(event, TaskReadinessChanged):
        if task.readiness_seq is None or task.readiness_seq < event.subject_seq:
            work.put(replace(task, data_ready=event.data.ready, readiness_seq=event.subject_seq))
    elif isinstance(event, TaskMatched | TaskUnmatchable):
        if task.match_seq is None or task.match_seq < event.subject_seq:
            work.put(replace(task, matched=isinstance(event, TaskMatched), options=card_options_of(event),
                             match_seq=event.subject_seq))
    elif isinstance(event, TaskCancelRequested):
        _cancel(work, task, event)
    return None


def _submitted(task: TaskRecord, event: TaskSubmitted) -> TaskRecord:
    """The submission facet, written once (a repeated submission changes nothing)."""
    if task.submitted:
        return task
    s = event.data.submission
    return replace(
        task, submitted=True, project=s.project, priority_class=s.priority_class, priority=s.priority, gpus=s.gpus,
        heavy=s.is_heavy, checkpoint_interval_s=s.checkpoint.interval_minutes * 60.0 if s.checkpoint else None,
        estimate_gpu_hours=s.estimate_gpu_hours, submitted_at=event.occurred_at,
        command=list(s.command) if isinstance(s.command, tuple) else s.command, env=s.env, image=s.image,
        output_unit=s.output_unit, labels=dict(s.labels), deadline=s.deadline, submitted_by=event.actor,
    )


def card_options_of(event: TaskMatched | TaskUnmatchable) -> tuple[CardOption, ...]:
    """`task.matched`'s ranking as the core's options, the chosen card type first."""
    if not isinstance(event, TaskMatched):
        return ()
    ranking = sorted(event.data.ranking, key=lambda option: option.card_type != event.data.chosen)
    return tuple(CardOption(card_type=o.card_type, runtime_s=o.est_runtime_s, cost=o.est_cost) for o in ranking)


def _cancel(work: LeaseWork, task: TaskRecord, request: TaskCancelRequested) -> None:
    reason = request.data.reason
    task = replace(task, cancel_requested=True, cancel_reason=reason)
    if task.state in WAITING_STATES:
        task = replace(task, state=TaskState.CANCELLED, updated_at=work.now)
        work.emit(TaskCancelled, task_subject(task.task_id), {"task_id": task.task_id, "reason": reason}, cause=request)
    work.put(task)
    if task.state in _RUNNING_STATES:
        detail = f"the task was cancelled{': ' + reason if reason else ''}"
        work.revoke(work.leases_of_task(task.task_id), RevokeReason.CANCELLED, detail[:2000], cause=request)


def _apply_quota(book: LeaseBook, accounts: dict[str, QuotaRecord], event: QuotaGranted | QuotaAdjusted) -> None:
    d = event.data
    if isinstance(event, QuotaGranted):
        accounts[d.account_id] = QuotaRecord(d.account_id, d.project, d.gpu_hours, d.card_type, d.valid_from,
                                             d.valid_to, d.used_gpu_hours * SECONDS_PER_HOUR, d.alert_lead_days)
        return
    account = accounts.get(d.account_id) or book.accounts.get(d.account_id)
    if account is not None:  # an adjustment of an account never granted changes nothing
        used = account.used_gpu_seconds if d.used_gpu_hours is None else d.used_gpu_hours * SECONDS_PER_HOUR
        accounts[d.account_id] = replace(account, gpu_hours=account.gpu_hours + d.delta_gpu_hours,
                                         valid_to=d.valid_to or account.valid_to, used_gpu_seconds=used)


def _count_usage(book: LeaseBook, accounts: dict[str, QuotaRecord], event: UsageRecorded) -> None:
    """Each account of the usage's project counts its part of it."""
    piece = usage_slice(event)
    for account_id in sorted({*book.accounts, *accounts}):
        account = accounts.get(account_id) or book.accounts[account_id]
        if account.project != piece.project:
            continue
        counted = counted_gpu_seconds(account.terms(), piece)
        if counted:
            accounts[account_id] = replace(account, used_gpu_seconds=account.used_gpu_seconds + counted)


def usage_slice(event: UsageRecorded) -> UsageSlice:
    """The interval a `usage.recorded` accounts for. Events from before `from_at`/`to_at`/`gpus` were
    added carry only GPU-seconds: they count as one GPU for that long, ending when they were recorded."""
    d = event.data
    if d.from_at is not None and d.to_at is not None and d.gpus:
        return UsageSlice(d.project, d.card_type, d.from_at.timestamp(), d.to_at.timestamp(), d.gpus)
    end = event.occurred_at.timestamp()
    return UsageSlice(d.project, d.card_type, end - d.gpu_seconds, end, 1)


_TASK_EVENTS = (TaskSubmitted, TaskReadinessChanged, TaskMatched, TaskUnmatchable, TaskCancelRequested, TaskReviewed)
