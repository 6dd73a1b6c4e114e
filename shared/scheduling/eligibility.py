"""Eligibility: may this task be considered for GPUs at all this cycle?

Checked in this order, the first failure being the reason the board shows: its data is ready
(unless the policy is readiness-blind), it is matched (has card options), it is approved. Quota is
checked next, per card option, by `quota.QuotaBook`; capacity after that, by placement.
"""

from __future__ import annotations

from shared.scheduling import reasons
from shared.scheduling.model import DeferralReason, QueuedTask, enum_members
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.queue_columns import APPROVED, FLAG_VALUES, MATCHED, READY

R = enum_members(DeferralReason)  # the members, read faster

# (reason, sentence) of each readiness failure: made once, as every task that fails the check says the same.
DATA_NOT_READY = (R.DATA_NOT_READY, reasons.DATA_NOT_READY_TEXT)
UNMATCHED = (R.UNMATCHED, reasons.UNMATCHED_TEXT)
NOT_APPROVED = (R.NOT_APPROVED, reasons.NOT_APPROVED_TEXT)


def readiness_failure(task: QueuedTask, policy: Policy) -> tuple[DeferralReason, str] | None:
    """Why the task cannot be considered (data, match, approval) and the sentence, or None if it can."""
    if policy.readiness_gate and not task.data_ready:
        return DATA_NOT_READY
    if not task.options:
        return UNMATCHED
    if not task.approved:
        return NOT_APPROVED
    return None


def readiness_failures(policy: Policy) -> list[tuple[DeferralReason, str] | None]:
    """`readiness_failure` of a task by its `queue_columns.flags_of` (the list's index), in the same order."""
    def failure(flags: int) -> tuple[DeferralReason, str] | None:
        if policy.readiness_gate and not flags & READY:
            return DATA_NOT_READY
        if not flags & MATCHED:
            return UNMATCHED
        return None if flags & APPROVED else NOT_APPROVED
    return [failure(flags) for flags in FLAG_VALUES]
