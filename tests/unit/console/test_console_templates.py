"""Pages rendered from JSON shaped like their endpoints' answers (pure: the Jinja2 environment alone)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from services.console.pages.templating import Unavailable, environment, labels_for
from services.ledger.match_review import MatchFacts, RankedCard, ReviewGrouping, review_json, review_match, summarize_reviews

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
BASE = {"title": "nav_config", "page": "config", "nav": ("board", "config"), "now": NOW, "alerts": [],
        "switch_href": "/config?lang=zh", "path": "/config", "signed_in": True, "me": None}  # fmt: skip


def version(v: int, reason: str, actor: str = "user:ops") -> dict:
    return {"name": "policy", "version": v, "at": NOW.isoformat(), "actor": actor, "reason": reason, "action": "apply",
            "base_version": v - 1 or None, "rolled_back_to": None, "sha256": "ab" * 32, "s3_key": "policy.yaml",
            "s3_version_id": f"x{v}"}  # fmt: skip


def render(lang: str, **context: object) -> str:
    return environment.get_template("config.html").render(**BASE, **labels_for(lang), **context)  # type: ignore[arg-type]


def test_config_page_shows_who_changed_each_version_why_and_the_diff() -> None:
    history = [version(2, "raise the headroom for the eval burst"), version(1, "seeded", "system:config")]
    diff = {"name": "policy", "diff": "--- v1\n+++ v2\n-headroom: 0.1\n+headroom: 0.2\n"}
    html = render("en", documents=[history[0]], name="policy", history=history, diff=diff, diff_from=1, diff_to=2)
    assert "raise the headroom for the eval burst" in html and "user:ops" in html and "system:config" in html
    assert '<span class="del">-headroom: 0.1</span>' in html and '<span class="add">+headroom: 0.2</span>' in html
    assert 'value="1" selected' in html and 'value="2" selected' in html
    assert "配置" in render("zh", documents=[], name="policy", history=history, diff=None, diff_from=None, diff_to=None)


def test_config_page_says_when_its_endpoints_are_not_there() -> None:
    missing = Unavailable(404, "this console has no GET /v1/config yet")
    html = render("en", documents=missing, name="policy", history=missing, diff=None, diff_from=None, diff_to=None)
    assert html.count("this console has no GET /v1/config yet") == 2 and "Not available yet" in html


def test_approvals_list_waiting_tasks_with_a_reasoned_approve_and_deny_and_show_a_refusal() -> None:
    task = {"id": "T9", "name": "pretrain-400b", "project": "llm", "priority_class": "core", "gpus": 64,
            "waiting_since": NOW.isoformat(), "reason": "not_approved", "sentence": "此任务规模较大（64 张 GPU），需要审批人批准后才能启动",
            "reason_detail": "64 GPUs need a reviewer's approval", "original_needed": True}  # fmt: skip
    refused = Unavailable(403, "forbidden: this needs role reviewer (or admin)")
    html = environment.get_template("approvals.html").render(
        **{**BASE, "page": "approvals"}, **labels_for("zh"), waiting=[task], refused=refused, done=None)
    assert "pretrain-400b" in html and "需要审批人批准" in html and "64 GPUs need a reviewer" in html
    assert 'action="/approvals/T9/approve"' in html and 'formaction="/approvals/T9/deny"' in html
    assert "批准" in html and "拒绝" in html and "needs role reviewer" in html


def test_the_match_review_page_and_the_task_pages_review_speak_the_readers_language() -> None:
    idle = MatchFacts(task_id="T1", name="eval-1", project="llm", profile="compute", scenario=None, gpus=1, chosen="H100",
                      ranking=(RankedCard("H100", 3600.0, 6.0), RankedCard("L40S", 7200.0, 4.0)), ran_on="H100",
                      gpu_seconds=Decimal(3600), cost=Decimal("6.00"), output_units=Decimal(10), util_pct=25.0,
                      util_coverage=1.0)  # fmt: skip
    reviewed = review_match(idle)
    speed = [{"card_type": "H100", "profile": "compute", "tasks": 1, "mean_ratio": 1.0, "min_ratio": 1.0, "max_ratio": 1.0}]
    review = {"groups": summarize_reviews([reviewed], ReviewGrouping.CARD), "speed_corrections": speed,
              "tasks": [review_json(reviewed)], "flagged": []}  # fmt: skip
    context = {**BASE, "title": "review_title", "page": "rounds", "by": "card", "groupings": ("card",), "round": None,
               "rounds": []}  # fmt: skip
    zh = environment.get_template("review.html").render(**context, **labels_for("zh"), review=review)
    assert "选大了" in zh and "GPU 平均只有 25% 忙碌" in zh and "换用更便宜的卡很可能就够：L40S" in zh
    assert "<td>计算密集</td>" in zh  # the speed table's profile
    assert "busy on average" not in zh and "oversized" not in zh.replace("v-oversized", "")
    en = environment.get_template("review.html").render(**context, **labels_for("en"), review=review)
    assert "oversized" in en and "its GPUs were 25% busy on average" in en and "<td>compute</td>" in en
    assert labels_for("zh")["L"]["worth_it"] == "值得"  # the table's verdict columns


def test_a_flagged_success_offers_clear_flag_to_reviewers_only_in_both_languages_and_shows_a_refusal() -> None:
    flagged = {"task_id": "T7", "name": "suspicious-eval", "project": "llm", "output_unit": "samples", "lease_id": "L7",
               "flags": ["implausibly_early_success"], "detail": "after 20s of its agent's time", "output_units": 400.0,
               "claimed_output_units": None, "reported_at": NOW.isoformat()}  # fmt: skip
    review = {"groups": [], "speed_corrections": [], "tasks": [], "flagged": [flagged]}
    context = {**BASE, "title": "review_title", "page": "rounds", "by": "card", "groupings": ("card",), "round": None,
               "rounds": [], "review": review, "notice": None, "refused": None}  # fmt: skip

    def page(lang: str, role: str, **extra: object) -> str:
        me = {"name": role, "role": role, "project": None, "actor": f"user:{role}"}
        return environment.get_template("review.html").render(**{**context, "me": me, **extra}, **labels_for(lang))

    for role in ("reviewer", "admin"):
        en = page("en", role)
        assert 'action="/review/T7/clear-flag?by=card"' in en and ">Clear flag</button>" in en and "What you checked" in en
        assert 'name="reason" required' in en
    zh = page("zh", "reviewer", refused=Unavailable(409, "task T7 has no flagged success left to clear"))
    assert ">清除标记</button>" in zh and "核查了什么" in zh and "被标记的成功" in zh and "成功过早（待复核）" in zh
    assert '<span class="tag bad">409</span> <strong class="refusal">当前状态下无法执行</strong>' in zh
    assert '<span lang="en">task T7 has no flagged success left to clear</span>' in zh
    for role in ("submitter", "operator", "auditor"):
        assert "suspicious-eval" in page("en", role) and "clear-flag" not in page("en", role)
    assert "clear-flag" not in environment.get_template("review.html").render(**context, **labels_for("en"))  # signed out
    assert "标记已清除" in page("zh", "reviewer", notice="flag_cleared")
    # the form keeps the grouping and round the reader looks at (a refusal or success returns to them)
    assert 'action="/review/T7/clear-flag?by=project&amp;round=R-3"' in page("en", "reviewer", by="project", round="R-3")


def test_a_refusal_has_a_headline_in_the_readers_language_and_keeps_the_apis_own_words() -> None:
    refused = Unavailable(409, "no flagged success left to clear for task T9")
    page = {**BASE, "page": "approvals"}
    zh = environment.get_template("approvals.html").render(**page, **labels_for("zh"), waiting=[], refused=refused, done=None)
    en = environment.get_template("approvals.html").render(**page, **labels_for("en"), waiting=[], refused=refused, done=None)
    assert "当前状态下无法执行" in zh and "原文" in zh and "no flagged success left to clear" in zh
    assert "Not possible in the current state" in en and "no flagged success left to clear" in en and "原文" not in en
    odd = Unavailable(418, "I'm a teapot")
    assert "请求被拒绝" in environment.get_template("approvals.html").render(
        **page, **labels_for("zh"), waiting=[], refused=odd, done=None)


def test_every_refusal_headline_exists_in_both_languages() -> None:
    from services.console.labels import REFUSAL_LABELS

    assert set(REFUSAL_LABELS["en"]) == set(REFUSAL_LABELS["zh"])
    assert all(REFUSAL_LABELS["zh"].values()) and all(REFUSAL_LABELS["en"].values())


def test_an_audit_trail_in_chinese_marks_the_english_words_it_keeps_as_original() -> None:
    why = {"runs": [{"run": 1, "resumed_from": None, "node_ids": ["n1"], "card_type": "H100", "gpus": 8, "granted_at": NOW.isoformat(),
                     "ended_at": NOW.isoformat(), "end_reason": "preempted", "end_reason_label": "被抢占",
                     "stopped_by": "service:dispatcher: for task T9 (core)", "checkpoints": 1, "gpu_hours": 1.0, "cost": 3.0}],
           "steps": [{"at": NOW.isoformat(), "type": "lease.revoked", "event_label": "租约被收回", "run": 1,
                      "actor": "service:dispatcher", "reason": "preempted", "reason_label": "被抢占，重新排队",
                      "sentence": "租约 L1 被 service:dispatcher 收回（被抢占）",
                      "original": "lease L1 preempted by service:dispatcher: for task T9 (core)"}]}  # fmt: skip
    zh = environment.get_template("audit_trail.html").render(**labels_for("zh"), why=why)
    assert "租约被收回" in zh and "租约 L1 被 service:dispatcher 收回（被抢占）" in zh and "被抢占 <code>preempted</code>" in zh
    assert zh.count('<span class="tag">原文</span>') == 2  # the step's English sentence and who stopped the run
    en = environment.get_template("audit_trail.html").render(**labels_for("en"), why=why)
    assert "原文" not in en and "租约被收回" not in en
