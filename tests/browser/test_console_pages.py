"""The web console in a real browser, against a running system with real data (`console_world`).

Set CARDFLOW_CONSOLE_SCREENSHOTS=DIR to save a full-page PNG of every page in both languages
(docs/img/ holds the ones docs/console.md shows).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.browser.conftest import sign_in
from tests.helpers.console_world import MISSING_PREFIX, ConsoleWorld

WIDTH = 1280
SCREENSHOTS = os.environ.get("CARDFLOW_CONSOLE_SCREENSHOTS")


def pages_of(world: ConsoleWorld) -> dict[str, str]:
    return {
        "board": "/board", "board-history": "/board/history?days=7", "queue": "/queue", "fleet": "/fleet",
        "quotas": "/quotas", "ledger": "/ledger", "tasks": "/tasks", "task": f"/tasks/{world.task_id('dedup-corpus')}",
        "task-done": f"/tasks/{world.task_id('eval-1')}", "snapshots": "/board/snapshots", "config": "/config",
        "approvals": "/approvals", "rounds": "/rounds", "review": "/review?by=project", "audit": "/audit",
    }  # fmt: skip


async def fits_the_width(page: Page) -> None:
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"{page.url} is {width} px wide at a {WIDTH} px window"


def test_a_cjk_font_is_installed() -> None:
    """Without one, Chromium draws the Chinese labels as boxes (`make browser` installs fonts-noto-cjk)."""
    fonts = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True, check=True).stdout
    assert fonts.strip(), "no font covers Chinese: apt-get install fonts-noto-cjk"


@pytest.mark.parametrize("lang", ["en", "zh"])
async def test_every_page_loads_fits_1280_px_and_speaks_the_language(world: ConsoleWorld, page: Page, lang: str) -> None:
    for name, path in pages_of(world).items():
        response = await page.goto(world.base_url + path + ("&" if "?" in path else "?") + f"lang={lang}")
        assert response is not None and response.status == 200, f"{path}: {response and response.status}"
        await expect(page.locator("h1")).to_be_visible()
        await fits_the_width(page)
        html_lang = await page.get_attribute("html", "lang")
        assert html_lang == ("zh-CN" if lang == "zh" else "en"), path
        nav = page.get_by_role("navigation")
        await expect(nav).to_contain_text("数据就绪看板" if lang == "zh" else "Readiness board")
        await save_screenshot(page, f"console-{name}-{lang}")


async def save_screenshot(page: Page, name: str) -> None:
    """With CARDFLOW_CONSOLE_SCREENSHOTS set, a full-page PNG of what the page shows now."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=f"{SCREENSHOTS}/{name}.png", full_page=True)


