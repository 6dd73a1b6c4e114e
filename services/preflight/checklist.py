"""The pre-flight checklist (pure): every check a submission will face, each ✓ or ✗ with its reason.

    checks = checklist(facts)              # facts: what `gather` found out, without submitting anything
    checks = checklist(facts, "zh")        # the same checks, each reason in Chinese

In order: the template, validation, each input present, the matched card types (runtime and cost
each), the quota to the estimated end (and past expiry), approval (needed? from whom?), the
deadline, and the estimated start from a plan over the current snapshot. A check that could not be
made (an invalid submission has no card types to match) is `None` with what it waits for. Reasons
are rendered here from structured facts in English or Chinese; the few free English texts other
modules write (a validation problem's expectation, why no card type fits, why no start is
estimated) appear inside the Chinese reason as they are, marked 原文.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from shared.cards import MatchResult
from shared.config.governance import ApprovalRule
from shared.scheduling.estimate import StartEstimate
from shared.scheduling.quota_balance import Coverage, CoverageVerdict
from shared.scheduling.reasons import format_duration
from shared.submission import Problem

CheckLanguage = Literal["en", "zh"]


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


class InputNote(StrEnum):
    """Why an input is not simply present (the English words are the values)."""

    NOT_SIGNALLED = "not signalled ready yet"
    NOT_FOUND = "not found"
    NO_STORE = "no object store configured"
    NOT_CHECKED_YET = "not checked yet"


INPUT_NOTES_ZH = {
    InputNote.NOT_SIGNALLED: "尚未收到就绪信号",
    InputNote.NOT_FOUND: "未找到",
    InputNote.NO_STORE: "未配置对象存储",
    InputNote.NOT_CHECKED_YET: "尚未检查",
}


@dataclass(frozen=True, slots=True)
class InputFact:
    input: str  # s3://... or dataset@version
    present: bool | None  # None: could not be checked (the store did not answer)
    detail: str = ""  # an InputNote, or the store's error


@dataclass(frozen=True, slots=True)
class QuotaFigures:
    """The numbers behind a quota verdict, for its reason: GPU-hours left on the account to blame (None
    when none is), GPU-hours the task needs, and when the task is estimated to end (epoch seconds)."""

    left_gpu_hours: float | None
    needs_gpu_hours: float
    task_end_at: float


@dataclass(frozen=True)
class Facts:
    """What `gather` found out about one submission (or a waiting task)."""

    template: str | None = None  # name@version applied
    problems: Sequence[Problem] = ()  # template + validation problems (empty: valid)
    inputs: Sequence[InputFact] = ()
    match: MatchResult | None = None
    unmatchable: str = ""  # why no card type fits (when match is None)
    currency: str = ""
    planned: bool = True  # False: the dispatcher has not started, so nothing could be planned
    quota: CoverageVerdict | None = None  # on the card type it would run on
    quota_figures: QuotaFigures | None = None
    approval_rules: Sequence[ApprovalRule] = ()
    reviewers: Sequence[str] = ()
    approved_by: str | None = None
    deadline: datetime | None = None
    estimate: StartEstimate | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


WORDS: dict[CheckLanguage, dict[str, str]] = {
    "en": {
        "not_valid": "not checked: the submission is not valid",
        "template_problem": "{value}: expected {expected}",
        "template_applied": "template {template} applied", "no_template": "no template",
        "valid": "valid (schema v1 and the site's limits)",
        "problems": "{count} problem(s): {listed}{more}", "problem": "{field}: got {value!r}, expected {expected}",
        "more": " (+{count} more)", "sep": "; ", "list_sep": ", ",
        "no_inputs": "no inputs", "inputs_missing": "{missing} of {total} missing (it waits for them): {each}",
        "inputs_unknown": "{unknown} could not be checked: {each}", "inputs_present": "all {total} present: {each}",
        "no_card": "no card type fits: {why}", "no_card_in_fleet": "none in the fleet",
        "cards": "{chosen} (cheapest adequate); all: {each}",
        "no_dispatcher": "not checked: the dispatcher has not started: no fleet, quota or queue to plan with",
        "quota_no_card": "not checked: no card type fits",
        "unlimited": "no quota account applies (unlimited)", "covered": "covered to its estimated end",
        "by": " by {paying}", "ends_in": "{account} ends in {left}",
        "quota_blocked": "{coverage}: account {account} ({card}) has {left:.1f} GPU-hours left (needs {needs:.1f}) and "
                         "ends in {ends}; the task's estimated end is in {end}",
        "any_card": "any card type",
        "approved": "approved by {who}", "no_approval": "no approval needed", "any_reviewer": "any reviewer",
        "needs_approval": "needs approval (rule {rules}) from {who}, not its submitter; it holds no GPU and no quota while it waits",
        "no_deadline": "no deadline", "deadline_no_end": "deadline {deadline}; no estimated end",
        "late": "estimated to end {by} after its deadline {deadline}", "in_time": "estimated to end {by} before its deadline",
        "no_start": "no estimated start: {why}", "original": "", "no_card_fits": "no card type fits",
        "not_planned": "the dispatcher has not started", "now": "now", "in_about": "in about {wait}",
        "start": "position {position} in the queue; would start {when} ({start}) on {card}, if its inputs are ready "
                 "and it needs no approval",
    },
    "zh": {
        "not_valid": "未检查：提交内容无效",
        "template_problem": "{value}：应为 {expected}（原文）",
        "template_applied": "已套用模板 {template}", "no_template": "未使用模板",
        "valid": "有效（符合 v1 格式和本站限制）",
        "problems": "{count} 个问题：{listed}{more}", "problem": "{field}：收到 {value!r}，应为 {expected}（原文）",
        "more": "（另有 {count} 个）", "sep": "；", "list_sep": "、",
        "no_inputs": "无输入数据", "inputs_missing": "{total} 项中缺少 {missing} 项（任务会等待它们）：{each}",
        "inputs_unknown": "{unknown} 项无法检查：{each}", "inputs_present": "全部 {total} 项已就绪：{each}",
        "no_card": "没有合适的卡型：{why}", "no_card_in_fleet": "集群中没有",
        "cards": "{chosen}（满足要求中最便宜的）；全部：{each}",
        "no_dispatcher": "未检查：调度器尚未启动，没有可用于规划的集群、配额或队列",
        "quota_no_card": "未检查：没有合适的卡型",
        "unlimited": "没有适用的配额账户（不限额）", "covered": "配额足以支撑到预计结束",
        "by": "，由 {paying} 支付", "ends_in": "{account} 在 {left} 后到期",
        "quota_blocked": "{coverage}：配额账户 {account}（{card}）剩余 {left:.1f} GPU 时（需要 {needs:.1f}），"
                         "{ends} 后到期；任务预计在 {end} 后结束",
        "any_card": "任意卡型",
        "approved": "已由 {who} 审批", "no_approval": "无需审批", "any_reviewer": "任一审批人",
        "needs_approval": "需要审批（规则 {rules}），审批人：{who}，不能是提交者本人；等待期间不占用 GPU 和配额",
        "no_deadline": "无截止时间", "deadline_no_end": "截止时间 {deadline}；无法估计结束时间",
        "late": "预计在截止时间 {deadline} 之后 {by} 才结束", "in_time": "预计在截止时间前 {by} 结束",
        "no_start": "无法估计开始时间：{why}", "original": "（原文）", "no_card_fits": "没有合适的卡型",
        "not_planned": "调度器尚未启动", "now": "立即", "in_about": "约 {wait} 后",
        "start": "队列中第 {position} 位；输入就绪且无需审批时，将{when}（{start}）在 {card} 上开始",
    },
}
"""Every reason's words, by language: one table, so a sentence cannot exist in one language only (a unit test)."""

