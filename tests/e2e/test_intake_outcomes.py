"""One upstream batch with valid, invalid, duplicate and impossible submissions: each gets its outcome."""

from __future__ import annotations

from typing import Any

from services.intake.service import INBOX_CONSUMER
from shared.events import TaskState
from tests.helpers.system import RunningSystem


def a_task(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "project": "eval", "priority_class": "standard", "gpus": 1, "estimate_gpu_hours": 1,
            "profile": "memory", **extra}  # fmt: skip


BROKEN = {"idempotency_key": "broken-1", "name": "", "project": "vision team", "priority_class": "urgent", "gpu": 2,
          "estimate_gpu_hours": 3, "profile": "compute"}  # fmt: skip
ALSO_BROKEN = a_task("negative-estimate", estimate_gpu_hours=-1, profile="gpu-bound", idempotency_key="broken-2")


async def test_invalid_submissions_are_rejected_with_reasons_while_the_valid_ones_run(system: RunningSystem) -> None:
    system.start_agent("l40s-a", "L40Sx8", time_scale=3600)
    valid = [a_task(f"valid-{n}") for n in range(3)]
    duplicate = a_task("once-only", idempotency_key="dup-1")
    impossible = a_task("giant-moe", gpus=8, min_vram_gb=200, estimate_gpu_hours=400)
    await system.submit([valid[0], BROKEN, valid[1], duplicate, ALSO_BROKEN, duplicate, valid[2], impossible])

    def outcome(s: RunningSystem) -> bool:
        names = ["valid-0", "valid-1", "valid-2", "once-only"]
        done = all(v and v.state is TaskState.SUCCEEDED for v in map(s.task_by_name, names))
        impossible_view = s.task_by_name("giant-moe")
        rejected = [v for v in s.views.values() if v.state is TaskState.REJECTED]
        return done and len(rejected) == 2 and impossible_view is not None and impossible_view.state is TaskState.UNMATCHABLE

    await system.wait_for(outcome, what="valid tasks done, invalid ones rejected, the impossible one unmatchable")
    await system.submit([duplicate])  # the same key again, after the task ran
    await system.wait_for(lambda s: _intake_saw(s, 9), what="intake to process the repeated submission")

    rejected = {v.idempotency_key: v for v in system.views.values() if v.state is TaskState.REJECTED}
    assert {p.field for p in rejected["broken-1"].problems} >= {"name", "project", "priority_class", "gpu", "gpus"}
    assert {p.field for p in rejected["broken-2"].problems} == {"estimate_gpu_hours", "profile"}
    assert all(p.problem for v in rejected.values() for p in v.problems)
    assert len({e.data.task_id for e in system.of_type("task.submitted") if e.data.idempotency_key == "dup-1"}) == 1
    assert len([v for v in system.views.values() if v.idempotency_key == "dup-1"]) == 1
    giant = system.task_by_name("giant-moe")
    assert giant is not None and giant.reason == "insufficient_vram"
    assert "200" in giant.reason_detail
    assert not [e for e in system.of_type("lease.granted") if e.data.task_id == giant.id]


def _intake_saw(system: RunningSystem, entries: int):  # -> async check: intake consumed that many cf:ingest entries
    async def check(s: RunningSystem) -> bool:
        consumed = await s.pool.fetchval("SELECT count(*) FROM intake.inbox WHERE consumer = $1", INBOX_CONSUMER)
        return consumed >= entries

    return check(system)
