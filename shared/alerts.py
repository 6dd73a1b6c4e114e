"""Alerts: the events that must reach a person, as one `Alert` each (pure).

    alert = alert_of(event)      # None: the event is not worth telling anyone

An alert has a kind (`AlertKind`), what it is about (a task, a quota account), a one-line English
sentence, and the event it came from (its id is the alert's id: a redelivered event is the same
alert). The ledger's alerter stores and delivers them to the policy's sinks
(`services.ledger.alerting`).
"""

from __future__ import annotations

from enum import StrEnum


class AlertKind(StrEnum):
    """What an alert is about (the policy's `alerts.sinks[].kinds` filter by these)."""

    QUOTA_THRESHOLD = "quota_threshold"  # an account's used share crossed a threshold (80%, 95%)
    QUOTA_EXPIRING = "quota_expiring"  # an account with hours left ends within its alert lead
    QUOTA_HOLD = "quota_hold"  # a task is held because its quota expires first, or is used up
    QUOTA_AT_RISK = "quota_at_risk"  # a core task will end within the lead of its quota's expiry, or is not covered
    APPROVAL_WAITING = "approval_waiting"  # a task has waited too long for a reviewer
    DEADLINE_AT_RISK = "deadline_at_risk"  # a task's estimated end is past its deadline
    IDLE_RECLAIM = "idle_reclaim"  # a lease's GPUs sat idle and were taken back
    TASK_FAILED = "task_failed"  # a task failed and will not be retried