COVERAGE_ZH = {
    Coverage.NOT_YET_VALID: "配额尚未生效", Coverage.EXPIRED: "配额已过期",
    Coverage.EXPIRES_FIRST: "配额在任务结束前到期", Coverage.EXHAUSTED: "配额不足",
}


def checklist(facts: Facts, lang: CheckLanguage = "en") -> list[Check]:
    """Every check, in the order a submission meets them, each reason in `lang`."""
    valid, words = not facts.problems, WORDS[lang]
    return [
        _template(facts, words), _validation(facts, words), _inputs(facts, valid, words, lang),
        _cards(facts, valid, words), _quota(facts, valid, words, lang), _approval(facts, valid, words),
        _deadline(facts, valid, words), _start(facts, valid, words),
    ]


def _template(facts: Facts, words: dict[str, str]) -> Check:
    bad = [p for p in facts.problems if p.field == "template"]
    if bad:
        each = [words["template_problem"].format(value=p.value, expected=p.expected) for p in bad]
        return Check(CheckName.TEMPLATE, False, words["sep"].join(each))
    applied = words["template_applied"].format(template=facts.template) if facts.template else words["no_template"]
    return Check(CheckName.TEMPLATE, True, applied)


def _validation(facts: Facts, words: dict[str, str]) -> Check:
    if not facts.problems:
        return Check(CheckName.VALIDATION, True, words["valid"])
    listed = words["sep"].join(words["problem"].format(field=p.field, value=p.value, expected=p.expected)
                               for p in facts.problems[:10])  # fmt: skip
    more = words["more"].format(count=len(facts.problems) - 10) if len(facts.problems) > 10 else ""
    return Check(CheckName.VALIDATION, False, words["problems"].format(count=len(facts.problems), listed=listed, more=more))


