"""Builders for matcher tests: submissions, matching requests and the events the matcher reads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.cards import MatchRequest
from shared.events import ConfigChanged, NodeLost, NodeRegistered, TaskCancelled, TaskSubmitted, make_event, new_event_id
from shared.events.subjects import node_subject, task_subject
from shared.submission import TaskSubmission

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


def a_submission(**overrides: Any) -> TaskSubmission:
    body: dict[str, Any] = {
        "name": "train",
        "project": "proj-a",
        "priority_class": "standard",
        "gpus": 2,
        "estimate_gpu_hours": 4.0,
        "profile": "compute",
    }
    return TaskSubmission.model_validate({**body, **overrides})


def a_request(**overrides: Any) -> MatchRequest:
    values: dict[str, Any] = {"gpus": 1, "min_vram_gb": 0.0, "estimate_gpu_hours": 2.0, "profile": "compute"}
    return MatchRequest(**{**values, **overrides})


def submitted(task_id: str | None = None, **overrides: Any) -> TaskSubmitted:
    task_id = task_id or new_event_id()
    return make_event(
        TaskSubmitted, subject=task_subject(task_id), subject_seq=1, producer="intake/t", actor="user:test",
        data={"task_id": task_id, "idempotency_key": f"k-{task_id}", "submission": a_submission(**overrides)},
    )  # fmt: skip


def registered(node_id: str, card_type: str, gpus: int = 8, *, at: datetime = T0) -> NodeRegistered:
    return make_event(
        NodeRegistered, subject=node_subject(node_id), subject_seq=1, producer="dispatcher/t",
        actor="service:dispatcher", occurred_at=at,
        data={"node_id": node_id, "agent_id": f"agent-{node_id}", "card_type": card_type, "gpus": gpus, "mode": "sim"},
    )  # fmt: skip


def lost(node_id: str, *, at: datetime = T0) -> NodeLost:
    return make_event(
        NodeLost, subject=node_subject(node_id), subject_seq=2, producer="dispatcher/t", actor="service:dispatcher",
        occurred_at=at, data={"node_id": node_id, "agent_id": f"agent-{node_id}"},
    )  # fmt: skip


def cancelled(task_id: str) -> TaskCancelled:
    return make_event(
        TaskCancelled, subject=task_subject(task_id), subject_seq=2, producer="dispatcher/t", actor="user:test",
        data={"task_id": task_id},
    )  # fmt: skip


def catalog_changed(version: int, *, name: str = "cards") -> ConfigChanged:
    """`config.changed` announcing version `version` of the `cards` document (or of `name`)."""
    return make_event(
        ConfigChanged, subject=f"config/{name}", subject_seq=version, producer="config/t", actor="user:ops",
        data={"name": name, "old_version": version - 1 or None, "new_version": version, "action": "applied",
              "s3_key": f"{name}.yaml", "s3_version_id": f"v{version}", "sha256": "0" * 64, "diff": "", "reason": "test"},
    )  # fmt: skip
