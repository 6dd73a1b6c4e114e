"""Quota checks within one cycle: do the accounts that apply cover the task, and for long enough?

A task's cost against its quota is its estimate in GPU-hours on the card type it would run on
(`gpus x runtime_s / 3600`), so a faster card may fit a budget (or an expiry date) that a slower one
does not — and an account of one card type applies only there: quota is checked per card option,
by the one rule of `quota_balance.coverage`. Grants made earlier in the same cycle are charged at
once to every account that pays for them, so two tasks cannot both spend the same remaining hours.
Work no account applies to is unlimited.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import inf, nextafter
from operator import le

from shared.scheduling import reasons
from shared.scheduling.model import CardOption, DeferralReason, QueuedTask, QuotaAccount, enum_members
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.quota_balance import (
    Coverage,
    CoverageRule,
    CoverageVerdict,
    QuotaTerms,
    RuleStanding,
    failure_under,
)

SECONDS_PER_HOUR = 3600.0
C, R = enum_members(Coverage), enum_members(DeferralReason)  # the members, read faster


def gpu_hours(task: QueuedTask, option: CardOption) -> float:
    """The task's estimate on this card type, in GPU-hours."""
    return task.gpus * option.runtime_s / SECONDS_PER_HOUR


def quota_terms(account_id: str, account: QuotaAccount) -> QuotaTerms:
    """The account's terms (`Snapshot.quotas` key as its id unless it names one)."""
    return QuotaTerms(account.account_id or account_id, account.project, account.card_type,
                      account.remaining_gpu_hours, account.valid_from, account.valid_to)


