"""Builders for ledger tests: the lease, task and output events the ledger reads."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from shared.events import (
    LeaseGranted,
    LeaseReleased,
    LeaseRenewed,
    TaskCheckpointed,
    TaskFailed,
    TaskFlagCleared,
    TaskMatched,
    TaskSucceeded,
    make_event,
)
from shared.events.subjects import lease_subject, task_subject
from tests.unit.matcher.builders import T0, submitted

__all__ = ["T0", "checkpointed", "failed", "flag_cleared", "granted", "matched", "release_facts", "released", "renewed",
           "submitted", "succeeded"]


def _lease_event(cls: Any, lease_id: str, seq: int, at: datetime, data: dict[str, Any]) -> Any:
    return make_event(
        cls, subject=lease_subject(lease_id), subject_seq=seq, producer="dispatcher/t",
        actor="service:dispatcher", occurred_at=at, data=data,
    )  # fmt: skip


def granted(lease_id: str, task_id: str, *, card_type: str = "H100", gpus: int = 2, at: datetime = T0,
            time_scale: float = 1.0, borrowed_headroom: bool = False) -> LeaseGranted:  # fmt: skip
    return _lease_event(LeaseGranted, lease_id, 1, at, {
        "lease_id": lease_id, "task_id": task_id, "agent_id": "a1", "node_id": "n1", "card_type": card_type,
        "gpu_indices": list(range(gpus)), "fencing_token": 1, "ttl_s": 30.0, "expires_at": at + timedelta(seconds=30),
        "time_scale": time_scale, "borrowed_headroom": borrowed_headroom,
    })  # fmt: skip


def renewed(lease_id: str, task_id: str, *, at: datetime, seq: int = 2, util: float | None = None,
            heard_at: datetime | None = None) -> LeaseRenewed:
    return _lease_event(LeaseRenewed, lease_id, seq, at, {
        "lease_id": lease_id, "task_id": task_id, "until": at + timedelta(seconds=30), "gpu_util_pct": util,
        "heard_at": heard_at,
    })  # fmt: skip


def released(
    lease_id: str, task_id: str, *, granted_at: datetime = T0, ended_at: datetime, card_type: str = "H100",
    gpus: int = 2, reason: str = "succeeded", seq: int = 3, util: float | None = None,
    last_checkpoint_at: datetime | None = None,
) -> LeaseReleased:
    return _lease_event(LeaseReleased, lease_id, seq, ended_at, {
        "lease_id": lease_id, "task_id": task_id, "node_id": "n1", "card_type": card_type, "gpus": gpus,
        "granted_at": granted_at, "ended_at": ended_at, "reason": reason, "gpu_util_pct": util,
        "last_checkpoint_at": last_checkpoint_at,
    })  # fmt: skip


def checkpointed(task_id: str, lease_id: str, output_units: float | None, *, at: datetime = T0) -> TaskCheckpointed:
    return make_event(
        TaskCheckpointed, subject=task_subject(task_id), subject_seq=5, producer="dispatcher/t",
        actor="service:dispatcher", occurred_at=at,
        data={"task_id": task_id, "lease_id": lease_id, "checkpoint_uri": "s3://ckpt/x", "output_units": output_units},
    )  # fmt: skip


def succeeded(task_id: str, lease_id: str, output_units: float | None, *, at: datetime = T0,
              flags: tuple[str, ...] = (), claimed: float | None = None,
              carrying: LeaseReleased | None = None) -> TaskSucceeded:
    """`carrying`: the success carries that lease end (`released`) instead of it being an event of its own."""
    flagged = {"flags": flags, "flag_detail": "judged", "claimed_output_units": claimed} if flags else {}
    return make_event(
        TaskSucceeded, subject=task_subject(task_id), subject_seq=6, producer="dispatcher/t",
        actor="service:dispatcher", occurred_at=at,
        data={"task_id": task_id, "lease_id": lease_id, "output_units": output_units, **flagged,
              "released": release_facts(carrying)},
    )  # fmt: skip


def failed(task_id: str, lease_id: str, *, at: datetime = T0, carrying: LeaseReleased | None = None) -> TaskFailed:
    """`carrying`: the failure carries that lease end (`released`) instead of it being an event of its own."""
    return make_event(
        TaskFailed, subject=task_subject(task_id), subject_seq=6, producer="dispatcher/t",
        actor="service:dispatcher", occurred_at=at,
        data={"task_id": task_id, "lease_id": lease_id, "error": "boom", "exit_code": 1,
              "released": release_facts(carrying)},
    )  # fmt: skip


def release_facts(release: LeaseReleased | None) -> dict[str, Any] | None:
    """What a run's end carries of `release` (its facts beside the lease and task ids)."""
    return None if release is None else release.data.model_dump(exclude={"lease_id", "task_id"})


def matched(task_id: str, card_type: str, *, seq: int, at: datetime = T0) -> TaskMatched:
    """The matcher's `seq`-th event about `task_id`: a match choosing `card_type`."""
    ranking = [{"card_type": card_type, "est_runtime_s": 600.0, "est_cost": 1.0}]
    return make_event(
        TaskMatched, subject=task_subject(task_id), subject_seq=seq, producer="matcher/t", actor="service:matcher",
        occurred_at=at, data={"task_id": task_id, "ranking": ranking, "chosen": card_type, "reason": "cheapest"},
    )  # fmt: skip


def flag_cleared(task_id: str, *, at: datetime = T0, by: str = "user:rita") -> TaskFlagCleared:
    """A reviewer (`by`) cleared the flag of `task_id`'s flagged success."""
    return make_event(
        TaskFlagCleared, subject=task_subject(task_id), subject_seq=7, producer="console/t", actor=by,
        occurred_at=at, data={"task_id": task_id, "reason": "checked the samples by hand"},
    )  # fmt: skip
