"""Builders of the events and agent reports the dispatcher consumes (tests only)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.events import (
    QuotaAdjusted,
    QuotaGranted,
    TaskCancelRequested,
    TaskReviewed,
    TaskMatched,
    TaskReadinessChanged,
    TaskSubmitted,
    TaskUnmatchable,
    UsageRecorded,
    make_event,
    utcnow,
)
from shared.events.reasons import NodeMode
from shared.events.reports import AgentRegistered, Heartbeat, TaskFinished, TaskProgress
from shared.events.reports import TaskCheckpointed as CheckpointReport
from shared.events.states import TaskState
from shared.events.subjects import agent_subject, lease_subject, quota_subject, task_subject
from shared.leasing.records import LeaseBook, LeaseRecord, NodeRecord, TaskRecord
from shared.scheduling.model import CardOption, PriorityClass

_report_seq = itertools.count(1)


def _event(cls: Any, subject: str, producer: str, data: dict[str, Any], seq: int = 1) -> Any:
    return make_event(cls, subject=subject, subject_seq=seq, producer=producer, actor=f"service:{producer.split('/')[0]}",
                      data=data)


def submitted(task_id: str, *, project: str = "proj-a", priority_class: str = "core", priority: int = 0,
              gpus: int = 1, estimate_gpu_hours: float = 1.0, heavy: Sequence[str] | None = None,
              checkpoint_minutes: float | None = None, command: Any = ("python", "train.py")) -> TaskSubmitted:
    submission: dict[str, Any] = {
        "name": f"task {task_id}", "project": project, "priority_class": priority_class, "priority": priority,
        "gpus": gpus, "estimate_gpu_hours": estimate_gpu_hours, "profile": "compute", "command": command,
        "env": {"SEED": "1"}, "output_unit": "samples",
    }
    if heavy:
        submission["heavy"] = list(heavy)
    if checkpoint_minutes:
        submission["checkpoint"] = {"interval_minutes": checkpoint_minutes}
    return _event(TaskSubmitted, task_subject(task_id), "intake/test",
                  {"task_id": task_id, "idempotency_key": f"k-{task_id}", "submission": submission})


def readiness(task_id: str, *, ready: bool = True, seq: int = 1) -> TaskReadinessChanged:
    data: dict[str, Any] = {"task_id": task_id, "ready": ready, "ready_fraction": 1.0 if ready else 0.0}
    if not ready:
        data["missing_inputs"] = ["s3://bucket/missing"]
    return _event(TaskReadinessChanged, task_subject(task_id), "readiness/test", data, seq)


def matched(task_id: str, options: Sequence[tuple[str, float, float]] = (("H100", 600.0, 1.0),), *,
            seq: int = 1) -> TaskMatched:
    ranking = [{"card_type": c, "est_runtime_s": r, "est_cost": k} for c, r, k in options]
    return _event(TaskMatched, task_subject(task_id), "matcher/test",
                  {"task_id": task_id, "ranking": ranking, "chosen": options[0][0], "reason": "cheapest adequate"}, seq)


def unmatchable(task_id: str, *, seq: int = 1) -> TaskUnmatchable:
    return _event(TaskUnmatchable, task_subject(task_id), "matcher/test",
                  {"task_id": task_id, "reason": "insufficient_vram", "detail": "no card has enough memory"}, seq)


def reviewed(task_id: str, decision: str = "approve", *, reviewer: str = "user:rita", reason: str = "worth it") -> Any:
    event = _event(TaskReviewed, task_subject(task_id), "console/test",
                   {"task_id": task_id, "decision": decision, "reason": reason})
    return event.model_copy(update={"actor": reviewer})


def cancel_requested(task_id: str, reason: str = "not needed any more") -> TaskCancelRequested:
    return _event(TaskCancelRequested, task_subject(task_id), "intake/test", {"task_id": task_id, "reason": reason}, 2)


def quota_granted(project: str, gpu_hours: float, *, valid_for: timedelta = timedelta(days=30),
                  account_id: str | None = None, valid_from: datetime | None = None, card_type: str | None = None,
                  used_gpu_hours: float = 0.0) -> QuotaGranted:
    start = valid_from or utcnow() - timedelta(days=1)
    account = account_id or f"acct-{project}"
    return _event(QuotaGranted, quota_subject(account), "ledger/test", {
        "account_id": account, "project": project, "gpu_hours": gpu_hours, "valid_from": start,
        "valid_to": start + valid_for, "card_type": card_type, "used_gpu_hours": used_gpu_hours,
    })


def a_ready_task(task_id: str, options: Sequence[tuple[str, float, float]] = (("H100", 600.0, 1.0),),
                 **submission: Any) -> list[Any]:
    """submitted + ready + matched: everything a task needs to be scheduled."""
    return [submitted(task_id, **submission), readiness(task_id), matched(task_id, options)]


# -- agent reports ---------------------------------------------------------------------------------


def _report(cls: Any, agent_id: str, data: dict[str, Any]) -> Any:
    return make_event(cls, subject=agent_subject(agent_id), subject_seq=next(_report_seq),
                      producer=f"agent/{agent_id}", actor=f"agent:{agent_id}", data={"agent_id": agent_id, **data})


def registered(agent_id: str, node_id: str, *, card_type: str = "H100", gpus: int = 2,
               held: Sequence[tuple[str, str, int]] = (), started_at: datetime | None = None) -> AgentRegistered:
    return _report(AgentRegistered, agent_id, {
        "node_id": node_id, "card_type": card_type, "mode": "sim",
        "gpus": [{"index": i, "vram_gb": 80.0} for i in range(gpus)],
        "held_leases": [{"lease_id": l, "task_id": t, "fencing_token": k} for l, t, k in held],
        "started_at": started_at,
    })


def heartbeat(agent_id: str, node_id: str, leases: Sequence[tuple[str, str, int]] = (),
              utilisation: Sequence[float] = ()) -> Heartbeat:
    return _report(Heartbeat, agent_id, {
        "node_id": node_id, "leases": [{"lease_id": l, "task_id": t, "fencing_token": k} for l, t, k in leases],
        "gpus": [{"index": i, "util_pct": u} for i, u in enumerate(utilisation)],
    })


def progress(agent_id: str, lease_id: str, task_id: str, token: int, fraction: float = 0.5) -> TaskProgress:
    return _report(TaskProgress, agent_id,
                   {"lease_id": lease_id, "task_id": task_id, "fencing_token": token, "progress": fraction})


def checkpointed(agent_id: str, lease_id: str, task_id: str, token: int, uri: str) -> CheckpointReport:
    return _report(CheckpointReport, agent_id,
                   {"lease_id": lease_id, "task_id": task_id, "fencing_token": token, "checkpoint_uri": uri})


def finished(agent_id: str, lease_id: str, task_id: str, token: int, exit_code: int | None = 0,
             output_units: float | None = None, error: str | None = None) -> TaskFinished:
    return _report(TaskFinished, agent_id, {"lease_id": lease_id, "task_id": task_id, "fencing_token": token,
                                            "exit_code": exit_code, "output_units": output_units, "error": error})


def usage_recorded(project: str, gpu_seconds: float, lease_id: str = "L1", task_id: str = "T1", *,
                   start: datetime | None = None, end: datetime | None = None, gpus: int | None = None,
                   card_type: str = "H100") -> UsageRecorded:
    return _event(UsageRecorded, lease_subject(lease_id), "ledger/test", {
        "lease_id": lease_id, "task_id": task_id, "project": project, "card_type": card_type, "gpu_seconds": gpu_seconds,
        "cost": 0.0, "from_at": start, "to_at": end, "gpus": gpus,
    }, next(_report_seq))


def quota_adjusted(project: str, delta_gpu_hours: float, account_id: str | None = None, *,
                   used_gpu_hours: float | None = None, valid_to: datetime | None = None) -> QuotaAdjusted:
    account = account_id or f"acct-{project}"
    return _event(QuotaAdjusted, quota_subject(account), "ledger/test", {
        "account_id": account, "project": project, "delta_gpu_hours": delta_gpu_hours, "reason": "top-up",
        "used_gpu_hours": used_gpu_hours, "valid_to": valid_to,
    }, 2)


# -- records (the pure folds' inputs) -------------------------------------------------------------

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def a_task_record(task_id: str = "T1", **changes: Any) -> TaskRecord:
    """A complete task (submitted, ready, matched on H100), leased by default (run 1)."""
    base = TaskRecord(
        task_id, submitted=True, project="proj-a", priority_class=PriorityClass.STANDARD, priority=0, gpus=1,
        heavy=False, checkpoint_interval_s=None, estimate_gpu_hours=1.0, submitted_at=NOW - timedelta(minutes=5),
        command=["python", "train.py"], env={}, data_ready=True, readiness_seq=1, matched=True,
        options=(CardOption("H100", 600.0, 1.0),), match_seq=1, state=TaskState.LEASED, run=1, queued_announced=True,
        updated_at=NOW - timedelta(minutes=1),
    )
    return replace(base, **changes)


def a_lease_record(lease_id: str = "L1", task_id: str = "T1", *, agent_id: str = "a1", node_id: str = "n1",
                   token: int = 7, gpus: Sequence[int] = (0,), **changes: Any) -> LeaseRecord:
    """An active lease of run 1, granted a minute ago, expiring in 29 s."""
    base = LeaseRecord(
        lease_id, task_id, run=1, parts=1, node_id=node_id, agent_id=agent_id, card_type="H100",
        gpu_indices=tuple(gpus), fencing_token=token, granted_at=NOW - timedelta(minutes=1), ttl_s=30.0,
        expires_at=NOW + timedelta(seconds=29), estimated_end=NOW + timedelta(minutes=9),
    )
    return replace(base, **changes)


def a_node_record(node_id: str = "n1", agent_id: str = "a1", gpus: int = 2, **changes: Any) -> NodeRecord:
    base = NodeRecord(node_id, agent_id, "H100", gpus, NodeMode.SIM, registered_at=NOW - timedelta(hours=1),
                      last_seen=NOW - timedelta(seconds=2))
    return replace(base, **changes)


def a_book(*records: TaskRecord | LeaseRecord | NodeRecord) -> LeaseBook:
    """A book of these records (no indexes: the folds scan)."""
    return LeaseBook(
        tasks={r.task_id: r for r in records if isinstance(r, TaskRecord)},
        leases={r.lease_id: r for r in records if isinstance(r, LeaseRecord)},
        nodes={r.node_id: r for r in records if isinstance(r, NodeRecord)},
    )


def a_running_lease_book(**task: Any) -> LeaseBook:
    """Node n1 of agent a1, task T1 leased under L1 (token 7)."""
    return a_book(a_node_record(), a_task_record(**task), a_lease_record())