class QuotaBook:
    """Remaining GPU-hours per account for this cycle (a private copy; inputs stay untouched)."""

    __slots__ = ("_by_project", "_remaining", "_now", "_margin_s", "_expiry_gate", "_rules", "projects", "_names",
                 "_standings", "_limits", "longest_bounds", "_left_texts", "refusals", "_refusals_from")

    def __init__(self, accounts: Mapping[str, QuotaAccount], policy: Policy, now: float) -> None:
        self._by_project: dict[str, list[QuotaTerms]] = {}
        self._remaining: dict[str, float] = {}
        for key, account in accounts.items():
            terms = quota_terms(key, account)
            self._by_project.setdefault(account.project, []).append(terms)
            self._remaining[terms.account_id] = account.remaining_gpu_hours
        self.projects = frozenset(self._by_project)  # projects with at least one account
        self._now = now
        self._margin_s = policy.quota_expiry_margin_s
        self._expiry_gate = policy.quota_expiry_gate
        # project -> card type -> the coverage rule of the project's accounts there (made when first asked)
        self._rules: dict[str, dict[str, CoverageRule]] = {project: {} for project in self._by_project}
        self._names: dict[str, str] = {}  # account id -> how deferral sentences name it
        # project -> card type -> its rule's standing with the hours left now (dropped when they change)
        self._standings: dict[str, dict[str, RuleStanding]] = {}
        # project -> card type -> `_limit` of its standing (dropped with the standings)
        self._limits: dict[str, dict[str, tuple[float, float]]] = {}
        # project -> shape key -> the tightest `_limit` over the shape's card types (`allows_longest`; a project's
        # are dropped with its standings, on a charge)
        self.longest_bounds: dict[str, dict[int, tuple[float, float]]] = {}
        # account id -> (its GPU-hours left, `reasons.quota_left` of them): the account's half of the sentence
        self._left_texts: dict[str, tuple[float, str]] = {}
        # project -> shape key -> what refused every option of a task of that shape (`usable_indexes`; a project's
        # are dropped with its standings, on a charge)
        self.refusals: dict[str, dict[object, StandingRefusal]] = {}
        # (an option's `_limit`, GPUs) -> `refused_from` them (`_refused_from`; by value, so kept through charges)
        self._refusals_from: dict[tuple[tuple[float, float], int], float] = {}

    def usable_options(self, task: QueuedTask) -> tuple[tuple[CardOption, ...], tuple[DeferralReason, str] | None]:
        """The task's card options its quota allows (matcher order kept), or if none, why not: the
        deferral reason and its sentence."""
        rules = self._rules.get(task.project)
        if rules is None:
            return task.options, None
        margin, gate, gpus = self._margin_s, self._expiry_gate, task.gpus
        standings = self._standings.get(task.project)
        if standings is None:
            standings = self._standings[task.project] = {}
        usable, first_failure = [], None
        for option in task.options:
            standing = standings.get(option.card_type)
            if standing is None:
                standing = self._standing(task.project, option.card_type)
            runtime_s = option.runtime_s
            failure = failure_under(standing, gpus * runtime_s / SECONDS_PER_HOUR, runtime_s, margin, gate)
            if failure is None:
                usable.append(option)
            elif first_failure is None:
                first_failure = failure
        if usable or not task.options:
            return tuple(usable), None
        assert first_failure is not None
        return (), self._problem(task, task.options[0], *first_failure)

    def usable_indexes(self, project: str, card_types: Sequence[str], gpus: int, runtimes: Sequence[float],
                       shape_key: object = None) -> tuple[list[int], tuple[DeferralReason, str] | None]:
        """`usable_options` of a task given by its project, GPUs and per option (matcher order) card type and
        runtime: the indexes of the options its quota allows, or if none, why not (the same rule and
        sentence, without reading the task). Each option is tested against its card type's two bounds
        (`_limit`, the test of `allows_every_option`: `failure_under` is None exactly when it passes); only
        when none passes is `failure_under` asked, for the first option, whose failure the sentence names.
        A refusal is kept under `shape_key` (if given: the caller's key for these GPUs and card types) until
        the project's next charge (`refusals`, `StandingRefusal`)."""
        if project not in self._rules:
            return list(range(len(card_types))), None
        limits, margin = self._limits_of(project), self._margin_s
        usable = []
        for index, card_type in enumerate(card_types):
            limit = limits.get(card_type)
            if limit is None:
                limit = self._new_limit(project, card_type)
            runtime_s = runtimes[index]
            if not (limit[0] < runtime_s + margin or limit[1] < gpus * runtime_s / SECONDS_PER_HOUR):
                usable.append(index)
        if usable or not card_types:
            return usable, None
        runtime_s, card_type = runtimes[0], card_types[0]
        standing = self._standing(project, card_type)
        failure = failure_under(standing, gpus * runtime_s / SECONDS_PER_HOUR, runtime_s, margin, self._expiry_gate)
        assert failure is not None
        problem = self._problem_on(project, gpus, card_type, runtime_s, *failure)
        if shape_key is not None:
            refusals = self.refusals.get(project)
            if refusals is None:
                refusals = self.refusals[project] = {}
            refusals[shape_key] = self._standing_refusal(project, card_types, gpus, standing, failure, problem)
        return [], problem

    def _standing_refusal(self, project: str, card_types: Sequence[str], gpus: int, standing: RuleStanding,
                          failure: tuple[Coverage, QuotaTerms], problem: tuple[DeferralReason, str]) -> StandingRefusal:
        """What refused a task of the project with these GPUs and card types (`problem`, from the first card
        type's `standing` and its `failure`), for later tasks of the same shape until the project's next charge."""
        limits = self._limits_of(project)
        bounds = tuple([limits[card_type] for card_type in card_types])
        refusal = StandingRefusal(bounds, gpus, card_types[0], self._margin_s, self._expiry_gate,
                                  tuple([self._refused_from(bound, gpus) for bound in bounds]))
        settled, _, soonest_left_s, soonest, _, poorest = standing
        if settled:  # not yet valid, or expired: the sentence names no runtime
            refusal.settled = problem
            return refusal
        assert soonest is not None and poorest is not None and failure[0] in (C.EXPIRES_FIRST, C.EXHAUSTED)
        refusal.soonest_left_s, refusal.soonest_name = soonest_left_s, self._name(project, soonest)
        refusal.need_before, refusal.need_after = reasons.quota_exhausted_around(card_types[0],
                                                                                 self._left_text(project, poorest))
        return refusal

    def _refused_from(self, bound: tuple[float, float], gpus: int) -> float:
        """`refused_from` these bounds (`_limit`) for a task of `gpus` GPUs, kept for the cycle (by value)."""
        key = (bound, gpus)
        found = self._refusals_from.get(key)
        if found is None:
            found = self._refusals_from[key] = refused_from(bound[0], bound[1], gpus, self._margin_s)
        return found

    def allows_every_option(self, task: QueuedTask) -> bool:
        """True if the quota allows each of the task's card options (`usable_options` would return them
        all): `failure_under` of each option's standing, reduced to two bounds per card type (`_limit`),
        with the same float operations. The walk asks this first; most tasks pass."""
        limits = self._limits.get(task.project)
        if limits is None:
            if task.project not in self._rules:
                return True  # no account: unlimited
            limits = self._limits[task.project] = {}
        margin, gpus = self._margin_s, task.gpus
        for option in task.options:
            limit = limits.get(option.card_type)
            if limit is None:
                limit = limits[option.card_type] = self._limit(task.project, option.card_type)
            runtime_s = option.runtime_s
            if limit[0] < runtime_s + margin or limit[1] < gpus * runtime_s / SECONDS_PER_HOUR:
                return False
        return True

    def allows_longest(self, project: str, shape_key: int, card_types: Sequence[str], gpus: int,
                       longest_s: float) -> bool:
        """True only if the quota allows every card option of a task of the project with these GPUs and
        card types whose longest runtime is `longest_s` (`queue_columns.longest_runtime`) — without reading
        the task: the longest runtime against the tightest bounds of `_limit` over the card types (kept per
        `shape_key`, which the caller gives the same card types). Each option's test is monotone in its
        runtime and its bounds (float addition and multiplication round monotonically), so passing it
        passes `allows_every_option`; False says nothing: ask `allows_every_option`."""
        bounds = self.longest_bounds.get(project)
        if bounds is None:
            bounds = self.longest_bounds[project] = {}
        bound = bounds.get(shape_key)
        if bound is None:
            if not card_types:
                return False
            limits = [self._limits_of(project).get(card_type) or self._new_limit(project, card_type)
                      for card_type in card_types]
            bound = bounds[shape_key] = (min([limit[0] for limit in limits]), min([limit[1] for limit in limits]))
        return not (bound[0] < longest_s + self._margin_s or bound[1] < gpus * longest_s / SECONDS_PER_HOUR)

    def _limits_of(self, project: str) -> dict[str, tuple[float, float]]:
        limits = self._limits.get(project)
        if limits is None:
            limits = self._limits[project] = {}
        return limits

    def _new_limit(self, project: str, card_type: str) -> tuple[float, float]:
        limit = self._limits_of(project)[card_type] = self._limit(project, card_type)
        return limit

    def _standing(self, project: str, card_type: str) -> RuleStanding:
        """The standing of the project's rule on the card type with the hours left now (kept until a charge)."""
        standings = self._standings.get(project)
        if standings is None:
            standings = self._standings[project] = {}
        standing = standings.get(card_type)
        if standing is None:
            standing = standings[card_type] = self._rule(project, card_type).standing(self._remaining)
        return standing

    def _limit(self, project: str, card_type: str) -> tuple[float, float]:
        """(seconds left that a task's runtime plus the margin must not exceed, GPU-hours left that its need
        must not exceed) on the card type: `failure_under` is None exactly when neither is exceeded
        (-inf for a rule that fails every task, inf for a bound that does not apply)."""
        settled, failure, soonest_left_s, _, poorest_left, _ = self._standing(project, card_type)
        if settled:
            return (-inf, -inf) if failure is not None else (inf, inf)
        return (soonest_left_s if self._expiry_gate else inf, poorest_left)

    def verdict(self, task: QueuedTask, option: CardOption) -> CoverageVerdict:
        """`quota_balance.coverage` of the task on this card option, with what is left this cycle."""
        return self._rule(task.project, option.card_type).verdict(
            self._remaining, gpu_hours(task, option), option.runtime_s, self._margin_s, self._expiry_gate)

    def _rule(self, project: str, card_type: str) -> CoverageRule:
        """The coverage rule of the project's accounts on the card type (made once per cycle)."""
        rules = self._rules.get(project)
        if rules is None:
            return CoverageRule((), project, card_type, self._now)  # no account: unlimited
        rule = rules.get(card_type)
        if rule is None:
            rule = rules[card_type] = CoverageRule(self._by_project[project], project, card_type, self._now)
        return rule

    def charge(self, task: QueuedTask, option: CardOption) -> None:
        """Record a grant: its estimate leaves every account that pays for it."""
        accounts = self._by_project.get(task.project)
        if accounts is None:
            return
        need = gpu_hours(task, option)
        for account in self.verdict(task, option).paying:
            self._remaining[account.account_id] -= need
        self._standings.pop(task.project, None)  # the project's hours left changed
        self._limits.pop(task.project, None)
        self.longest_bounds.pop(task.project, None)
        self.refusals.pop(task.project, None)

    def _problem(self, task: QueuedTask, option: CardOption, kind: Coverage,
                 account: QuotaTerms | None) -> tuple[DeferralReason, str]:
        """The deferral reason and sentence for the task's first option (the matcher's choice) the
        quota does not allow."""
        return self._problem_on(task.project, task.gpus, option.card_type, option.runtime_s, kind, account)

    def _problem_on(self, project: str, gpus: int, card_type: str, runtime_s: float, kind: Coverage,
                    account: QuotaTerms | None) -> tuple[DeferralReason, str]:
        """`_problem` of a task of the project asking for `gpus` GPUs, on an option of this card type and runtime."""
        assert account is not None
        if kind is C.NOT_YET_VALID:
            detail = reasons.quota_not_yet_valid(self._name(project, account), account.valid_from - self._now)
            return R.QUOTA_NOT_YET_VALID, detail
        if kind in (C.EXPIRED, C.EXPIRES_FIRST):
            left_s = account.valid_to - self._now
            detail = reasons.quota_expires(self._name(project, account), card_type, runtime_s, left_s, self._margin_s)
            return R.QUOTA_EXPIRES, detail
        return R.QUOTA_EXHAUSTED, reasons.quota_need(card_type, gpus * runtime_s / SECONDS_PER_HOUR) + self._left_text(
            project, account)

    def _name(self, project: str, account: QuotaTerms) -> str:
        """How deferral sentences name the project's account (made once per cycle)."""
        name = self._names.get(account.account_id)
        if name is None:
            name = self._names[account.account_id] = reasons.quota_account_name(
                project, account.card_type, len(self._by_project[project]), account.account_id)
        return name

    def _left_text(self, project: str, account: QuotaTerms) -> str:
        """The account's half of an "exhausted" sentence, with its GPU-hours left now (kept until they change)."""
        left = self._remaining[account.account_id]
        said = self._left_texts.get(account.account_id)
        if said is None or said[0] != left:  # first asked, or charged since
            said = self._left_texts[account.account_id] = (left, reasons.quota_left(self._name(project, account), left))
        return said[1]


