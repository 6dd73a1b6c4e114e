"""Table tests of the pre-flight checklist (pure): each check's verdict and reason, in English and in
Chinese, from hand-made facts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.preflight.checklist import (
    WORDS, CheckName, Facts, InputFact, InputNote, QuotaFigures, checklist,
)  # fmt: skip
from shared.cards import MatchResult
from shared.cards.matching import CardEstimate
from shared.config.governance import ApprovalRule
from shared.scheduling.estimate import StartEstimate
from shared.scheduling.quota_balance import Coverage, CoverageVerdict, QuotaTerms
from shared.submission import Problem

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
L40S = CardEstimate("L40S", 3600.0, 12.5, True)
H100 = CardEstimate("H100", 1800.0, 20.0, True)
MATCH = MatchResult(ranked=(L40S, H100), rejected=(), chosen=L40S, smaller=None, reason="cheapest adequate")
ACCOUNT = QuotaTerms("acct-vision", "vision", "L40S", 100.0, NOW.timestamp() - 86400, NOW.timestamp() + 2 * 3600)
STARTS_IN_10_MIN = StartEstimate("t1", 3, NOW.timestamp() + 600, NOW.timestamp() + 4200, "L40S")
GOOD = Facts(template="llm@2", match=MATCH, currency="CNY", quota=CoverageVerdict(Coverage.COVERED, paying=(ACCOUNT,)),
             estimate=STARTS_IN_10_MIN, now=NOW)  # fmt: skip


def by_name(facts: Facts, lang: str = "en") -> dict[CheckName, tuple[bool | None, str]]:
    return {check.name: (check.passed, check.detail) for check in checklist(facts, lang)}  # type: ignore[arg-type]


def test_every_sentence_exists_in_both_languages() -> None:
    assert set(WORDS["en"]) == set(WORDS["zh"])


def test_a_submission_that_passes_every_check_says_so_in_each_language() -> None:
    english, chinese = by_name(GOOD), by_name(GOOD, "zh")
    assert all(passed for passed, _ in english.values()) and all(passed for passed, _ in chinese.values())
    assert english[CheckName.TEMPLATE][1] == "template llm@2 applied"
    assert chinese[CheckName.TEMPLATE][1] == "已套用模板 llm@2"
    assert english[CheckName.CARDS][1] == "L40S (cheapest adequate); all: L40S 1h00m 12.50 CNY, H100 30m 20.00 CNY"
    assert chinese[CheckName.CARDS][1] == "L40S（满足要求中最便宜的）；全部：L40S 1h00m 12.50 CNY、H100 30m 20.00 CNY"
    assert english[CheckName.QUOTA][1] == "covered to its estimated end by acct-vision; acct-vision ends in 2h00m"
    assert chinese[CheckName.QUOTA][1] == "配额足以支撑到预计结束，由 acct-vision 支付；acct-vision 在 2h00m 后到期"
    assert english[CheckName.START][1].startswith("position 3 in the queue; would start in about 10m (2026-12-02T08:10+00:00)")
    assert chinese[CheckName.START][1].startswith("队列中第 3 位；输入就绪且无需审批时，将约 10m 后（2026-12-02T08:10+00:00）在 L40S 上开始")


def test_an_invalid_submission_lists_its_problems_and_checks_nothing_else() -> None:
    facts = Facts(problems=(Problem(field="gpus", value=0, expected="an integer from 1 to 64"),), now=NOW)
    english, chinese = by_name(facts), by_name(facts, "zh")
    assert english[CheckName.VALIDATION] == (False, "1 problem(s): gpus: got 0, expected an integer from 1 to 64")
    assert chinese[CheckName.VALIDATION] == (False, "1 个问题：gpus：收到 0，应为 an integer from 1 to 64（原文）")
    assert english[CheckName.QUOTA] == (None, "not checked: the submission is not valid")
    assert chinese[CheckName.START] == (None, "未检查：提交内容无效")


def test_a_missing_input_fails_and_each_input_carries_its_note() -> None:
    inputs = (InputFact("s3://data/a", True), InputFact("clicks@7", False, InputNote.NOT_SIGNALLED),
              InputFact("s3://data/b", None, "timeout after 10 s"))  # fmt: skip
    facts = Facts(inputs=inputs, match=MATCH, estimate=STARTS_IN_10_MIN, now=NOW)
    assert by_name(facts)[CheckName.INPUTS] == (
        False, "1 of 3 missing (it waits for them): ✓ s3://data/a; ✗ clicks@7 (not signalled ready yet); "
               "? s3://data/b (timeout after 10 s)")  # fmt: skip
    assert by_name(facts, "zh")[CheckName.INPUTS] == (
        False, "3 项中缺少 1 项（任务会等待它们）：✓ s3://data/a；✗ clicks@7 (尚未收到就绪信号)；"
               "? s3://data/b (timeout after 10 s（原文）)")  # fmt: skip


def test_a_quota_that_ends_before_the_task_names_the_account_and_its_figures() -> None:
    verdict = CoverageVerdict(Coverage.EXPIRES_FIRST, account=ACCOUNT, paying=(ACCOUNT,))
    figures = QuotaFigures(left_gpu_hours=40.0, needs_gpu_hours=8.0, task_end_at=NOW.timestamp() + 6 * 3600)
    facts = Facts(match=MATCH, quota=verdict, quota_figures=figures, estimate=STARTS_IN_10_MIN, now=NOW)
    assert by_name(facts)[CheckName.QUOTA] == (
        False, "expires_first: account acct-vision (L40S) has 40.0 GPU-hours left (needs 8.0) and ends in 2h00m; "
               "the task's estimated end is in 6h00m")  # fmt: skip
    assert by_name(facts, "zh")[CheckName.QUOTA] == (
        False, "配额在任务结束前到期：配额账户 acct-vision（L40S）剩余 40.0 GPU 时（需要 8.0），2h00m 后到期；任务预计在 6h00m 后结束")


def test_before_the_dispatcher_has_started_quota_and_start_say_so_not_that_no_card_fits() -> None:
    facts = Facts(match=MATCH, planned=False, now=NOW)
    english, chinese = by_name(facts), by_name(facts, "zh")
    assert english[CheckName.QUOTA] == (None, "not checked: the dispatcher has not started: no fleet, quota or queue to plan with")
    assert english[CheckName.START] == (None, "no estimated start: the dispatcher has not started")
    assert chinese[CheckName.START] == (None, "无法估计开始时间：调度器尚未启动")


def test_approval_names_the_rule_and_the_reviewers_and_a_late_deadline_says_by_how_much() -> None:
    rule = ApprovalRule(name="big-core", gpu_hours_above=20.0)
    facts = Facts(match=MATCH, approval_rules=(rule,), reviewers=("lin", "wang"), deadline=NOW + timedelta(minutes=30),
                  estimate=STARTS_IN_10_MIN, now=NOW)  # fmt: skip
    english, chinese = by_name(facts), by_name(facts, "zh")
    assert english[CheckName.APPROVAL] == (False, "needs approval (rule big-core) from lin, wang, not its submitter; "
                                                  "it holds no GPU and no quota while it waits")  # fmt: skip
    assert chinese[CheckName.APPROVAL] == (False, "需要审批（规则 big-core），审批人：lin、wang，不能是提交者本人；等待期间不占用 GPU 和配额")
    assert english[CheckName.DEADLINE] == (False, "estimated to end 40m after its deadline 2026-12-02T08:30+00:00")
    assert chinese[CheckName.DEADLINE] == (False, "预计在截止时间 2026-12-02T08:30+00:00 之后 40m 才结束")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_estimated_start_carries_the_planners_reason(lang: str) -> None:
    waiting = StartEstimate("t1", 9, None, None, None, "waits for its data")
    facts = Facts(match=MATCH, estimate=waiting, now=NOW)
    passed, detail = by_name(facts, lang)[CheckName.START]
    assert passed is None and "waits for its data" in detail
