"""Replayed archive against live read models (pure): every difference, with the event that breaks.

`compare_models(replayed, live, history)` returns `Mismatch`es, each naming the model, the entity,
what differs, and the archived event where the two first part ways (or the event one side lacks):

- tasks: the replayed `TaskView` against `views.tasks` on its order-independent facts; the first
  event whose resulting state differs from what `views.events` recorded for it, or the first the
  views never applied;
- leases: grant fields against `dispatcher.leases` (named event: `lease.granted`), end time and
  reason (named event: `lease.released`), and leases one side does not know;
- ledger: each `usage.recorded` (a slice of one lease, on its own or carried by a `usage.batch_recorded`)
  against its `ledger.usage_increments` row, by event id and lease, to the last digit; each lease's total
  against `ledger.lease_usage`;
- quotas: hours and window against `quota.granted` (+ adjustments), used GPU-hours to 1e-9 h.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from services.audit.live import LiveState
from shared.events.envelope import Envelope
from shared.projection import evolve
from shared.task_view import TaskView
from shared.replay import ReplayState

TASK_FIELDS = ("state", "reason", "project", "output_units", "ready", "cancel_requested", "approved")
"""What must agree between a replayed task and the live view: the facts `evolve` derives the same
whatever order events of different subjects arrive in. The current lease, node, card and attempt
count follow the order a task's `lease/<id>` events interleave with its `task/<id>` events (a
redelivered `task.requeued` of an old lease can land after the next grant), and floats summed in
another order differ in the last bit, so they are not compared here; leases are compared with the
dispatcher's own records instead."""
USED_HOURS_TOLERANCE = Decimal("1e-9")


class Model(StrEnum):
    TASKS = "tasks"
    LEASES = "leases"
    LEDGER = "ledger"
    QUOTAS = "quotas"


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One difference between the archive's replay and a live model."""

    model: Model
    key: str
    detail: str
    event_id: str | None = None

    def describe(self) -> str:
        at = f" (first breaking event {self.event_id})" if self.event_id else ""
        return f"{self.model.value} {self.key}: {self.detail}{at}"


def compare_models(replayed: ReplayState, live: LiveState, history: Mapping[str, Sequence[Envelope]]) -> list[Mismatch]:
    """Every difference; `history` is each task's archived events in archive order."""
    return [
        *compare_tasks(replayed, live, history),
        *compare_leases(replayed, live),
        *compare_ledger(replayed, live),
        *compare_quotas(replayed, live),
    ]


# ---- tasks ----------------------------------------------------------------------------------------


def compare_tasks(replayed: ReplayState, live: LiveState, history: Mapping[str, Sequence[Envelope]]) -> list[Mismatch]:
    if "views.tasks" in live.missing:
        return []
    found = []
    for task_id in sorted(set(replayed.tasks) | set(live.tasks)):
        view, stored = replayed.tasks.get(task_id), live.tasks.get(task_id)
        events = history.get(task_id, ())
        if stored is None:
            found.append(Mismatch(Model.TASKS, task_id, "archived, but the views have no such task",
                                  events[0].event_id if events else None))  # fmt: skip
        elif view is None:
            found.append(Mismatch(Model.TASKS, task_id, "in the views, but no archived event is about it"))
        else:
            found += _task_differences(view, stored, events, live.task_history.get(task_id, {}))
    return found


def _task_differences(view: TaskView, stored: dict[str, Any], events: Sequence[Envelope],
                      applied: Mapping[str, str]) -> list[Mismatch]:  # fmt: skip
    replayed = view.model_dump(mode="json")
    differing = [name for name in TASK_FIELDS if replayed.get(name) != stored.get(name)]
    if not differing:
        return []
    listed = "; ".join(f"{name}: archive {replayed.get(name)!r}, views {stored.get(name)!r}" for name in differing)
    return [Mismatch(Model.TASKS, view.id, listed, first_task_divergence(events, applied))]


def first_task_divergence(events: Sequence[Envelope], applied: Mapping[str, str]) -> str | None:
    """The first archived event the views never applied, or after which they recorded another state."""
    view: TaskView | None = None
    for event in events:
        after = evolve(view, event)
        if after is None or after is view:
            continue
        view = after
        recorded = applied.get(event.event_id)
        if recorded is None or recorded != view.state.value:
            return event.event_id
    return events[-1].event_id if events else None


# ---- leases ---------------------------------------------------------------------------------------


def compare_leases(replayed: ReplayState, live: LiveState) -> list[Mismatch]:
    if "dispatcher.leases" in live.missing:
        return []
    found = []
    for lease_id in sorted(set(replayed.leases) | set(live.leases)):
        record, stored = replayed.leases.get(lease_id), live.leases.get(lease_id)
        if stored is None:
            found.append(Mismatch(Model.LEASES, lease_id, "archived, but the dispatcher has no such lease",
                                  record.granted_event or record.released_event if record else None))  # fmt: skip
            continue
        if record is None or record.granted_event is None:
            found.append(Mismatch(Model.LEASES, lease_id, "the dispatcher granted it, but its lease.granted is not archived"))
            continue
        granted = {"task_id": record.task_id, "node_id": record.node_id, "card_type": record.card_type,
                   "gpu_indices": record.gpu_indices, "fencing_token": record.fencing_token,
                   "borrowed_headroom": record.borrowed_headroom}  # fmt: skip
        found += _fields(Model.LEASES, lease_id, granted, stored, record.granted_event)
        found += _lease_end(record, stored)
    return found