class StandingRefusal:
    """A project's quota refusing every card option of a task with some GPUs and card types (matcher order),
    kept until the project's next charge (`QuotaBook.refusals`): what such a refusal reads besides the task's
    runtimes — each card type's two bounds (`QuotaBook._limit`), the first card type's standing, the accounts'
    names and hours left — stands until then. `of` answers a later task of the same GPUs and card types from
    its runtimes alone, with the same float operations as `QuotaBook.usable_indexes` and `failure_under`."""

    __slots__ = ("bounds", "gpus", "card_type", "margin_s", "expiry_gate", "settled", "soonest_left_s",
                 "soonest_name", "need_before", "need_after", "refused_from")

    def __init__(self, bounds: tuple[tuple[float, float], ...], gpus: int, card_type: str, margin_s: float,
                 expiry_gate: bool, refused_from_each: tuple[float, ...] | None = None) -> None:
        self.bounds, self.gpus, self.card_type = bounds, gpus, card_type  # per option: `_limit` of its card type
        self.margin_s, self.expiry_gate = margin_s, expiry_gate
        self.settled: tuple[DeferralReason, str] | None = None  # no account in force: every task is told this
        self.soonest_left_s = 0.0  # seconds until the soonest-ending account in force ends
        self.soonest_name = ""  # how sentences name that account
        # the "exhausted" sentence before and after the task's need (`reasons.quota_exhausted_around`)
        self.need_before = self.need_after = ""
        # per option: a runtime from which on the option is refused (`refused_from`, unless given): most tasks are
        # refused by one comparison per option, in C, instead of the bounds' arithmetic
        self.refused_from = refused_from_each if refused_from_each is not None else tuple(
            [refused_from(left_s, left_gpu_hours, gpus, margin_s) for left_s, left_gpu_hours in bounds])

    def of(self, runtimes: Sequence[float]) -> tuple[DeferralReason, str] | None:
        """The deferral reason and sentence of a task with these runtimes (per option, in matcher order) if the quota
        allows none of its options (what `usable_indexes` would say); None if it allows one."""
        gpus, margin, refused_from = self.gpus, self.margin_s, self.refused_from
        # every runtime at or beyond its option's `refused_from`: one comparison per option, written out for up to
        # three options — `all(map(le, ...))` makes a map and two iterators, ~1,000 instructions more per call
        # (the first plan over kept inputs asks ~20,600 times: −1.7% of its instructions)
        options = len(refused_from)
        if options == 1:
            refused = refused_from[0] <= runtimes[0]
        elif options == 2:
            refused = refused_from[0] <= runtimes[0] and refused_from[1] <= runtimes[1]
        elif options == 3:
            refused = (refused_from[0] <= runtimes[0] and refused_from[1] <= runtimes[1]
                       and refused_from[2] <= runtimes[2])
        else:
            refused = all(map(le, refused_from, runtimes))
        if not refused:  # not refused from its runtimes alone: the bounds decide
            for (left_s, left_gpu_hours), runtime_s in zip(self.bounds, runtimes):
                if not (left_s < runtime_s + margin or left_gpu_hours < gpus * runtime_s / SECONDS_PER_HOUR):
                    return None
        if self.settled is not None:
            return self.settled
        runtime_s = runtimes[0]  # the first option's failure (`failure_under`), in its words (`_problem_on`)
        if self.expiry_gate and self.soonest_left_s < runtime_s + margin:
            return R.QUOTA_EXPIRES, reasons.quota_expires(self.soonest_name, self.card_type, runtime_s,
                                                          self.soonest_left_s, margin)
        return R.QUOTA_EXHAUSTED, f"{self.need_before}{gpus * runtime_s / SECONDS_PER_HOUR:.1f}{self.need_after}"


