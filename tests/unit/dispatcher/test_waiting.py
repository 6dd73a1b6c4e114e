"""What a deferral does to a waiting task (`shared.leasing.waiting.update_waiting`): one table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.events.states import TaskState
from shared.leasing.waiting import Waiting, WaitingUpdate, update_waiting
from shared.scheduling.model import DeferralReason as D

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTLE_S = 10.0
JUST_NOW, SETTLED = NOW - timedelta(seconds=1), NOW - timedelta(seconds=11)
QUEUED, HELD = TaskState.QUEUED, TaskState.HELD


def waiting(state: TaskState = QUEUED, reason: D | None = D.NO_CAPACITY, announced: bool = True,
            changed_at: datetime = JUST_NOW) -> Waiting:
    return Waiting(state, reason, announced, changed_at)


@pytest.mark.parametrize(
    ("reason", "before", "expected"),
    [
        # data and match: the owners already published it; the task is held, nothing announced
        (D.DATA_NOT_READY, waiting(reason=None, announced=False), WaitingUpdate(HELD, D.DATA_NOT_READY, False, False, False)),
        (D.UNMATCHED, waiting(), WaitingUpdate(HELD, D.UNMATCHED, False, False, False)),
        (D.DATA_NOT_READY, waiting(HELD, D.DATA_NOT_READY, False), None),
        # quota and approval: held at once, published when the reason changes
        (D.QUOTA_EXHAUSTED, waiting(), WaitingUpdate(HELD, D.QUOTA_EXHAUSTED, False, False, True)),
        (D.QUOTA_EXHAUSTED, waiting(HELD, D.QUOTA_EXHAUSTED, False), None),
        (D.NOT_APPROVED, waiting(HELD, D.QUOTA_EXPIRES, False), WaitingUpdate(HELD, D.NOT_APPROVED, False, False, True)),
        # capacity: a newly eligible task is announced, with no reason stored yet
        (D.NO_CAPACITY, waiting(reason=None, announced=False), WaitingUpdate(QUEUED, None, True, True, False)),
        (D.HEADROOM, waiting(HELD, D.QUOTA_EXHAUSTED, False, SETTLED), WaitingUpdate(QUEUED, None, True, True, False)),
        # ... its reason is published once the task has been left unchanged for SETTLE_S
        (D.NO_CAPACITY, waiting(reason=None), None),
        (D.NO_CAPACITY, waiting(reason=None, changed_at=SETTLED), WaitingUpdate(QUEUED, D.NO_CAPACITY, True, False, True)),
        # ... and reasons that flip between cycles are coalesced
        (D.BEHIND_RESERVATION, waiting(), None),
        (D.HEADROOM, waiting(changed_at=SETTLED), WaitingUpdate(QUEUED, D.HEADROOM, True, False, True)),
        (D.NO_CAPACITY, waiting(changed_at=SETTLED), None),
    ],
)
def test_what_a_deferral_does_to_a_waiting_task(reason: D, before: Waiting, expected: WaitingUpdate | None) -> None:
    assert update_waiting(reason, before, NOW, SETTLE_S) == expected
