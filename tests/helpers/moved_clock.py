"""A clock a test moves by hand, for a service's periodic loop (no waiting a day for a daily job)."""

from __future__ import annotations

from datetime import datetime


class MovedClock:
    """The service's clock: the test sets `now`; `asked` counts how often the loop read it."""

    def __init__(self, now: datetime) -> None:
        self.now, self.asked = now, 0

    def __call__(self) -> datetime:
        self.asked += 1
        return self.now