def refused_from(left_s: float, left_gpu_hours: float, gpus: int, margin_s: float) -> float:
    """A runtime from which on a task of `gpus` GPUs is refused on an option with these bounds (`QuotaBook._limit`):
    every runtime at least as long has `left_s < runtime + margin_s` or `left_gpu_hours < gpus * runtime / 3600`
    — each side rounds monotonically in the runtime (for `gpus` > 0), so once a runtime passes a test, every
    longer one does. The first runtime found to pass near each test's exact crossing (checked with these float
    operations, a few floats up from the crossing); inf where none is found (the caller then asks the bounds)."""
    found, runtime_s = inf, left_s - margin_s
    for _ in range(_STEPS):
        if runtime_s != runtime_s:  # not a number: no crossing
            break
        if left_s < runtime_s + margin_s:
            found = runtime_s
            break
        runtime_s = nextafter(runtime_s, inf)
    if gpus > 0:
        runtime_s = left_gpu_hours * SECONDS_PER_HOUR / gpus
        for _ in range(_STEPS):
            if runtime_s != runtime_s:
                break
            if left_gpu_hours < gpus * runtime_s / SECONDS_PER_HOUR:
                found = min(found, runtime_s)
                break
            runtime_s = nextafter(runtime_s, inf)
    return found


_STEPS = 4  # floats tried from a test's computed crossing up
