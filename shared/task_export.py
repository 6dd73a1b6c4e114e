"""The task list and the demand plan as tables (pure): what `cardflow export` writes to the reports bucket.

- `task_rows(views)`: one row per task — priority, estimate, readiness, state, reason, card type,
  estimated and used cost;
- `demand_rows(views)`: per project and card type, the open work (tasks not ended): how many
  tasks, waiting or running, GPUs asked for, estimated GPU-hours and cost, and the cost so far;
- `to_csv(rows, columns)`: CSV text with a header line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from shared.events.states import TaskState
from shared.task_view import TaskView

TASK_COLUMNS = (
    "task_id", "name", "project", "priority_class", "priority", "gpus", "estimate_gpu_hours", "template",
    "ready", "ready_fraction", "missing_inputs", "state", "reason", "reason_detail", "card_type",
    "est_runtime_s", "est_cost", "used_gpu_hours", "used_cost", "submitted_at", "started_at", "finished_at",
)  # fmt: skip
DEMAND_COLUMNS = (
    "project", "card_type", "open_tasks", "waiting_tasks", "running_tasks", "gpus", "estimate_gpu_hours",
    "est_cost", "used_cost",
)  # fmt: skip
UNMATCHED = "(no card type yet)"
_RUNNING = frozenset({TaskState.LEASED, TaskState.RUNNING})


def task_rows(views: Iterable[TaskView]) -> list[dict[str, Any]]:
    """One row per task, by submission time then id."""
    ordered = sorted(views, key=lambda v: (v.submitted_at is None, v.submitted_at or 0, v.id))
    return [_task_row(view) for view in ordered]


def _task_row(view: TaskView) -> dict[str, Any]:
    submission = view.submission or {}
    return {
        "task_id": view.id, "name": view.name, "project": view.project,
        "priority_class": view.priority_class.value if view.priority_class else None, "priority": view.priority,
        "gpus": view.gpus, "estimate_gpu_hours": submission.get("estimate_gpu_hours"), "template": view.template,
        "ready": view.ready, "ready_fraction": view.ready_fraction, "missing_inputs": " ".join(view.missing_inputs),
        "state": view.state.value, "reason": view.reason, "reason_detail": view.reason_detail,
        "card_type": view.card_type, "est_runtime_s": view.match.est_runtime_s if view.match else None,
        "est_cost": view.match.est_cost if view.match else None, "used_gpu_hours": round(view.used_gpu_hours, 6),
        "used_cost": round(view.used_cost, 6), "submitted_at": _iso(view.submitted_at),
        "started_at": _iso(view.started_at), "finished_at": _iso(view.finished_at),
    }  # fmt: skip


def demand_rows(views: Iterable[TaskView]) -> list[dict[str, Any]]:
    """Open work per (project, card type), by project then card type."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for view in views:
        if view.state.is_terminal:
            continue
        key = (view.project or "(unknown)", view.card_type or UNMATCHED)
        row = groups.setdefault(key, dict.fromkeys(DEMAND_COLUMNS, 0) | {"project": key[0], "card_type": key[1]})
        running = view.state in _RUNNING
        row["open_tasks"] += 1
        row["running_tasks" if running else "waiting_tasks"] += 1
        row["gpus"] += view.gpus or 0
        row["estimate_gpu_hours"] += (view.submission or {}).get("estimate_gpu_hours") or 0.0
        row["est_cost"] += view.match.est_cost if view.match else 0.0
        row["used_cost"] += view.used_cost
    return [_rounded(groups[key]) for key in sorted(groups)]


def to_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    return {key: round(value, 6) if isinstance(value, float) else value for key, value in row.items()}


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