def _inputs(facts: Facts, valid: bool, words: dict[str, str], lang: CheckLanguage) -> Check:
    if not valid:
        return Check(CheckName.INPUTS, None, words["not_valid"])
    if not facts.inputs:
        return Check(CheckName.INPUTS, True, words["no_inputs"])
    missing = [i for i in facts.inputs if i.present is False]
    unknown = [i for i in facts.inputs if i.present is None]
    each = words["sep"].join(_input_line(i, lang) for i in facts.inputs)
    total = len(facts.inputs)
    if missing:
        return Check(CheckName.INPUTS, False, words["inputs_missing"].format(missing=len(missing), total=total, each=each))
    if unknown:
        return Check(CheckName.INPUTS, None, words["inputs_unknown"].format(unknown=len(unknown), each=each))
    return Check(CheckName.INPUTS, True, words["inputs_present"].format(total=total, each=each))


def _input_line(fact: InputFact, lang: CheckLanguage) -> str:
    mark = "✓" if fact.present else "✗" if fact.present is False else "?"
    note = fact.detail
    if note and lang == "zh":
        note = INPUT_NOTES_ZH.get(note) or f"{note}（原文）"  # a StrEnum key matches its plain value
    return f"{mark} {fact.input}" + (f" ({note})" if note else "")


def _cards(facts: Facts, valid: bool, words: dict[str, str]) -> Check:
    if not valid:
        return Check(CheckName.CARDS, None, words["not_valid"])
    if facts.match is None or facts.match.chosen is None:
        return Check(CheckName.CARDS, False, words["no_card"].format(why=facts.unmatchable or words["no_card_in_fleet"]))
    each = words["list_sep"].join(f"{e.card_type} {format_duration(e.runtime_s)} {e.cost:,.2f}"
                                  f"{facts.currency and ' ' + facts.currency}" for e in facts.match.ranked)  # fmt: skip
    return Check(CheckName.CARDS, True, words["cards"].format(chosen=facts.match.chosen.card_type, each=each))


