"""The pre-flight checklist (pure): every check a submission will face, each ✓ or ✗ with its reason.

    checks = checklist(facts)        # facts: what `gather` found out, without submitting anything

In order: the template, validation, each input present, the matched card types (runtime and cost
each), the quota to the estimated end (and past expiry), approval (needed? from whom?), the
deadline, and the estimated start from a plan over the current snapshot. A check that could not be
made (an invalid submission has no card types to match) is `None` with what it waits for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from shared.cards import MatchResult
from shared.config.governance import ApprovalRule
from shared.scheduling.estimate import StartEstimate
from shared.scheduling.quota_balance import Coverage, CoverageVerdict
from shared.scheduling.reasons import format_duration
from shared.submission import Problem


class CheckName(StrEnum):
    TEMPLATE = "template"
    VALIDATION = "validation"
    INPUTS = "inputs"
    CARDS = "cards"
    QUOTA = "quota"
    APPROVAL = "approval"
    DEADLINE = "deadline"
    START = "start"


@dataclass(frozen=True, slots=True)
class Check:
    name: CheckName
    passed: bool | None  # None: not checked (the detail says why)
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"check": self.name.value, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class InputFact:
    input: str  # s3://... or dataset@version
    present: bool | None  # None: could not be checked (the store did not answer)
    detail: str = ""


@dataclass(frozen=True)
class Facts:
    """What `gather` found out about one submission (or a waiting task)."""

    template: str | None = None  # name@version applied
    problems: Sequence[Problem] = ()  # template + validation problems (empty: valid)
    inputs: Sequence[InputFact] = ()
    match: MatchResult | None = None
    unmatchable: str = ""  # why no card type fits (when match is None)
    currency: str = ""
    quota: CoverageVerdict | None = None  # on the card type it would run on
    quota_note: str = ""
    approval_rules: Sequence[ApprovalRule] = ()
    reviewers: Sequence[str] = ()
    approved_by: str | None = None
    deadline: datetime | None = None
    estimate: StartEstimate | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


NOT_VALID = "not checked: the submission is not valid"


def checklist(facts: Facts) -> list[Check]:
    """Every check, in the order a submission meets them."""
    valid = not facts.problems
    return [
        _template(facts), _validation(facts), _inputs(facts, valid), _cards(facts, valid), _quota(facts, valid),
        _approval(facts, valid), _deadline(facts, valid), _start(facts, valid),
    ]


def _template(facts: Facts) -> Check:
    bad = [p for p in facts.problems if p.field == "template"]
    if bad:
        return Check(CheckName.TEMPLATE, False, "; ".join(f"{p.value}: expected {p.expected}" for p in bad))
    return Check(CheckName.TEMPLATE, True, f"template {facts.template} applied" if facts.template else "no template")


def _validation(facts: Facts) -> Check:
    if not facts.problems:
        return Check(CheckName.VALIDATION, True, "valid (schema v1 and the site's limits)")
    listed = "; ".join(f"{p.field}: got {p.value!r}, expected {p.expected}" for p in facts.problems[:10])
    more = f" (+{len(facts.problems) - 10} more)" if len(facts.problems) > 10 else ""
    return Check(CheckName.VALIDATION, False, f"{len(facts.problems)} problem(s): {listed}{more}")


def _inputs(facts: Facts, valid: bool) -> Check:
    if not valid:
        return Check(CheckName.INPUTS, None, NOT_VALID)
    if not facts.inputs:
        return Check(CheckName.INPUTS, True, "no inputs")
    missing = [i for i in facts.inputs if i.present is False]
    unknown = [i for i in facts.inputs if i.present is None]
    each = "; ".join(f"{'✓' if i.present else '✗' if i.present is False else '?'} {i.input}"
                     f"{' (' + i.detail + ')' if i.detail else ''}" for i in facts.inputs)
    if missing:
        return Check(CheckName.INPUTS, False, f"{len(missing)} of {len(facts.inputs)} missing (it waits for them): {each}")
    if unknown:
        return Check(CheckName.INPUTS, None, f"{len(unknown)} could not be checked: {each}")
    return Check(CheckName.INPUTS, True, f"all {len(facts.inputs)} present: {each}")


def _cards(facts: Facts, valid: bool) -> Check:
    if not valid:
        return Check(CheckName.CARDS, None, NOT_VALID)
    if facts.match is None or facts.match.chosen is None:
        return Check(CheckName.CARDS, False, f"no card type fits: {facts.unmatchable or 'none in the fleet'}")
    each = ", ".join(f"{e.card_type} {format_duration(e.runtime_s)} {e.cost:,.2f}{facts.currency and ' ' + facts.currency}"
                     for e in facts.match.ranked)
    return Check(CheckName.CARDS, True, f"{facts.match.chosen.card_type} (cheapest adequate); all: {each}")


_QUOTA_WORDS = {
    Coverage.UNLIMITED: "no quota account applies (unlimited)",
    Coverage.COVERED: "covered to its estimated end",
}


def _quota(facts: Facts, valid: bool) -> Check:
    if not valid or facts.quota is None:
        return Check(CheckName.QUOTA, None, NOT_VALID if not valid else "not checked: no card type fits")
    verdict = facts.quota
    if verdict.coverage.allows:
        paying = ", ".join(a.account_id for a in verdict.paying)
        detail = _QUOTA_WORDS[verdict.coverage] + (f" by {paying}" if paying else "")
        return Check(CheckName.QUOTA, True, detail + (f"; {facts.quota_note}" if facts.quota_note else ""))
    return Check(CheckName.QUOTA, False, facts.quota_note or verdict.coverage.value)


def _approval(facts: Facts, valid: bool) -> Check:
    if not valid:
        return Check(CheckName.APPROVAL, None, NOT_VALID)
    if facts.approved_by:
        return Check(CheckName.APPROVAL, True, f"approved by {facts.approved_by}")
    if not facts.approval_rules:
        return Check(CheckName.APPROVAL, True, "no approval needed")
    rules = ", ".join(rule.name for rule in facts.approval_rules)
    who = ", ".join(facts.reviewers) if facts.reviewers else "any reviewer"
    return Check(CheckName.APPROVAL, False, f"needs approval (rule {rules}) from {who}, not its submitter; "
                                            "it holds no GPU and no quota while it waits")


def _deadline(facts: Facts, valid: bool) -> Check:
    if not valid:
        return Check(CheckName.DEADLINE, None, NOT_VALID)
    if facts.deadline is None:
        return Check(CheckName.DEADLINE, True, "no deadline")
    end = facts.estimate.end_at if facts.estimate is not None else None
    if end is None:
        return Check(CheckName.DEADLINE, None, f"deadline {facts.deadline.isoformat(timespec='minutes')}; no estimated end")
    late = end - facts.deadline.timestamp()
    if late > 0:
        return Check(CheckName.DEADLINE, False, f"estimated to end {format_duration(late)} after its deadline "
                                                f"{facts.deadline.isoformat(timespec='minutes')}")
    return Check(CheckName.DEADLINE, True, f"estimated to end {format_duration(-late)} before its deadline")


def _start(facts: Facts, valid: bool) -> Check:
    if not valid:
        return Check(CheckName.START, None, NOT_VALID)
    estimate = facts.estimate
    if estimate is None or estimate.start_at is None:
        why = estimate.why_not if estimate is not None else "no card type fits"
        return Check(CheckName.START, None, f"no estimated start: {why}")
    wait = estimate.start_at - facts.now.timestamp()
    when = "now" if wait < 1 else f"in about {format_duration(wait)}"
    start = datetime.fromtimestamp(estimate.start_at, UTC).isoformat(timespec="minutes")
    return Check(CheckName.START, True, f"position {estimate.position} in the queue; would start {when} ({start}) on "
                                        f"{estimate.card_type}, if its inputs are ready and it needs no approval")
