"""Quota checks within one cycle: does the project's budget cover the task, and for long enough?

A task's cost against its quota is its estimate in GPU-hours on the card type it would run on
(`gpus x runtime_s / 3600`), so a faster card may fit a budget (or an expiry date) that a slower one
does not: quota is checked per card option. Grants made earlier in the same cycle are charged
immediately, so two tasks cannot both spend the same remaining hours. A project without an account
is unlimited.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from shared.scheduling import reasons
from shared.scheduling.model import CardOption, Deferral, DeferralReason, Policy, QueuedTask, QuotaAccount

_SECONDS_PER_HOUR = 3600.0


def gpu_hours(task: QueuedTask, option: CardOption) -> float:
    """The task's estimate on this card type, in GPU-hours."""
    return task.gpus * option.runtime_s / _SECONDS_PER_HOUR


class QuotaBook:
    """Remaining GPU-hours per project for this cycle (a private copy; inputs stay untouched)."""

    __slots__ = ("_accounts", "_remaining", "_now", "_margin_s", "_expiry_gate")

    def __init__(self, accounts: Mapping[str, QuotaAccount], policy: Policy, now: float) -> None:
        self._accounts = dict(accounts)
        self._remaining = {project: acct.remaining_gpu_hours for project, acct in accounts.items()}
        self._now = now
        self._margin_s = policy.quota_expiry_margin_s
        self._expiry_gate = policy.quota_expiry_gate

    def usable_options(self, task: QueuedTask) -> tuple[tuple[CardOption, ...], Deferral | None]:
        """The task's card options its quota allows (matcher order kept), or a deferral if none."""
        account = self._accounts.get(task.project)
        if account is None:
            return task.options, None
        if self._now < account.valid_from:
            detail = reasons.quota_not_yet_valid(task.project, account.valid_from - self._now)
            return (), Deferral(task.task_id, DeferralReason.QUOTA_NOT_YET_VALID, detail)
        left_s = account.valid_to - self._now
        latest_end_s = left_s - self._margin_s if self._expiry_gate else math.inf
        hours_left = self._remaining[task.project] * _SECONDS_PER_HOUR / task.gpus  # in runtime seconds
        usable = tuple(option for option in task.options
                       if left_s > 0 and option.runtime_s <= latest_end_s and option.runtime_s <= hours_left)
        if usable:
            return usable, None
        return (), self._problem(task, task.options[0], account)

    def charge(self, task: QueuedTask, option: CardOption) -> None:
        """Record a grant: its estimate leaves the project's remaining hours."""
        if task.project in self._remaining:
            self._remaining[task.project] -= gpu_hours(task, option)

    def _problem(self, task: QueuedTask, option: CardOption, account: QuotaAccount) -> Deferral:
        """The deferral for an option the quota does not allow (expiry first, then amount)."""
        left_s = account.valid_to - self._now
        if left_s <= 0 or (self._expiry_gate and option.runtime_s + self._margin_s > left_s):
            detail = reasons.quota_expires(task.project, option.card_type, option.runtime_s, left_s, self._margin_s)
            return Deferral(task.task_id, DeferralReason.QUOTA_EXPIRES, detail)
        need = gpu_hours(task, option)
        left = self._remaining[task.project]
        detail = reasons.quota_exhausted(task.project, option.card_type, need, left)
        return Deferral(task.task_id, DeferralReason.QUOTA_EXHAUSTED, detail)
