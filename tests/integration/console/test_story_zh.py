"""A task's story in Chinese: `GET /v1/tasks/{id}/story?lang=zh` names each event, renders each
history line from the fields stored with it, and gives the match's sentence and each card's why-not
in Chinese; English stays as it was. Real matcher and views service, Valkey and PostgreSQL; the
dispatcher's events (held, granted) are published as its outbox relay would."""

from __future__ import annotations

import re

import pytest

from services.console.projector import SPEC as VIEWS
from services.matcher.service import build_spec as build_matcher
from shared.events import utcnow
from shared.settings import Settings
from tests.helpers.console_server import console_client, first_admin
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import TaskStory
from tests.unit.matcher.builders import registered, submitted

pytestmark = pytest.mark.integration
CJK = re.compile(r"[\u4e00-\u9fff]")
QUOTA_DETAIL = "quota of proj-a covers 1 of 4 GPU-hours"


async def test_a_matched_held_and_leased_task_tells_its_story_in_chinese(fresh_settings: Settings) -> None:
    root = await first_admin(fresh_settings)
    async with RunningServices(fresh_settings, build_matcher(), VIEWS) as running:
        await running.publish(registered("n1", "H100"), registered("n2", "A10", 4), submitted("T-story", gpus=1, min_vram_gb=20))
        (matched,) = await running.wait_for_events("task.matched", 1)
        chosen = matched.data.chosen
        dispatcher = TaskStory("T-story", start=utcnow())
        await running.publish(dispatcher.held("quota_exhausted", QUOTA_DETAIL), dispatcher.granted("n1", chosen, (0,)))
        async with console_client(fresh_settings, root) as client:

            async def leased() -> bool:
                found = await client.get("/v1/tasks/T-story")
                return found.status_code == 200 and found.json()["state"] == "leased"

            assert await running.wait_until(leased)
            english = (await client.get("/v1/tasks/T-story/story")).json()
            chinese = (await client.get("/v1/tasks/T-story/story", params={"lang": "zh"})).json()

    by_type = {line["type"]: line for line in chinese["history"]}
    assert {"task.submitted", "task.matched", "task.held", "lease.granted"} <= set(by_type)
    assert by_type["task.matched"]["event_label"] == "已匹配卡型"
    assert by_type["task.held"]["event_label"] == "暂缓"
    assert by_type["lease.granted"]["event_label"] == "已分配 GPU（租约）"
    held = by_type["task.held"]
    assert held["reason_label"] == "配额不足" and held["sentence"].startswith("项目 proj-a 的配额不足")
    assert held["original_needed"] and held["detail"] == QUOTA_DETAIL  # the dispatcher's numbers: its English, as 原文
    granted = by_type["lease.granted"]
    assert granted["sentence"] == f"已分配节点 n1（{chosen}）的 GPU 0，等待节点代理启动" and not granted["original_needed"]
    assert all(line["sentence"] is None or CJK.search(line["sentence"]) for line in chinese["history"])

    (match,) = chinese["matches"]
    assert match["why"].startswith(f"{chosen} 是满足要求的最便宜卡型")
    refused = [row for row in match["ranking"] if row["why_not"]]
    assert refused and all(CJK.search(row["why_not_text"]) for row in refused)
    assert "显存 16 GB，少于所需的 20 GB" in {row["why_not_text"] for row in refused}  # from the stored numbers

    for line in english["history"]:  # English: the type, the reason and the service's sentence, unchanged
        assert (line["event_label"], line["reason_label"], line["sentence"], line["original_needed"]) == (
            line["type"], line["reason"], line["detail"], False)
    assert english["matches"][0]["why"] == matched.data.reason
    assert all(row["why_not_text"] == row["why_not"] for row in english["matches"][0]["ranking"])
