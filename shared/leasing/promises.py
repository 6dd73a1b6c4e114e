"""Quota accounts' promised GPU-seconds: the rest of the estimates of the active leases each account
applies to, cut at its window — worked out from scratch (`quota_accounts`) or kept between cycles and
updated lease by lease (`KeptPromises`), the two equal by construction of the arithmetic.

Counted in whole microseconds (the records' resolution; `now` rounded to one), in integers, so the sum
does not depend on the order of the leases: a lease of `gpus` GPUs whose estimate ends at `end`
promises, to an account with window `[valid_from, valid_to)` that applies to it (`QuotaTerms.applies_to`),

    gpus x max(0, min(end, valid_to) - max(now, valid_from))

— `quota_balance.counted_gpu_seconds` of the slice from `now` to `end`. For one account at one `now`, with
`cut = min(end, valid_to)` and `start = max(now, valid_from)`, that sums to
`sum(gpus x cut) - start x sum(gpus)` over the leases whose `cut` lies after `start`. So an account kept
between cycles (`_KeptAccount`) holds those two sums over the leases whose cut lay after the last start,
and a heap of their cuts: when `now` advances, the leases whose estimate (or the window) ended in between
leave the sums one by one; when it goes back, the account is counted afresh.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.leasing.records import LeaseRecord, QuotaRecord, TaskRecord
from shared.scheduling.model import QuotaAccount
from shared.scheduling.quota_balance import remaining_gpu_hours

US_PER_SECOND = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def micros(moment: datetime) -> int:
    """An aware datetime as whole microseconds since the epoch (exact)."""
    return (moment - _EPOCH) // _ONE_US


def now_micros(now: float) -> int:
    """`now` (float epoch seconds) rounded to whole microseconds."""
    return round(now * US_PER_SECOND)


@dataclass(frozen=True, slots=True)
class Promise:
    """What an active lease promises to the accounts that apply to it: GPUs of a card type until its
    estimated end (microseconds), for a project's work."""

    project: str
    card_type: str
    end_us: int
    gpus: int


def promise_of(lease: LeaseRecord, task: TaskRecord) -> Promise:
    return Promise(task.project or "", lease.card_type, micros(lease.estimated_end), len(lease.gpu_indices))


@dataclass(frozen=True, slots=True)
class AccountWindow:
    """The part of an account its promises depend on (the rest — amount, usage — is read per cycle)."""

    project: str
    card_type: str | None  # None: every card type
    valid_from_us: int
    valid_to_us: int

    @staticmethod
    def of(account: QuotaRecord) -> AccountWindow:
        return AccountWindow(account.project, account.card_type, micros(account.valid_from), micros(account.valid_to))

    def applies_to(self, promise: Promise) -> bool:
        return self.project == promise.project and (self.card_type is None or self.card_type == promise.card_type)

    def cut(self, promise: Promise) -> int:
        """Where the promise stops counting for this account: its end, or the window's if that is sooner."""
        return min(promise.end_us, self.valid_to_us)

    def start(self, now_us: int) -> int:
        """Where promises start counting for this account at `now_us`."""
        return max(now_us, self.valid_from_us)


def promised_gpu_us(window: AccountWindow, promises: Iterable[Promise], now_us: int) -> int:
    """The GPU-microseconds `promises` promise to the account at `now_us`, counted from scratch."""
    start = window.start(now_us)
    return sum(promise.gpus * max(0, window.cut(promise) - start) for promise in promises if window.applies_to(promise))


def quota_account(account: QuotaRecord, promised_us: int) -> QuotaAccount:
    """The account as `plan()` sees it: what is left after the usage it counted and what is promised."""
    terms = account.terms()
    return QuotaAccount(
        project=account.project,
        remaining_gpu_hours=remaining_gpu_hours(terms, account.used_gpu_seconds + promised_us / US_PER_SECOND),
        valid_from=terms.valid_from, valid_to=terms.valid_to, card_type=account.card_type,
        account_id=account.account_id,
    )


def quota_accounts(
    accounts: Iterable[QuotaRecord], leases: Iterable[tuple[LeaseRecord, TaskRecord]], now: float,
) -> dict[str, QuotaAccount]:
    """Every account by id, with what is left after the usage it counted AND after the rest of the
    estimates of the ACTIVE leases it applies to (already promised, not yet recorded), cut at its window
    like recorded usage. From scratch: every account against every lease of its project."""
    by_project: dict[str, list[Promise]] = defaultdict(list)
    for lease, task in leases:
        promise = promise_of(lease, task)
        by_project[promise.project].append(promise)
    now_us = now_micros(now)
    return {account.account_id: quota_account(account, promised_gpu_us(AccountWindow.of(account),
                                                                        by_project.get(account.project, ()), now_us))
            for account in accounts}


