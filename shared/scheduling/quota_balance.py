"""Quota accounts: which apply to a task, what each has used and has left, and whether they cover it.

ONE set of rules, pure, shared by everything that reasons about quotas: the scheduling core
(`quota.QuotaBook`), the dispatcher (`shared.leasing.snapshot`, `shared.leasing.task_facets`),
the ledger (`services.ledger.quotas`: its SQL sums the same `counted_gpu_seconds`, and a property
test holds the two equal) and the pre-flight check.

- An account belongs to one project and optionally one card type (None: every card type), with
  its own window `[valid_from, valid_to)`.
- It **applies** to work of its project on its card type (or on any card type, if it names none).
- It **counts** the usage that applies to it inside its window, cut at the window's edges:
  `gpus x overlap(slice, window)` GPU-seconds (`counted_gpu_seconds`).
- Each account is a **limit** of its own: an H100 account of 100 GPU-hours and an account of 500
  for any card type mean "at most 100 on H100, and at most 500 in all"; usage on H100 counts
  against both.
- **Coverage** of a task on one card type (`coverage`): no account applies → unlimited; accounts
  apply but none is in force → not yet valid (one starts later) or expired ("an expired account
  covers nothing"); otherwise EVERY account in force must outlast the task's estimated end (plus
  the policy's margin) and have the task's GPU-hours left.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class QuotaTerms:
    """What an account grants: GPU-hours to a project (optionally one card type) within a window."""

    account_id: str
    project: str
    card_type: str | None  # None: every card type
    gpu_hours: float
    valid_from: float  # epoch seconds, inclusive
    valid_to: float  # epoch seconds, exclusive

    def applies_to(self, project: str, card_type: str) -> bool:
        """True when work of `project` on `card_type` counts against (and needs) this account."""
        return self.project == project and (self.card_type is None or self.card_type == card_type)

    def in_force(self, at: float) -> bool:
        return self.valid_from <= at < self.valid_to


@dataclass(frozen=True, slots=True)
class UsageSlice:
    """GPUs of one card type held by a project's work from `start` to `end` (epoch seconds)."""

    project: str
    card_type: str
    start: float
    end: float
    gpus: int


def counted_gpu_seconds(terms: QuotaTerms, usage: UsageSlice) -> float:
    """The GPU-seconds of `usage` this account counts: none if it does not apply, else the GPUs times
    the part of the slice inside the account's window."""
    if not terms.applies_to(usage.project, usage.card_type):
        return 0.0
    overlap = min(usage.end, terms.valid_to) - max(usage.start, terms.valid_from)
    return usage.gpus * overlap if overlap > 0 else 0.0


def used_gpu_seconds(terms: QuotaTerms, usage: Iterable[UsageSlice]) -> float:
    """Everything an account counts of `usage` (the ledger's SQL computes exactly this sum)."""
    return sum(counted_gpu_seconds(terms, piece) for piece in usage)


def remaining_gpu_hours(terms: QuotaTerms, used_gpu_seconds: float) -> float:
    """GPU-hours left (negative when overdrawn: usage is recorded after the fact)."""
    return terms.gpu_hours - used_gpu_seconds / SECONDS_PER_HOUR


class Coverage(StrEnum):
    """What the accounts of a project say about one task on one card type."""

    UNLIMITED = "unlimited"  # no account applies to this project and card type
    COVERED = "covered"  # every account in force outlasts the task and has its GPU-hours left
    NOT_YET_VALID = "not_yet_valid"  # accounts apply, none in force yet, one starts later
    EXPIRED = "expired"  # accounts apply, none in force any more
    EXPIRES_FIRST = "expires_first"  # an account in force ends before the task's estimated end (+ margin)
    EXHAUSTED = "exhausted"  # an account in force has fewer GPU-hours left than the task needs

    @property
    def allows(self) -> bool:
        return self in (Coverage.UNLIMITED, Coverage.COVERED)


@dataclass(frozen=True, slots=True)
class CoverageVerdict:
    """The verdict, the account it is about (None when unlimited or covered) and the accounts that
    would pay (the ones in force that apply: a grant charges each of them)."""

    coverage: Coverage
    account: QuotaTerms | None = None
    paying: tuple[QuotaTerms, ...] = ()


def coverage(
    accounts: Sequence[QuotaTerms], left_gpu_hours: Mapping[str, float], project: str, card_type: str,
    need_gpu_hours: float, runtime_s: float, now: float, margin_s: float = 0.0, expiry_gate: bool = True,
) -> CoverageVerdict:
    """Do the project's `accounts` cover a task needing `need_gpu_hours` over `runtime_s` on `card_type`?

    `left_gpu_hours` is each account's GPU-hours left (by account id), after whatever the caller has
    already promised. With `expiry_gate` off (readiness-blind baselines), an account in force need
    not outlast the task; the amount is still checked.
    """
    return CoverageRule(accounts, project, card_type, now).verdict(left_gpu_hours, need_gpu_hours, runtime_s,
                                                                   margin_s, expiry_gate)


