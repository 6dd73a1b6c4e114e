"""The states of a task's overall status, as the `evolve` projection (a later issue) will compute them.

Services use `TaskState` to store and compare statuses; `is_terminal` says when nothing more
can happen to a task.
"""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    """Overall status of a task, projected from its events."""

    SUBMITTED = "submitted"  # accepted by intake; readiness and matching not yet known
    REJECTED = "rejected"  # intake refused the submission (terminal)
    WAITING_DATA = "waiting_data"  # some inputs are not ready yet
    UNMATCHABLE = "unmatchable"  # no card type can run it (a catalog change may fix that)
    QUEUED = "queued"  # ready and matched, waiting for GPUs
    HELD = "held"  # blocked on quota, approval, deadline or an operator
    LEASED = "leased"  # GPUs granted; the agent has not reported the start yet
    RUNNING = "running"  # the agent reported the task started
    SUCCEEDED = "succeeded"  # finished with exit code 0 (terminal)
    FAILED = "failed"  # finished with an error and will not be retried (terminal)
    CANCELLED = "cancelled"  # cancelled on request (terminal)

    @property
    def is_terminal(self) -> bool:
        """True when no further transition can happen."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.REJECTED})