class KeptPromises:
    """`quota_accounts`, kept between cycles: the promise of every active lease (`put` when one may have
    changed: granted, ended, its estimated end, GPUs, card type or task's project changed), and per account
    the sums over the promises that still count (`_KeptAccount`). An account whose window, project or
    card type changed, or that is new, is counted afresh from the kept promises."""

    def __init__(self, promises: Mapping[str, Promise] | None = None) -> None:
        self._promises: dict[str, Promise] = dict(promises or {})
        self._accounts: dict[str, _KeptAccount] = {}
        self._by_project: dict[str, list[_KeptAccount]] = {}

    @staticmethod
    def of(leases: Iterable[tuple[LeaseRecord, TaskRecord]]) -> KeptPromises:
        return KeptPromises({lease.lease_id: promise_of(lease, task) for lease, task in leases})

    def put(self, lease_id: str, promise: Promise | None) -> None:
        """The lease's promise now (None: the lease is no longer active)."""
        held = self._promises.get(lease_id)
        if held == promise:
            return
        if held is not None:
            del self._promises[lease_id]
            for account in self._by_project.get(held.project, ()):
                account.leave(lease_id, held)
        if promise is not None:
            self._promises[lease_id] = promise
            for account in self._by_project.get(promise.project, ()):
                account.join(lease_id, promise)

    def quotas(self, accounts: Iterable[QuotaRecord], now: float) -> dict[str, QuotaAccount]:
        """`quota_accounts(accounts, <the active leases>, now)`."""
        now_us, quotas = now_micros(now), {}
        records = {account.account_id: account for account in accounts}
        if records.keys() != self._accounts.keys() or any(
                not kept.holds(records[account_id]) for account_id, kept in self._accounts.items()):
            self._recount(records.values())
        for account_id, record in records.items():
            quotas[account_id] = quota_account(record, self._accounts[account_id].promised_us(now_us))
        return quotas

    def _recount(self, accounts: Iterable[QuotaRecord]) -> None:
        """Keep these accounts: the ones held with the same window kept as they are, the others counted afresh."""
        held, self._accounts, self._by_project = self._accounts, {}, {}
        by_project: dict[str, dict[str, Promise]] | None = None
        for record in accounts:
            kept = held.get(record.account_id)
            if kept is None or not kept.holds(record):
                if by_project is None:
                    by_project = defaultdict(dict)
                    for lease_id, promise in self._promises.items():
                        by_project[promise.project][lease_id] = promise
                kept = _KeptAccount(AccountWindow.of(record), by_project.get(record.project, {}))
            self._accounts[record.account_id] = kept
            self._by_project.setdefault(kept.window.project, []).append(kept)


class _KeptAccount:
    """One account's promised GPU-microseconds, kept: the promises that apply to it (`_cuts`: lease id ->
    (cut, GPUs)), the ones whose cut lay after the last start (`_ahead`) with their two sums, and a heap of
    their cuts (entries of promises since gone or changed are skipped when they come up)."""

    __slots__ = ("window", "_key", "_cuts", "_ahead", "_heap", "_sum_gpu_cut", "_sum_gpus", "_start")

    def __init__(self, window: AccountWindow, promises: Mapping[str, Promise]) -> None:
        self.window = window
        self._key = (window.project, window.card_type)
        self._cuts = {lease_id: (window.cut(promise), promise.gpus)
                      for lease_id, promise in promises.items() if window.applies_to(promise)}
        self._count_from(window.valid_from_us)

    def holds(self, account: QuotaRecord) -> bool:
        """True if this is kept for the account's present window, project and card type."""
        window = self.window
        return ((window.project, window.card_type) == (account.project, account.card_type)
                and window.valid_from_us == micros(account.valid_from) and window.valid_to_us == micros(account.valid_to))

    def join(self, lease_id: str, promise: Promise) -> None:
        if not self.window.applies_to(promise):
            return
        cut, gpus = self.window.cut(promise), promise.gpus
        self._cuts[lease_id] = (cut, gpus)
        if cut > self._start:
            self._ahead.add(lease_id)
            self._sum_gpu_cut += gpus * cut
            self._sum_gpus += gpus
            heapq.heappush(self._heap, (cut, lease_id))

    def leave(self, lease_id: str, promise: Promise) -> None:
        held = self._cuts.pop(lease_id, None)
        if held is None:
            return
        if lease_id in self._ahead:
            self._ahead.discard(lease_id)
            cut, gpus = held
            self._sum_gpu_cut -= gpus * cut
            self._sum_gpus -= gpus

    def promised_us(self, now_us: int) -> int:
        start = self.window.start(now_us)
        if start < self._start:
            self._count_from(start)
        else:
            self._advance(start)
        return self._sum_gpu_cut - start * self._sum_gpus

    def _advance(self, start: int) -> None:
        """Take out of the sums the promises whose cut is at or before `start` (not after the last start)."""
        heap, ahead, cuts = self._heap, self._ahead, self._cuts
        while heap and heap[0][0] <= start:
            cut, lease_id = heapq.heappop(heap)
            if lease_id in ahead and cuts[lease_id][0] == cut:
                ahead.discard(lease_id)
                self._sum_gpu_cut -= cuts[lease_id][1] * cut
                self._sum_gpus -= cuts[lease_id][1]
        self._start = start
        if len(heap) > 2 * len(ahead) + 64:  # mostly entries of promises gone: rebuild it
            self._heap = [(cuts[lease_id][0], lease_id) for lease_id in ahead]
            heapq.heapify(self._heap)

    def _count_from(self, start: int) -> None:
        """Count afresh: the promises whose cut lies after `start`."""
        self._start = start
        self._ahead = {lease_id for lease_id, (cut, _) in self._cuts.items() if cut > start}
        self._heap = [(self._cuts[lease_id][0], lease_id) for lease_id in self._ahead]
        heapq.heapify(self._heap)
        self._sum_gpu_cut = sum(gpus * cut for lease_id, (cut, gpus) in self._cuts.items() if lease_id in self._ahead)
        self._sum_gpus = sum(self._cuts[lease_id][1] for lease_id in self._ahead)
