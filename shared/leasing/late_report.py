"""A run that finished cleanly but whose report came after its lease expired: reconciled (pure).

Fencing refuses every report about an ended lease (`lease_ended`). One such report is worth more
than a refusal: the agent ran the task to a clean end, but its `report.finished` reached the
dispatcher only after the lease's TTL had run out — through an outage the dispatcher did not know
of (between the agent and Redis, say), so nothing held the expiry back (`outage.py`). Fencing
checked the report's agent, fencing token and task against the lease before it looked at whether
the lease was still active, so the report is about that very run: the work is done, and running
the task again would do it twice.

`reconcilable(lease, task, outcome)` is true when the claim was refused only because the lease
had ended, and:

- the lease ended because it EXPIRED (not preempted, revoked or finished);
- the run ended cleanly (exit code 0, and not a stop the dispatcher asked for);
- the task is not final and no cancel is waiting for it (a cancel wins);
- the lease was its grant's only part (a multi-node run is whole only with every part).

Then `LeaseWork.reconcile_late_success` ends the task as succeeded with that run (`task.succeeded`
names the expired lease) and revokes a newer run granted meanwhile (`superseded`). The expired
lease keeps its charge: from its grant to its expiry.
"""

from __future__ import annotations

from shared.events.reasons import ReleaseReason
from shared.leasing.fencing import Refusal, Rejection
from shared.leasing.lease_end import succeeded
from shared.leasing.records import LeaseRecord, TaskRecord
from shared.leasing.run_outcome import RunOutcome


def reconcilable(refusal: Refusal, lease: LeaseRecord | None, task: TaskRecord | None, outcome: RunOutcome) -> bool:
    """May this refused `report.finished` end its task as succeeded? (See the module docstring.)"""
    if refusal.reason is not Rejection.LEASE_ENDED or lease is None or task is None:
        return False
    return (
        lease.end_reason is ReleaseReason.EXPIRED
        and lease.parts == 1
        and succeeded(outcome.exit_code, outcome.error)
        and not task.state.is_terminal
        and not task.cancel_requested
    )
