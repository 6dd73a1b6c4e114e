"""Configuration in the running system: every grant and match records the document version it used,
and `cardflow config what-if` replays this installation's own recorded history (its tables, not a
hand-made workload): a change that matters shows in the deltas, a no-op shows none."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app
from shared.config import set_values, strip_version_header
from shared.events import TaskState
from tests.helpers.console_server import first_admin, serving_console
from tests.helpers.system import RunningSystem

FILLER = {
    "name": "sweep-filler", "project": "research", "priority_class": "opportunistic", "gpus": 8, "min_vram_gb": 80,
    "estimate_gpu_hours": 96, "profile": "compute", "checkpoint": {"interval_minutes": 5}, "output_unit": "samples",
}  # fmt: skip
IMPOSSIBLE = {  # no card type has 200 GB: unmatchable, never runs, left out of the replay (and counted)
    "name": "giant-moe", "project": "research", "priority_class": "standard", "gpus": 8, "min_vram_gb": 200,
    "estimate_gpu_hours": 400, "profile": "compute", "output_unit": "samples",
}  # fmt: skip
URGENT = {
    "name": "urgent-eval", "project": "llm", "priority_class": "core", "gpus": 8, "min_vram_gb": 80,
    "estimate_gpu_hours": 4, "profile": "compute", "output_unit": "evals",
}  # fmt: skip


def cardflow(*args: str, url: str, token: str) -> str:
    env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": token, "CARDFLOW_TOKEN_FILE": None, "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


async def test_decisions_record_their_versions_and_what_if_replays_the_recorded_history(
    system: RunningSystem, tmp_path: Path
) -> None:
    system.start_agent("h100-a", "H100x8", time_scale=1200)  # the filler: 96 GPU-h on 8 GPUs, seconds at 1200x
    await system.wait_for(lambda s: s.of_type("node.registered"), what="the fleet")  # the replay's fleet is there from the start
    await system.submit([FILLER, IMPOSSIBLE])
    filler = await system.wait_for(lambda s: s.task_by_name("sweep-filler"), what="the filler's view")
    await system.wait_for(lambda s: [e for e in s.of_type("task.checkpointed") if e.data.task_id == filler.id],
                          what="a checkpoint of the filler")  # fmt: skip
    await system.submit([URGENT])  # core work: preempts the filler at once (the seeded policy's grace is 0 s)
    settled = {"sweep-filler": TaskState.SUCCEEDED, "urgent-eval": TaskState.SUCCEEDED, "giant-moe": TaskState.UNMATCHABLE}
    await system.wait_for(lambda s: {v.name: v.state for v in s.views.values()} == settled,
                          timeout=120, what="both runnable tasks to succeed, the impossible one unmatchable")  # fmt: skip
    await system.wait_for(lambda s: len(s.of_type("lease.released")) == 3, what="every lease released")

    grants = system.of_type("lease.granted")
    assert len(grants) == 3 and {g.data.policy_version for g in grants} == {1}  # the filler twice, the urgent eval once
    assert {row["policy_version"] for row in await system.pool.fetch("SELECT policy_version FROM dispatcher.leases")} == {1}
    assert {m.data.catalog_version for m in system.of_type("task.matched")} == {"1"}  # the cards document's version
    assert [e.data.reason for e in system.of_type("lease.revoked")] == ["preempted"]

    with serving_console(system.settings) as url:
        token = await first_admin(system.settings)
        shown = cardflow("config", "show", "policy", url=url, token=token)
        in_force = tmp_path / "policy.yaml"
        in_force.write_text(shown)
        longer_grace = tmp_path / "longer-grace.yaml"  # the preset's 10 minutes instead of the seeded 0 s
        longer_grace.write_text(set_values(strip_version_header(shown)[0], ["preemption.after_s=600"]))

        changed = json.loads(cardflow("config", "what-if", "policy", str(longer_grace), "--days", "1", "--json",
                                      url=url, token=token))  # fmt: skip
        table = cardflow("config", "what-if", "policy", str(longer_grace), "--days", "1", url=url, token=token)
        same = json.loads(cardflow("config", "what-if", "policy", str(in_force), "--days", "1", "--json", url=url, token=token))
        same_table = cardflow("config", "what-if", "policy", str(in_force), "--days", "1", url=url, token=token)
        table_zh = cardflow("config", "what-if", "policy", str(longer_grace), "--days", "1", "--lang", "zh", url=url, token=token)

    measures = {m["measure"]: m for m in changed["measures"]}
    assert changed["tasks"] == 2 and changed["left_out"] == {"unmatchable, never ran": 1} and changed["current_version"] == 1
    assert measures["preemptions"]["current"] >= 1 and measures["preemptions"]["proposed"] == 0
    assert measures["wait core mean"]["proposed"] > measures["wait core mean"]["current"]  # the eval waits for the filler
    assert measures["lost GPU-hours"]["proposed"] < measures["lost GPU-hours"]["current"]
    assert measures["wait core mean"]["better"] is False and measures["preemptions"]["better"] is True
    assert changed["verdict"].startswith("Over the last 1 days (2 tasks) the proposal would be better: ")
    assert "worse: wait core mean" in changed["verdict"]
    assert "better: " in changed["verdict"] and "preemptions 1 → 0" in changed["verdict"]
    flat = " ".join(table.split())
    assert "preemptions │ 1 │ 0 │ -1" in flat and changed["verdict"] in flat
    assert "Not replayed: 1 unmatchable, never ran" in flat
    flat_zh = " ".join(table_zh.split())
    assert "抢占次数 │ 1 │ 0 │ -1" in flat_zh and "更差：等待时间 核心 均值" in flat_zh, flat_zh
    assert "未重放：无可用卡型，从未运行 1 个" in flat_zh and "Over the last" not in flat_zh

    assert all(m["better"] is None and m["change"] == 0 for m in same["measures"])
    assert same["verdict"].startswith("No difference: over the last 1 days (2 tasks)")
    assert "No difference" in same_table
