"""What-if (pure): a recorded workload replayed under the policy in force and a proposal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.cards import load_catalog
from shared.config import POLICY, policy_seed_text, scheduling_policy, set_values, validate_document
from services.cli.what_if import verdict_zh
from shared.config.what_if import compare, replay, verdict, workload_tasks
from shared.scheduling.policies import POLICIES

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
CATALOG = load_catalog()
CURRENT_TEXT = policy_seed_text(POLICIES["cardflow"], "preset cardflow")


def a_task(task_id: str, minute: float, priority_class: str, hours: float, **changes: Any) -> dict[str, Any]:
    """A task as GET /v1/workload returns it: it ran `hours` on H100."""
    at = (T0 + timedelta(minutes=minute)).isoformat()
    return {"task_id": task_id, "submitted_at": at, "ready_at": at, "project": "p", "priority_class": priority_class,
            "priority": 0, "gpus": 8, "estimate_gpu_hours": 8 * hours, "profile": "compute", "min_vram_gb": 0.0,
            "allow": ["H100"], "deny": [], "heavy": False, "checkpoint_interval_s": None, "run_s": hours * 3600,
            "ran_card": "H100", "state": "succeeded"} | changes


WORKLOAD = {
    "tasks": [a_task(f"S{n}", n, "standard", 1.0) for n in range(1, 5)] + [a_task("C1", 5, "core", 0.5)],
    "nodes": [{"node_id": "n1", "card_type": "H100", "gpus": 8}],
}


def what_if(proposal_text: str) -> tuple[list[Any], str]:
    tasks, fleet = workload_tasks(WORKLOAD, CATALOG)
    current = replay(tasks, fleet, scheduling_policy(validate_document(POLICY, CURRENT_TEXT).model), CATALOG)
    proposed = replay(tasks, fleet, scheduling_policy(validate_document(POLICY, proposal_text).model), CATALOG)
    rows = compare(current, proposed)
    return rows, verdict(rows, 1, len(tasks))


def test_a_change_that_matters_shows_the_difference_and_says_so() -> None:
    rows, sentence = what_if(set_values(CURRENT_TEXT, ["queue.order=fifo"]))

    by_measure = {row.measure: row for row in rows}
    core = by_measure["wait core mean"]
    assert core.current < core.proposed and core.better is False  # fifo makes the core task wait behind S2..S4
    assert by_measure["wait standard mean"].better is True
    assert sentence.startswith("Over the last 1 days (5 tasks) the proposal would be better: ")
    assert "worse: wait core mean" in sentence
    in_chinese = verdict_zh(rows, 1, 5)
    assert in_chinese.startswith("在最近 1 天（5 个任务）里，提议的策略更好：") and "更差：等待时间 核心 均值" in in_chinese


def test_a_no_op_shows_no_difference() -> None:
    reworded = "# the same policy, comments only\n" + CURRENT_TEXT
    rows, sentence = what_if(reworded)
    assert all(row.better is None for row in rows)
    assert sentence.startswith("No difference: over the last 1 days (5 tasks)")
    assert verdict_zh(rows, 1, 5).startswith("没有差异：在最近 1 天（5 个任务）里")


def test_durations_are_the_real_ones_converted_to_the_reference_card() -> None:
    tasks, fleet = workload_tasks(WORKLOAD, CATALOG)
    s1 = next(t for t in tasks if t.task_id == "S1")
    assert s1.trace_card == CATALOG.reference and s1.duration_s > 3600  # an H100 hour is longer on an A100
    assert fleet.capacity == 8