async def test_board_groups_tasks_by_what_they_wait_for(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/board?lang=en")
    data = page.locator("#group-data")
    await expect(data.get_by_role("link", name="dedup-corpus")).to_be_visible()
    await expect(data).to_contain_text(MISSING_PREFIX)
    await expect(page.locator("#group-quota")).to_contain_text("asr-train")
    await expect(page.locator("#group-quota")).to_contain_text("quota_exhausted")
    await expect(page.locator("#group-quota")).to_contain_text("vision-embed")
    await expect(page.locator("#group-no_card")).to_contain_text("giant-moe")
    await expect(page.locator("#group-running")).to_contain_text("pretrain-70b")
    for group in ("data", "quota", "running", "no_card"):  # each count says how many rows its table has
        rows = await page.locator(f"#group-{group} tbody tr").count()
        await expect(page.locator(f"#group-{group} h2 .count")).to_have_text(str(rows))

    await page.get_by_role("link", name="中文").click()
    await expect(page.locator("h1")).to_contain_text("数据就绪看板")
    await expect(page.locator("#group-data")).to_contain_text(f"等待 1 个输入（已就绪 0%）：{MISSING_PREFIX}")
    await expect(page.locator("#group-quota")).to_contain_text("项目 speech 的配额不足以支付此任务的预估用量")
    await page.get_by_role("link", name="队列").click()  # the language is remembered across pages
    await expect(page.locator("h1")).to_contain_text("队列")


async def test_last_days_board_shows_how_long_tasks_waited_for_their_data(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/board/history?days=7")
    row = page.locator("tr", has=page.locator("code", has_text="wiki@3"))
    await expect(row).to_contain_text("research")
    waited = await row.locator("td").nth(4).inner_text()  # the longest wait: the dataset came ~3 s late
    assert re.fullmatch(r"\d+ s", waited) and int(waited.split()[0]) >= 2, waited
    await expect(page.locator("tr", has=page.locator("code", has_text=MISSING_PREFIX))).to_contain_text("research")


async def test_click_through_a_task_story(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/tasks?state=succeeded")
    await page.get_by_role("link", name="eval-1", exact=True).click()
    await expect(page).to_have_url(re.compile(f"/tasks/{world.task_id('eval-1')}$"))
    story = page.locator("ol.story")
    for event in ("task.submitted", "task.readiness_changed", "task.matched", "lease.granted", "task.started", "task.succeeded"):
        await expect(story).to_contain_text(event)
    chosen = page.locator("section.match tr.chosen")
    await expect(chosen).to_contain_text("L40S")
    await expect(page.locator("section.match tbody tr")).not_to_have_count(1)  # the alternatives are listed too
    await page.goto(world.base_url + f"/tasks/{world.task_id('eval-1')}?lang=zh")  # the matcher's reasons in Chinese
    await expect(page.locator("section.match p").first).to_contain_text("L40S 是满足要求的最便宜卡型")
    await expect(page.locator("section.match tbody")).to_contain_text("集群中没有该卡型")
    await page.goto(world.base_url + f"/tasks/{world.task_id('eval-1')}?lang=en")
    await expect(page.get_by_role("heading", name="Cancel this task")).to_have_count(0)  # finished: nothing to cancel

    await page.goto(world.base_url + "/board")
    await page.locator("#group-quota").get_by_role("link", name="asr-train").click()
    await expect(page.locator("section.why")).to_contain_text("quota_exhausted")
    await expect(page.locator(".checks .check.bad")).to_have_text(re.compile("quota"))


async def test_a_tasks_story_in_chinese_names_every_event_and_says_why_in_chinese(world: ConsoleWorld, page: Page) -> None:
    held = f"/tasks/{world.task_id('asr-train')}?lang=zh"  # matched, then held by the speech quota
    await page.goto(world.base_url + held)
    story = page.locator("ol.story")
    for said in ("已提交", "已匹配卡型", "暂缓", "配额不足", "项目 speech 的配额不足以支付此任务的预估用量"):
        await expect(story).to_contain_text(said)
    await expect(story.locator(".original .tag").first).to_have_text("原文")  # the dispatcher's numbers, in its English
    await expect(page.locator("section.match p").first).to_contain_text("是满足要求的最便宜卡型")
    await page.goto(world.base_url + f"/tasks/{world.task_id('eval-1')}?lang=zh")  # matched, leased, ran, succeeded
    for said in ("已分配 GPU（租约）", "开始运行", "运行成功", "已分配节点"):
        await expect(page.locator("ol.story")).to_contain_text(said)
    await page.goto(world.base_url + f"/tasks/{world.task_id('eval-1')}?lang=en")  # English: as it was
    await expect(page.locator("ol.story")).not_to_contain_text("已分配")
    await expect(page.locator("ol.story")).to_contain_text("lease.granted")


async def test_an_auditors_trail_in_chinese_tells_each_step_from_the_archive(world: ConsoleWorld, anonymous_page: Page) -> None:
    await sign_in(anonymous_page, world, "auditor")
    await anonymous_page.goto(world.base_url + f"/tasks/{world.task_id('asr-train')}?lang=zh")
    trail = anonymous_page.locator("ol.story.audit")
    # the matcher's numbers (.first: a node lost and back on a loaded machine re-matches open tasks, told again)
    await expect(trail.locator("li", has_text="task.matched").first).to_contain_text("是满足要求的最便宜卡型")
    await expect(trail.locator("li", has_text="task.held").first).to_contain_text("暂缓：配额不足（quota_exhausted）")
    await expect(trail.locator("li", has_text="task.held").first.locator(".original")).to_contain_text("原文")
    await anonymous_page.goto(world.base_url + f"/tasks/{world.task_id('eval-1')}?lang=zh")
    await expect(anonymous_page.locator("ol.story.audit")).to_contain_text("第 1 次运行：已分配节点")
    await save_screenshot(anonymous_page, "console-audit-trail-zh")


async def test_cancel_a_waiting_task_from_its_page_with_a_reason(world: ConsoleWorld, page: Page) -> None:
    task_id = world.task_id("dedup-corpus")
    await page.goto(world.base_url + f"/tasks/{task_id}")
    cancel = page.locator("section", has=page.get_by_role("heading", name="Cancel this task"))
    await cancel.get_by_label("Reason").fill("the corpus of November is not coming")
    await cancel.get_by_label("Reason").press("Enter")  # the form is keyboard-operable
    await expect(page.locator(".notice")).to_have_text("Cancel requested.")
    await world.system.wait_for(lambda s: s.task_by_name("dedup-corpus").state.value == "cancelled",
                                what="dedup-corpus cancelled")  # fmt: skip

    async def shows_cancelled() -> bool:  # the console's views follow the event log a moment later
        await page.reload()
        return await page.locator("h1 .state").inner_text() == "cancelled"

    await world.system.wait_for(lambda s: shows_cancelled(), timeout=30, what="the task page showing cancelled")
    await expect(page.locator("ol.story")).to_contain_text("task.cancel_requested")
    await expect(page.locator("ol.story")).to_contain_text("the corpus of November is not coming")


async def test_fleet_grid_shows_classes_and_idle_gpus_with_words(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/fleet")
    h100 = page.locator("tr", has=page.get_by_role("rowheader", name="h100-a"))
    await expect(h100.locator("li.gpu")).to_have_count(8)
    await expect(h100.locator("li.g-core .word")).to_have_count(8)
    await expect(h100.locator("li.g-core .word").first).to_have_text("core")
    l40s = page.locator("tr", has=page.get_by_role("rowheader", name="l40s-a"))
    await expect(l40s.locator("li.g-opportunistic")).to_have_count(4)
    await expect(l40s.locator("li.g-idle .word").first).to_have_text("idle")
    await expect(page.locator("figure.plot svg")).to_have_count(1)
    await h100.locator("li.g-core a").first.click()
    await expect(page.locator("h1")).to_contain_text("pretrain-70b")


async def test_quota_expiring_within_15_days_is_shown_and_bannered_on_every_page(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/quotas")
    vision = page.locator("tr#vision-2026q4")
    await expect(vision).to_contain_text("expiring soon")
    await expect(page.locator("tr#llm-2026q4")).not_to_contain_text("expiring soon")
    await expect(page.locator("figure.plot svg")).to_have_count(1)  # the burn-down
    for path in ("/board", "/ledger", "/fleet"):
        await page.goto(world.base_url + path)
        await expect(page.get_by_role("alert")).to_contain_text("vision-2026q4")


async def test_the_banner_speaks_chinese_and_names_held_tasks(world: ConsoleWorld, page: Page) -> None:
    """A task held by its quota raises an alert; in Chinese it is rendered from the archived event."""
    banner = page.get_by_role("alert")

    async def says_it_in_chinese() -> bool:
        await page.goto(world.base_url + "/board?lang=zh")
        return "已暂缓：配额" in await banner.inner_text()

    await world.system.wait_for(lambda s: says_it_in_chinese(), timeout=60, what="a Chinese quota-hold alert")
    held = banner.locator("li", has_text="已暂缓：配额").first
    await expect(held.locator(".tag")).to_have_text("因配额暂停")
    await expect(held.get_by_role("link")).not_to_have_text(re.compile(r"^[0-9A-Z]{26}$"))  # a name, not an id


async def test_ledger_shows_spend_against_output_with_a_plot(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/ledger?days=7")
    await expect(page.locator("h2").first).to_contain_text("Last 7 days")
    period = page.locator("table").first
    await expect(period).to_contain_text("llm")
    await expect(period).to_contain_text("research")
    await expect(page.locator("figure.plot svg")).to_have_count(1)


async def test_keyboard_reaches_the_content_and_every_nav_link(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/board")
    await page.keyboard.press("Tab")
    await expect(page.locator("a.skip")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(re.compile("#main$"))
    await page.goto(world.base_url + "/board")
    for _ in range(3):  # skip link, brand, then the first nav link
        await page.keyboard.press("Tab")
    await expect(page.get_by_role("link", name="Readiness board")).to_be_focused()
    await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(re.compile("/queue$"))


async def test_sign_in_with_a_token_and_out_again(world: ConsoleWorld, anonymous_page: Page) -> None:
    page = anonymous_page
    await page.goto(world.base_url + "/login?back=/fleet")
    await page.get_by_label("API token").fill("not-a-token")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert").filter(has_text="401")).to_contain_text("not valid")
    await page.get_by_label("API token").fill(world.tokens["reviewer"])
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(re.compile("/fleet$"))
    await expect(page.locator(".who")).to_contain_text("reviewer (reviewer)")
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    await sign_in(page, world, "speech-dev")
    await expect(page.locator(".who")).to_contain_text("speech-dev (submitter, speech)")


async def test_who_changed_the_policy_and_what_changed(world: ConsoleWorld, page: Page) -> None:
    planner = {"authorization": f"Bearer {world.tokens['planner']}"}
    async with httpx.AsyncClient(base_url=world.base_url, headers=planner) as client:
        changed = await client.post("/v1/config/set", json={
            "name": "policy", "assignments": ["headroom.default=0.2"], "reason": "more room for the eval burst"})
        assert changed.status_code == 201, changed.text
        exported = await client.post("/v1/exports", json={"reason": "the eval burst's task list"})
        assert exported.status_code == 201, exported.text
    version = changed.json()["version"]  # other tests of this module may have changed the policy before
    await page.goto(world.base_url + "/board")
    await page.get_by_role("link", name="Config").click()
    newest = page.locator("table").nth(1).locator("tbody tr").first
    await expect(newest).to_contain_text("user:planner")
    await expect(newest).to_contain_text("more room for the eval burst")
    await expect(newest).to_contain_text(changed.json()["s3_version_id"])  # where it is in the bucket
    exports = page.locator("h2#exports").locator("xpath=following-sibling::table[1]")
    newest_export = exports.locator("tbody tr").first
    await expect(newest_export).to_contain_text("manual")
    await expect(newest_export).to_contain_text("user:planner")
    await expect(newest_export).to_contain_text("the eval burst's task list")
    await expect(newest_export).to_contain_text(exported.json()["objects"][0]["version_id"])
    await expect(page.locator("table").nth(1)).to_contain_text("seeded at first start")
    await page.get_by_label("from").select_option(str(version - 1))
    await page.get_by_label("to").select_option(str(version))
    await page.get_by_role("button", name="Compare").click()
    await expect(page.locator(".diff .add", has_text="default: 0.2")).to_have_count(1)
    await fits_the_width(page)


async def test_a_planner_closes_a_round_with_a_note_and_amends_it(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/rounds")
    await page.get_by_label("Retrospective note (one line)").fill("L40S evals were worth it; H100 idle too long")
    await page.get_by_label("Reason for the record").fill("end of the browser-test week")
    await page.get_by_role("button", name="Close round").click()
    await expect(page).to_have_url(re.compile(r"/rounds/R\d+\?notice=round_closed$"))
    await expect(page.locator(".why .big")).to_have_text("L40S evals were worth it; H100 idle too long")
    by_card = page.locator("h2", has_text="By card type").locator("xpath=following-sibling::table[1]")
    await expect(by_card).to_contain_text("L40S")
    await page.get_by_label("Reason for the record").fill("the H100s were reserved, not idle")
    await page.get_by_label("Retrospective note (one line)").fill("L40S evals were worth it; H100 reserved for pretraining")
    await page.get_by_role("button", name="Save new version").click()
    await expect(page.locator(".notice")).to_be_visible()
    notes = page.locator("ol.story li")
    await expect(notes).to_have_count(2)
    await expect(notes.first).to_contain_text("v2")
    await expect(notes.first).to_contain_text("the H100s were reserved, not idle")
    await expect(notes.first).to_contain_text("user:planner")
    await fits_the_width(page)
    await page.goto(world.base_url + "/rounds")
    await expect(page.locator("table").first).to_contain_text("H100 reserved for pretraining")
    await save_screenshot(page, "console-rounds-en")  # the list with a closed round (the one docs/console.md shows)


async def test_a_submitter_may_not_close_a_round(world: ConsoleWorld, anonymous_page: Page) -> None:
    await sign_in(anonymous_page, world, "speech-dev")
    await anonymous_page.goto(world.base_url + "/rounds")
    await anonymous_page.get_by_label("Retrospective note (one line)").fill("should not close")
    await anonymous_page.get_by_label("Reason for the record").fill("testing the role check")
    await anonymous_page.get_by_role("button", name="Close round").click()
    await expect(anonymous_page.locator(".refused")).to_contain_text("403")
    await expect(anonymous_page.locator(".refused")).to_contain_text("operator")


async def test_the_match_review_gives_a_verdict_per_finished_task(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/review?by=card")
    groups = page.locator("table").first
    await expect(groups).to_contain_text("L40S")
    reviewed = page.locator("h2", has_text="Reviewed tasks").locator("xpath=following-sibling::table[1]")
    await expect(reviewed.locator(".verdict").first).to_be_visible()
    await expect(reviewed).to_contain_text("eval-1")


async def test_the_match_review_in_chinese_gives_verdicts_and_reasons_in_chinese(world: ConsoleWorld, page: Page) -> None:
    await page.goto(world.base_url + "/review?by=card&lang=zh")
    reviewed = page.locator("h2", has_text="已复核任务").locator("xpath=following-sibling::table[1]")
    row = reviewed.locator("tr", has_text="eval-1")
    await expect(row.locator(".verdict")).to_have_text(re.compile("^(值得|选大了|低估)$"))
    await expect(row.locator("td").last).to_contain_text("上运行")  # the reason, rendered in Chinese from its facts
    await expect(row.locator("td").last).not_to_contain_text("estimate")
    await page.goto(world.base_url + f"/tasks/{world.task_id('eval-1')}?lang=zh")
    verdict = page.locator("h2", has_text="匹配复核").locator("xpath=following-sibling::p[1]")
    await expect(verdict.locator(".verdict")).to_have_text(re.compile("^(值得|选大了|低估)$"))
    await expect(verdict).to_contain_text("上运行")


async def test_an_auditor_reads_a_tasks_audit_trail_and_the_change_log(world: ConsoleWorld, anonymous_page: Page) -> None:
    finished = f"/tasks/{world.task_id('eval-1')}"
    await sign_in(anonymous_page, world, "planner")
    await anonymous_page.goto(world.base_url + finished)
    await expect(anonymous_page.get_by_text("The audit trail needs the auditor role")).to_be_visible()
    await anonymous_page.get_by_role("button", name="Sign out").click()
    await sign_in(anonymous_page, world, "auditor")
    await anonymous_page.goto(world.base_url + finished)
    trail = anonymous_page.locator("h2", has_text="Audit trail").locator("xpath=following-sibling::table[1]")
    await expect(trail).to_contain_text("succeeded")
    await expect(anonymous_page.locator("ol.story.audit li", has_text="task.submitted")).to_have_count(1)
    await anonymous_page.get_by_role("link", name="Change log").click()
    await expect(anonymous_page.locator("table")).to_contain_text("user:root")
    await expect(anonymous_page.locator("table")).to_contain_text("config.changed")


async def test_a_reviewer_approves_on_the_approvals_page_and_a_submitter_is_refused(world: ConsoleWorld,
                                                                                   anonymous_page: Page) -> None:
    planner = {"authorization": f"Bearer {world.tokens['planner']}"}
    async with httpx.AsyncClient(base_url=world.base_url, headers=planner) as client:
        changed = await client.post("/v1/config/set", json={"name": "policy", "assignments": [
            "approvals.rules=[{name: safety-review, projects: [safety]}]", "reviewers.by_project={safety: [reviewer]}"],
            "reason": "red-team work needs a reviewer"})  # fmt: skip
        assert changed.status_code == 201, changed.text
    await world.system.submit([{"name": "red-team-eval", "project": "safety", "priority_class": "standard", "gpus": 1,
                                "estimate_gpu_hours": 1, "profile": "compute", "min_vram_gb": 24}])  # fmt: skip
    held = await world.system.wait_for(lambda s: (v := s.task_by_name("red-team-eval")) is not None
                                       and v.reason == "not_approved" and v, what="red-team-eval held for approval")
    page = anonymous_page
    row = page.locator("tr", has=page.get_by_role("link", name="red-team-eval"))

    async def decide_as(name: str, reason: str) -> None:
        await sign_in(page, world, name)
        await page.goto(world.base_url + "/approvals")
        await world.system.wait_for(lambda s: _listed(page, row), timeout=30, what="the task on the Approvals page")
        await row.get_by_label("Reason").fill(reason)
        await row.get_by_role("button", name="Approve").click()

    await decide_as("speech-dev", "I wrote it, it is fine")
    await expect(page.locator(".refused")).to_contain_text("403")
    await decide_as("reviewer", "scope agreed with the safety lead")
    await expect(page.locator(".notice")).to_have_text("Approved.")
    await world.system.wait_for(lambda s: s.task_by_name("red-team-eval").state.value == "succeeded", timeout=60,
                                what="the approved task to run")  # fmt: skip
    approvals = [e for e in world.system.of_type("task.approved") if e.data.task_id == held.id]
    assert [(e.actor, e.data.note) for e in approvals] == [("user:reviewer", "scope agreed with the safety lead")]
    decided = page.locator("table", has=page.locator("th", has_text="Reviewer")).locator("tr", has=page.get_by_role(
        "link", name="red-team-eval"))  # fmt: skip
    await world.system.wait_for(lambda s: _listed(page, decided), timeout=60, what="the decision on the Approvals page")
    await expect(decided).to_contain_text("user:reviewer")
    await expect(decided).to_contain_text("scope agreed with the safety lead")
    await expect(decided.locator(".tag")).to_have_text("approved")
    assert not [e for e in world.system.of_type("task.reviewed") if e.actor == "user:speech-dev"]


async def _gone(page: Page, row: Any) -> bool:
    """Reload until the ledger has taken a cleared flag off the list (it follows the event log a moment later)."""
    if not await row.count():
        return True
    await page.reload()
    return False


async def _listed(page: Page, row: Any) -> bool:
    """Reload until the views list the task (they follow the event log a moment later)."""
    if await row.count():
        return True
    await page.reload()
    return False


async def test_an_operator_holds_and_releases_a_task_and_drains_a_node_from_the_pages(world: ConsoleWorld, page: Page) -> None:
    task_id = world.task_id("vision-embed")
    await page.goto(world.base_url + f"/tasks/{task_id}")
    await page.get_by_label("Hold — Reason").fill("the vision team asked to wait for the new labels")
    await page.get_by_role("button", name="Hold", exact=True).click()
    await expect(page.locator(".notice")).to_have_text("Hold requested.")
    await world.system.wait_for(lambda s: s.task_by_name("vision-embed").reason == "operator", what="vision-embed held")

    async def offers(verb: str) -> bool:  # the console's views follow the event log a moment later
        await page.reload()
        return await page.locator(f"form.{verb}-form").count() == 1

    await world.system.wait_for(lambda s: offers("release"), timeout=30, what="the task page offering a release")
    await expect(page.locator("ol.story")).to_contain_text("the vision team asked to wait for the new labels")
    await page.get_by_label("Release — Reason").fill("labels are in")
    await page.get_by_role("button", name="Release", exact=True).click()
    await expect(page.locator(".notice")).to_have_text("Release requested.")
    await world.system.wait_for(lambda s: s.of_type("task.released"), what="vision-embed released")
    assert world.system.of_type("task.released")[-1].actor == "user:planner"

    await page.goto(world.base_url + "/fleet")
    l40s = page.locator("tr", has=page.get_by_role("rowheader", name="l40s-a"))
    await l40s.get_by_label("Reason").fill("PCIe errors on GPU 3")
    await l40s.get_by_role("button", name="Drain").click()
    await expect(page.locator(".notice")).to_have_text("Drain requested.")

    async def drained() -> bool:
        await page.reload()
        return await page.locator("tr", has=page.get_by_role("rowheader", name="l40s-a")).locator(".drain-state").count() == 1

    await world.system.wait_for(lambda s: drained(), timeout=30, what="the fleet page showing l40s-a drained")
    l40s = page.locator("tr", has=page.get_by_role("rowheader", name="l40s-a"))
    await expect(l40s).to_contain_text("user:planner: PCIe errors on GPU 3")
    await expect(l40s.locator(".drain-state")).to_have_text("draining")  # embed-long still runs there
    await l40s.get_by_label("Reason").fill("GPU 3 replaced")
    await l40s.get_by_role("button", name="Undrain").click()
    await expect(page.locator(".notice")).to_have_text("Undrain requested.")
    await world.system.wait_for(lambda s: s.of_type("node.undrained"), what="l40s-a undrained")


async def test_a_reviewer_clears_a_flagged_success_on_the_review_page_and_others_get_no_form(world: ConsoleWorld,
                                                                                               anonymous_page: Page) -> None:
    planner = {"authorization": f"Bearer {world.tokens['planner']}"}
    bound = "reports.max_output_units_per_gpu_hour_by_unit={tokens: 1000000000, checked-samples: 0.001}"
    async with httpx.AsyncClient(base_url=world.base_url, headers=planner) as client:
        changed = await client.post("/v1/config/set", json={"name": "policy", "assignments": [bound],
                                                             "reason": "hold back checked-samples output for a look"})
        assert changed.status_code == 201, changed.text
    await world.system.submit([{"name": "suspicious-eval", "project": "llm", "priority_class": "standard", "gpus": 1,
                                "estimate_gpu_hours": 1, "profile": "compute", "min_vram_gb": 24,
                                "output_unit": "checked-samples"}])  # fmt: skip
    flagged = await world.system.wait_for(lambda s: (v := s.task_by_name("suspicious-eval")) is not None
                                          and v.reason == "succeeded_flagged" and v, what="suspicious-eval flagged")
    page = anonymous_page
    flagged_table = page.locator("table.flagged")
    row = flagged_table.locator("tr", has=page.get_by_role("link", name="suspicious-eval"))
    for name in ("speech-dev", "planner"):  # a submitter and an operator see the flag but may not clear it
        await sign_in(page, world, name)
        await page.goto(world.base_url + "/review")
        await world.system.wait_for(lambda s: _listed(page, row), timeout=30, what="the flagged run on the Review page")
        await expect(row).to_contain_text("output_out_of_bounds")
        await expect(page.get_by_role("button", name="Clear flag")).to_have_count(0)
        await page.get_by_role("button", name="Sign out").click()

    await sign_in(page, world, "reviewer")
    await page.goto(world.base_url + f"/tasks/{flagged.id}")  # the task page offers the same form
    await expect(page.locator("form.clear-flag-form").get_by_role("button", name="Clear flag")).to_be_visible()
    await page.goto(world.base_url + "/review?by=project&lang=zh")  # a Chinese reviewer sees the flag's name and the form
    await expect(row).to_contain_text("产出超出上限")
    await expect(row.locator(".tag", has_text="原文")).to_be_visible()  # the ledger's English detail, marked as such
    await save_screenshot(page, "console-review-flagged-zh")  # the one docs/console.md shows
    await page.goto(world.base_url + "/review?by=project&lang=en")
    await row.get_by_label("What you checked").fill("checked the samples by hand; the bound was set too low")
    await row.get_by_role("button", name="Clear flag").click()
    await expect(page.locator(".notice")).to_contain_text("Flag cleared and recorded with your reason")
    assert "by=project" in page.url  # back on the grouping the reviewer was looking at
    await world.system.wait_for(lambda s: _gone(page, row), timeout=30, what="the Review page no longer listing the flag")
    await expect(page.get_by_role("link", name="suspicious-eval").first).to_be_visible()  # now among the reviewed tasks
    cleared = await world.system.wait_for(lambda s: [e for e in s.of_type("task.flag_cleared") if e.data.task_id == flagged.id],
                                          what="task.flag_cleared")  # fmt: skip
    assert [(e.actor, e.data.reason) for e in cleared] == [
        ("user:reviewer", "checked the samples by hand; the bound was set too low")]
    await world.system.wait_for(lambda s: (v := s.task_by_name("suspicious-eval")).reason == "succeeded" and not v.flags,
                                what="the view no longer flagged")  # fmt: skip

    await page.goto(world.base_url + f"/tasks/{flagged.id}")
    await expect(page.locator("form.clear-flag-form")).to_have_count(0)
    # the same form again (a stale page, from either page): the API's 409 is the page's error, also for a Chinese reader
    for stale, heading in ((f"/review/{flagged.id}/clear-flag", "被标记的成功"), (f"/tasks/{flagged.id}/clear-flag", "匹配复核")):
        await page.goto(world.base_url + "/review?lang=zh")
        await page.evaluate("""action => { const f = document.createElement('form'); f.method = 'post'; f.action = action;
            const r = document.createElement('input'); r.name = 'reason'; r.value = 'again'; f.appendChild(r);
            document.body.appendChild(f); f.submit(); }""", stale)  # fmt: skip
        await expect(page.locator(".refused")).to_contain_text("409")
        await expect(page.locator(".refused")).to_contain_text("no flagged success left to clear")
        await expect(page.locator(".refused .refusal")).to_have_text("当前状态下无法执行")  # the headline in the reader's language
        await expect(page.locator("h2", has_text=heading)).to_be_visible()
    async with httpx.AsyncClient(base_url=world.base_url, headers=planner) as client:
        restored = await client.post("/v1/config/set", json={"name": "policy", "assignments": [
            "reports.max_output_units_per_gpu_hour_by_unit={tokens: 1000000000}"], "reason": "checked; back to default"})
        assert restored.status_code == 201, restored.text


@pytest.mark.parametrize(("lang", "legend"), [("en", "standard"), ("zh", "标准")])
async def test_the_queue_plot_names_the_classes_in_the_pages_language(world: ConsoleWorld, page: Page, lang: str,
                                                                     legend: str) -> None:  # fmt: skip
    await page.goto(f"{world.base_url}/queue?lang={lang}")
    plot = page.locator("svg").filter(has_text=legend)
    await expect(plot).to_have_count(1)
    if lang == "zh":
        await expect(page.locator("svg").filter(has_text="standard")).to_have_count(0)
