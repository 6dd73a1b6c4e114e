"""Alerts: the events that must reach a person, as one `Alert` each (pure).

    alert = alert_of(event)      # None: the event is not worth telling anyone

An alert has a kind (`AlertKind`), what it is about (a task, a quota account), a one-line English
sentence, and the event it came from (its id is the alert's id: a redelivered event is the same
alert). The ledger's alerter stores and delivers them to the policy's sinks
(`services.ledger.alerting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from shared.events import (
    Envelope,
    QuotaExpiring,
    QuotaThresholdCrossed,
    TaskApprovalDelayed,
    TaskDeadlineEndangered,
    TaskFailed,
    TaskHeld,
    TaskQuotaEndangered,
    TaskRequeued,
    TaskSucceeded,
)
from shared.events.reasons import RequeueReason
from shared.scheduling.model import DeferralReason


class AlertKind(StrEnum):
    """What an alert is about (the policy's `alerts.sinks[].kinds` filter by these)."""

    QUOTA_THRESHOLD = "quota_threshold"  # an account's used share crossed a threshold (80%, 95%)
    QUOTA_EXPIRING = "quota_expiring"  # an account with hours left ends within its alert lead
    QUOTA_HOLD = "quota_hold"  # a task is held because its quota expires first, is used up, or is not valid yet
    QUOTA_AT_RISK = "quota_at_risk"  # a core task will end within the lead of its quota's expiry, or is not covered
    APPROVAL_WAITING = "approval_waiting"  # a task has waited too long for a reviewer
    DEADLINE_AT_RISK = "deadline_at_risk"  # a task's estimated end is past its deadline
    IDLE_RECLAIM = "idle_reclaim"  # a lease's GPUs sat idle and were taken back (or its task held after repeats)
    TASK_FAILED = "task_failed"  # a task failed and will not be retried
    FLAGGED_SUCCESS = "flagged_success"  # a success not taken at the agent's word (too early, output out of bounds)


@dataclass(frozen=True, slots=True)
class Alert:
    """One thing a person should hear about, from the event that says it."""

    alert_id: str  # the source event's id: a redelivered event is the same alert
    kind: AlertKind
    sentence: str
    occurred_at: datetime
    event_type: str
    task_id: str | None = None
    account_id: str | None = None
    project: str | None = None


QUOTA_HOLDS = frozenset({DeferralReason.QUOTA_EXPIRES, DeferralReason.QUOTA_EXHAUSTED, DeferralReason.QUOTA_NOT_YET_VALID})

ALERTING_TYPES: tuple[type[Envelope], ...] = (
    QuotaThresholdCrossed, QuotaExpiring, TaskHeld, TaskQuotaEndangered, TaskApprovalDelayed, TaskDeadlineEndangered,
    TaskRequeued, TaskFailed, TaskSucceeded,
)
"""The event types an alert may come from."""


def alert_of(event: Envelope) -> Alert | None:
    """The alert `event` is worth, or None (see `AlertKind` for what each kind covers)."""
    d = event.data
    made = _alert_parts(event)
    if made is None:
        return None
    kind, sentence = made
    return Alert(event.event_id, kind, sentence, event.occurred_at, event.type, task_id=getattr(d, "task_id", None),
                 account_id=getattr(d, "account_id", None), project=getattr(d, "project", None))


def _alert_parts(event: Envelope) -> tuple[AlertKind, str] | None:  # noqa: PLR0911 - one branch per kind
    d = event.data
    if isinstance(event, QuotaThresholdCrossed):
        return AlertKind.QUOTA_THRESHOLD, (
            f"quota account {d.account_id} of project {d.project} has used {d.threshold:.0%} of its GPU-hours "
            f"({d.used_gpu_hours:.1f} of {d.total_gpu_hours:.1f})")
    if isinstance(event, QuotaExpiring):
        return AlertKind.QUOTA_EXPIRING, (
            f"quota account {d.account_id} of project {d.project} expires {d.valid_to.isoformat(timespec='minutes')} "
            f"with {d.remaining_gpu_hours:.1f} GPU-hours left")
    if isinstance(event, TaskHeld) and d.reason in QUOTA_HOLDS:
        return AlertKind.QUOTA_HOLD, f"task {d.task_id} is held ({d.reason.value}): {d.detail}"
    if isinstance(event, TaskHeld) and d.reason is DeferralReason.REPEATEDLY_IDLE:
        return AlertKind.IDLE_RECLAIM, f"task {d.task_id} is held: {d.detail}"
    if isinstance(event, TaskQuotaEndangered):
        return AlertKind.QUOTA_AT_RISK, f"core task {d.task_id}: {d.detail}"
    if isinstance(event, TaskApprovalDelayed):
        return AlertKind.APPROVAL_WAITING, f"task {d.task_id} {d.detail}"
    if isinstance(event, TaskDeadlineEndangered):
        return AlertKind.DEADLINE_AT_RISK, f"task {d.task_id} may miss its deadline: {d.detail}"
    if isinstance(event, TaskRequeued) and d.reason is RequeueReason.RECLAIMED_IDLE:
        return AlertKind.IDLE_RECLAIM, f"task {d.task_id} lost lease {d.lease_id}: {d.detail}; requeued"
    if isinstance(event, TaskFailed):
        return AlertKind.TASK_FAILED, f"task {d.task_id} failed: {d.error}"
    if isinstance(event, TaskSucceeded) and d.flags:
        flags = ", ".join(flag.value for flag in d.flags)
        return AlertKind.FLAGGED_SUCCESS, f"task {d.task_id} succeeded but is flagged for review ({flags}): {d.flag_detail}"
    return None