def _lease_end(record: Any, stored: Any) -> list[Mismatch]:
    if stored.ended_at is None and record.ended_at is None:
        return []
    if record.ended_at is None:
        return [Mismatch(Model.LEASES, record.lease_id,
                         f"the dispatcher ended it at {stored.ended_at.isoformat()} ({stored.end_reason}),"
                         " but its lease.released is not archived")]  # fmt: skip
    if stored.ended_at is None:
        return [Mismatch(Model.LEASES, record.lease_id, "released in the archive, still active in the dispatcher",
                         record.released_event)]  # fmt: skip
    ended = {"ended_at": record.ended_at, "end_reason": record.end_reason}
    return _fields(Model.LEASES, record.lease_id, ended, stored, record.released_event)


def _fields(model: Model, key: str, expected: Mapping[str, Any], stored: Any, event_id: str | None) -> list[Mismatch]:
    differing = [(name, value, getattr(stored, name)) for name, value in expected.items() if getattr(stored, name) != value]
    if not differing:
        return []
    listed = "; ".join(f"{name}: archive {a!r}, live {b!r}" for name, a, b in differing)
    return [Mismatch(model, key, listed, event_id)]


# ---- ledger ---------------------------------------------------------------------------------------


def compare_ledger(replayed: ReplayState, live: LiveState) -> list[Mismatch]:
    if "ledger.usage_increments" in live.missing:
        return []
    found = []
    archived = set()
    for piece in replayed.usage:
        archived.add((piece.event_id, piece.lease_id))
        row = live.increments.get((piece.event_id, piece.lease_id))
        if row is None:
            found.append(Mismatch(Model.LEDGER, piece.lease_id, "usage.recorded is archived, the ledger has no such"
                                  " increment", piece.event_id))  # fmt: skip
        elif (row.gpu_seconds, row.cost) != (piece.gpu_seconds, piece.cost):
            found.append(Mismatch(Model.LEDGER, piece.lease_id,
                                  f"increment: archive {piece.gpu_seconds} GPU-s / {piece.cost}, ledger"
                                  f" {row.gpu_seconds} GPU-s / {row.cost}", piece.event_id))  # fmt: skip
    for (event_id, lease_id), row in sorted(live.increments.items()):
        if (event_id, lease_id) not in archived:
            found.append(Mismatch(Model.LEDGER, row.lease_id, f"the ledger's increment {event_id} (usage.recorded)"
                                  " is not archived", event_id))  # fmt: skip
    return found + _lease_totals(replayed, live)


def _lease_totals(replayed: ReplayState, live: LiveState) -> list[Mismatch]:
    found = []
    totals = replayed.usage_by_lease()
    for lease_id, stored in sorted(live.lease_usage.items()):
        total = totals.get(lease_id)
        seconds, cost = (total.gpu_seconds, total.cost) if total else (Decimal(0), Decimal(0))
        if (seconds, cost) != (stored.gpu_seconds, stored.cost):
            found.append(Mismatch(Model.LEDGER, lease_id, f"lease total: archive {seconds} GPU-s / {cost},"
                                  f" ledger {stored.gpu_seconds} GPU-s / {stored.cost}"))  # fmt: skip
    return found


# ---- quotas ---------------------------------------------------------------------------------------


def compare_quotas(replayed: ReplayState, live: LiveState) -> list[Mismatch]:
    if "ledger.quotas" in live.missing:
        return []
    found = []
    for account_id in sorted(set(replayed.quotas) | set(live.quotas)):
        quota, stored = replayed.quotas.get(account_id), live.quotas.get(account_id)
        if stored is None or quota is None:
            side = "the ledger has no such account" if stored is None else "its quota.granted is not archived"
            found.append(Mismatch(Model.QUOTAS, account_id, side, quota.granted_event if quota else None))
            continue
        granted = {"project": quota.project, "card_type": quota.card_type, "gpu_hours": quota.gpu_hours,
                   "valid_from": quota.valid_from, "valid_to": quota.valid_to}  # fmt: skip
        found += _fields(Model.QUOTAS, account_id, granted, stored, quota.granted_event)
        used = replayed.quota_used_gpu_hours(quota)
        if abs(used - stored.used_gpu_hours) > USED_HOURS_TOLERANCE:
            found.append(Mismatch(Model.QUOTAS, account_id,
                                  f"used GPU-hours: archive {used:.9f}, ledger {stored.used_gpu_hours:.9f}"))  # fmt: skip
    return found


def first_breaking(mismatches: Iterable[Mismatch], seq_of: Mapping[str, int]) -> Mismatch | None:
    """The mismatch whose named event comes first in the archive (those naming none come last)."""
    ordered = sorted(mismatches, key=lambda m: seq_of.get(m.event_id or "", 1 << 62))
    return ordered[0] if ordered else None