class CoverageRule:
    """`coverage` for one project and card type at one moment, with what does not depend on the task
    (which accounts apply, which are in force) worked out once: the scheduling core asks it for
    every queued task of a project with accounts.

    Of the accounts in force, the one to blame for an early end is the one ending soonest (ties: id),
    and the one to blame for too few hours the one with the fewest left (ties: id) — if those two
    pass, every account passes.
    """

    __slots__ = ("_fixed", "_in_force", "_soonest", "_now")

    def __init__(self, accounts: Sequence[QuotaTerms], project: str, card_type: str, now: float) -> None:
        self._now = now
        self._in_force: tuple[QuotaTerms, ...] = ()
        self._soonest: QuotaTerms | None = None
        applying = [a for a in accounts if a.applies_to(project, card_type)]
        in_force = sorted((a for a in applying if a.in_force(now)), key=lambda a: (a.valid_to, a.account_id))
        if not applying:
            self._fixed: CoverageVerdict | None = CoverageVerdict(Coverage.UNLIMITED)
        elif not in_force:
            later = [a for a in applying if a.valid_from > now]
            if later:
                self._fixed = CoverageVerdict(Coverage.NOT_YET_VALID, min(later, key=lambda a: (a.valid_from, a.account_id)))
            else:
                self._fixed = CoverageVerdict(Coverage.EXPIRED, max(applying, key=lambda a: (a.valid_to, a.account_id)))
        else:
            self._fixed = None
            self._in_force, self._soonest = tuple(in_force), in_force[0]

    def verdict(self, left_gpu_hours: Mapping[str, float], need_gpu_hours: float, runtime_s: float,
                margin_s: float = 0.0, expiry_gate: bool = True) -> CoverageVerdict:
        if self._fixed is not None:
            return self._fixed
        failure = self.failure(left_gpu_hours, need_gpu_hours, runtime_s, margin_s, expiry_gate)
        if failure is None:
            return CoverageVerdict(Coverage.COVERED, None, self._in_force)
        return CoverageVerdict(failure[0], failure[1], self._in_force)

    def failure(self, left_gpu_hours: Mapping[str, float], need_gpu_hours: float, runtime_s: float,
                margin_s: float = 0.0, expiry_gate: bool = True) -> tuple[Coverage, QuotaTerms] | None:
        """None if the accounts allow the task (`verdict(...).coverage.allows`); else the verdict's
        coverage and account, without building the verdict."""
        return failure_under(self.standing(left_gpu_hours), need_gpu_hours, runtime_s, margin_s, expiry_gate)

    def standing(self, left_gpu_hours: Mapping[str, float]) -> RuleStanding:
        """What the rule's verdicts depend on besides the task, with these hours left (`failure_under`).
        A caller asking for many tasks keeps it until the hours left change."""
        fixed = self._fixed
        if fixed is not None:
            return (True, None if fixed.coverage is Coverage.UNLIMITED else (fixed.coverage, fixed.account),
                    0.0, None, 0.0, None)
        soonest, poorest = self._soonest, self._poorest(left_gpu_hours)
        return (False, None, soonest.valid_to - self._now, soonest,
                left_gpu_hours.get(poorest.account_id, poorest.gpu_hours), poorest)

    def _poorest(self, left_gpu_hours: Mapping[str, float]) -> QuotaTerms:
        in_force = self._in_force
        if len(in_force) == 1:
            return in_force[0]
        return min(in_force, key=lambda a: (left_gpu_hours.get(a.account_id, a.gpu_hours), a.account_id))


# (settled, its failure, the soonest-ending account's seconds left, that account, the poorest account's
# GPU-hours left, that account): `CoverageRule.standing`. When settled, the failure holds for every task.
RuleStanding = tuple[bool, "tuple[Coverage, QuotaTerms] | None", float, "QuotaTerms | None", float, "QuotaTerms | None"]


def failure_under(standing: RuleStanding, need_gpu_hours: float, runtime_s: float, margin_s: float,
                  expiry_gate: bool) -> tuple[Coverage, QuotaTerms] | None:
    """`CoverageRule.failure` for one task, given the rule's standing: accounts none of which is in
    force fail every task; else the soonest-ending account must outlast the task (plus the margin) and
    the poorest must have its GPU-hours left (if those two pass, every account in force passes)."""
    settled, failure, soonest_left_s, soonest, poorest_left, poorest = standing
    if settled:
        return failure
    if expiry_gate and soonest_left_s < runtime_s + margin_s:
        return _EXPIRES_FIRST, soonest
    if poorest_left < need_gpu_hours:
        return _EXHAUSTED, poorest
    return None


_EXPIRES_FIRST, _EXHAUSTED = Coverage.EXPIRES_FIRST, Coverage.EXHAUSTED  # read once (Enum.MEMBER is slow in 3.11)
