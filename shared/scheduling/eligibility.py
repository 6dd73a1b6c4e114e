"""Eligibility: may this task be considered for GPUs at all this cycle?

Checked in this order, the first failure being the reason the board shows: its data is ready
(unless the policy is readiness-blind), it is matched (has card options), it is approved. Quota is
checked next, per card option, by `quota.QuotaBook`; capacity after that, by placement.
"""

from __future__ import annotations

from shared.scheduling import reasons
from shared.scheduling.model import Deferral, DeferralReason, Policy, QueuedTask, enum_members

R = enum_members(DeferralReason)  # the members, read faster


def readiness_deferral(task: QueuedTask, policy: Policy) -> Deferral | None:
    """Why the task cannot be considered (data, match, approval), or None if it can."""
    if policy.readiness_gate and not task.data_ready:
        return Deferral(task.task_id, R.DATA_NOT_READY, reasons.DATA_NOT_READY_TEXT)
    if not task.options:
        return Deferral(task.task_id, R.UNMATCHED, reasons.UNMATCHED_TEXT)
    if not task.approved:
        return Deferral(task.task_id, R.NOT_APPROVED, reasons.NOT_APPROVED_TEXT)
    return None