def _quota(facts: Facts, valid: bool, words: dict[str, str], lang: CheckLanguage) -> Check:
    if not valid:
        return Check(CheckName.QUOTA, None, words["not_valid"])
    if not facts.planned:
        return Check(CheckName.QUOTA, None, words["no_dispatcher"])
    if facts.quota is None:
        return Check(CheckName.QUOTA, None, words["quota_no_card"])
    verdict, now = facts.quota, facts.now.timestamp()
    if verdict.coverage.allows:
        paying = words["list_sep"].join(a.account_id for a in verdict.paying)
        detail = words[verdict.coverage.value] + (words["by"].format(paying=paying) if paying else "")
        ends = words["sep"].join(words["ends_in"].format(account=a.account_id, left=format_duration(a.valid_to - now))
                                 for a in verdict.paying)  # fmt: skip
        return Check(CheckName.QUOTA, True, detail + (words["sep"] + ends if ends else ""))
    figures, account = facts.quota_figures, verdict.account
    coverage = COVERAGE_ZH.get(verdict.coverage, verdict.coverage.value) if lang == "zh" else verdict.coverage.value
    if figures is None or account is None or figures.left_gpu_hours is None:
        return Check(CheckName.QUOTA, False, coverage)
    return Check(CheckName.QUOTA, False, words["quota_blocked"].format(
        coverage=coverage, account=account.account_id, card=account.card_type or words["any_card"],
        left=max(0.0, figures.left_gpu_hours), needs=figures.needs_gpu_hours, ends=format_duration(account.valid_to - now),
        end=format_duration(figures.task_end_at - now)))  # fmt: skip


def _approval(facts: Facts, valid: bool, words: dict[str, str]) -> Check:
    if not valid:
        return Check(CheckName.APPROVAL, None, words["not_valid"])
    if facts.approved_by:
        return Check(CheckName.APPROVAL, True, words["approved"].format(who=facts.approved_by))
    if not facts.approval_rules:
        return Check(CheckName.APPROVAL, True, words["no_approval"])
    rules = words["list_sep"].join(rule.name for rule in facts.approval_rules)
    who = words["list_sep"].join(facts.reviewers) if facts.reviewers else words["any_reviewer"]
    return Check(CheckName.APPROVAL, False, words["needs_approval"].format(rules=rules, who=who))


def _deadline(facts: Facts, valid: bool, words: dict[str, str]) -> Check:
    if not valid:
        return Check(CheckName.DEADLINE, None, words["not_valid"])
    if facts.deadline is None:
        return Check(CheckName.DEADLINE, True, words["no_deadline"])
    deadline = facts.deadline.isoformat(timespec="minutes")
    end = facts.estimate.end_at if facts.estimate is not None else None
    if end is None:
        return Check(CheckName.DEADLINE, None, words["deadline_no_end"].format(deadline=deadline))
    late = end - facts.deadline.timestamp()
    if late > 0:
        return Check(CheckName.DEADLINE, False, words["late"].format(by=format_duration(late), deadline=deadline))
    return Check(CheckName.DEADLINE, True, words["in_time"].format(by=format_duration(-late)))


def _start(facts: Facts, valid: bool, words: dict[str, str]) -> Check:
    if not valid:
        return Check(CheckName.START, None, words["not_valid"])
    estimate = facts.estimate
    if estimate is None or estimate.start_at is None:
        if estimate is not None:
            why = estimate.why_not + words["original"]
        else:
            why = words["no_card_fits"] if facts.planned else words["not_planned"]
        return Check(CheckName.START, None, words["no_start"].format(why=why))
    wait = estimate.start_at - facts.now.timestamp()
    when = words["now"] if wait < 1 else words["in_about"].format(wait=format_duration(wait))
    start = datetime.fromtimestamp(estimate.start_at, UTC).isoformat(timespec="minutes")
    return Check(CheckName.START, True, words["start"].format(position=estimate.position, when=when, start=start,
                                                               card=estimate.card_type))  # fmt: skip
