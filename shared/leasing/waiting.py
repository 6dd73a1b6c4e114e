"""What a deferral does to a waiting task: its new state, the reason stored, the events published.

One rule, by the reason's `WaitKind` (`shared.scheduling.model`):

- **not eligible** (data not ready, unmatched): the task is `held` with that reason; nothing is
  published, readiness and the matcher already did (`task.readiness_changed`, `task.unmatchable`);
- **hold** (quota, approval, deadline, operator): the task is `held`; `task.held` is published when
  the reason differs from the one stored;
- **capacity** (no capacity, headroom, a reservation, ...): the task is eligible and `queued`. The
  first time, `task.queued` announces it and no reason is stored yet. After that a new reason is
  stored and published (`task.held` with the reason: the board says why it waits) only once the
  task has been left unchanged for `settle_s`: in a busy queue these reasons flip from cycle to
  cycle, and most tasks start before any of them would mean anything to a reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.events.states import TaskState
from shared.scheduling.model import DeferralReason, WaitKind


@dataclass(frozen=True, slots=True)
class Waiting:
    """What the dispatcher last stored about a waiting task."""

    state: TaskState  # queued or held
    reason: DeferralReason | None
    queued_announced: bool  # the task's last announcement is `task.queued`
    changed_at: datetime  # when the dispatcher last changed the task


@dataclass(frozen=True, slots=True)
class WaitingUpdate:
    """A change to a waiting task and the events that say so."""

    state: TaskState
    reason: DeferralReason | None  # the reason stored
    queued_announced: bool
    announce_queued: bool  # publish `task.queued`: the task became eligible (again)
    publish_held: bool  # publish `task.held` with `reason`


def update_waiting(reason: DeferralReason, waiting: Waiting, now: datetime, settle_s: float) -> WaitingUpdate | None:
    """The module docstring's rule for a task `plan()` deferred with `reason`; None: nothing changes."""
    kind = reason.kind
    if kind is WaitKind.NOT_ELIGIBLE:
        update = WaitingUpdate(TaskState.HELD, reason, False, announce_queued=False, publish_held=False)
    elif kind is WaitKind.HOLD:
        update = WaitingUpdate(TaskState.HELD, reason, False, announce_queued=False, publish_held=reason != waiting.reason)
    elif not waiting.queued_announced:
        update = WaitingUpdate(TaskState.QUEUED, None, True, announce_queued=True, publish_held=False)
    elif reason != waiting.reason and waiting.changed_at <= now - timedelta(seconds=settle_s):
        update = WaitingUpdate(TaskState.QUEUED, reason, True, announce_queued=False, publish_held=True)
    else:
        return None  # the same reason, or a new capacity reason that has not settled yet
    if (update.state, update.reason, update.queued_announced) == (waiting.state, waiting.reason, waiting.queued_announced):
        return None
    return update
