"""Builders for audit tests: usage and quota events the ledger writes (the rest from the ledger's builders)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from shared.events import QuotaGranted, UsageBatchRecorded, UsageRecorded, make_event
from shared.events.subjects import lease_subject, quota_subject, usage_subject
from tests.unit.ledger.builders import T0, granted, released, renewed, submitted

__all__ = ["T0", "carrier", "granted", "quota", "released", "renewed", "submitted", "usage"]


def usage(lease_id: str, task_id: str, *, start: datetime, end: datetime, gpus: int = 2, price: float = 10.0,
          project: str = "proj-a", card_type: str = "H100", seq: int = 1, **extra: Any) -> UsageRecorded:  # fmt: skip
    seconds = gpus * (end - start).total_seconds()
    return make_event(
        UsageRecorded, subject=lease_subject(lease_id), subject_seq=seq, producer="ledger/t", actor="service:ledger",
        occurred_at=end, data={"lease_id": lease_id, "task_id": task_id, "project": project, "card_type": card_type,
                               "gpu_seconds": seconds, "cost": round(seconds * price / 3600, 6),
                               "from_at": start, "to_at": end, "gpus": gpus, **extra},
    )  # fmt: skip


def carrier(*slices: UsageRecorded, seq: int = 1) -> UsageBatchRecorded:
    """The `usage.batch_recorded` that carries `slices` (all of one project) instead of their own events."""
    project = slices[0].data.project
    return make_event(
        UsageBatchRecorded, subject=usage_subject(project), subject_seq=seq, producer="ledger/t", actor="service:ledger",
        occurred_at=max(s.occurred_at for s in slices),
        data={"project": project, "slices": [s.data.model_dump(exclude={"project"}) for s in slices]},
    )  # fmt: skip


def quota(account_id: str, project: str, gpu_hours: float, *, start: datetime = T0,
          days: int = 30) -> QuotaGranted:  # fmt: skip
    return make_event(
        QuotaGranted, subject=quota_subject(account_id), subject_seq=1, producer="ledger/t", actor="user:alice",
        occurred_at=start, data={"account_id": account_id, "project": project, "gpu_hours": gpu_hours,
                                 "valid_from": start, "valid_to": start + timedelta(days=days)},
    )  # fmt: skip
