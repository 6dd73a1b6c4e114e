"""Builders of one task's events as its owning services would emit them (for projection tests).

    story = TaskStory("T1")
    events = [story.submitted(), story.readiness(ready=True), story.matched(), story.queued(),
              story.granted(), story.started(), story.succeeded()]

Each owner (intake, readiness, matcher, dispatcher, ledger) numbers its events per subject from 1,
as its outbox would; the clock advances one second per event. `story.by_owner` keeps each
owner's events in emission order (what a stream guarantees per producer).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.events import Envelope, make_event
from shared.events.subjects import lease_subject, task_subject

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

OWNERS = ("intake", "readiness", "matcher", "dispatcher", "ledger")


def a_submission(**overrides: Any) -> dict[str, Any]:
    """A valid raw submission (schema v1); keyword arguments replace or add fields."""
    body: dict[str, Any] = {
        "name": "train-llm",
        "project": "proj-a",
        "priority_class": "standard",
        "priority": 5,
        "gpus": 2,
        "estimate_gpu_hours": 4,
        "profile": "compute",
        "inputs": ["s3://bucket-a/data/part-0.parquet", {"dataset": "tokens", "version": "3"}],
    }
    body.update(overrides)
    return body


class TaskStory:
    """Events about one task, with gap-free `subject_seq` per (owner, subject)."""

    def __init__(self, task_id: str = "T1", start: datetime = T0) -> None:
        self.task_id = task_id
        self.clock = start
        self._seqs: Counter[tuple[str, str]] = Counter()
        self.by_owner: dict[str, list[Envelope]] = defaultdict(list)
        self._leases = 0

    # ---- plumbing -----------------------------------------------------------------------
    def emit(self, owner: str, event_type: str, data: dict[str, Any], subject: str | None = None) -> Envelope:
        subject = subject or task_subject(self.task_id)
        self._seqs[(owner, subject)] += 1
        self.clock += timedelta(seconds=1)
        event = make_event(
            event_type, subject=subject, subject_seq=self._seqs[(owner, subject)],
            producer=f"{owner}/test", actor=f"service:{owner}", data=data, occurred_at=self.clock,
        )
        self.by_owner[owner].append(event)
        return event

    @property
    def lease_id(self) -> str:
        return f"{self.task_id}-L{self._leases}"

    # ---- intake ---------------------------------------------------------------------------
    def submitted(self, **overrides: Any) -> Envelope:
        submission = a_submission(**overrides)
        key = submission.get("idempotency_key") or f"auto:{self.task_id}"
        return self.emit("intake", "task.submitted", {"task_id": self.task_id, "idempotency_key": key, "submission": submission})

    def rejected(self, *reasons: tuple[str, Any, str]) -> Envelope:
        listed = [{"field": f, "value": v, "problem": p} for f, v, p in reasons] or [
            {"field": "gpus", "value": 0, "problem": "expected a number >= 1"}
        ]
        data = {"task_id": self.task_id, "name": "bad", "project": "proj-a", "reasons": listed}
        return self.emit("intake", "task.rejected", data)

    def cancel_requested(self, reason: str = "") -> Envelope:
        return self.emit("intake", "task.cancel_requested", {"task_id": self.task_id, "reason": reason})

    def flag_cleared(self, reason: str = "checked by hand") -> Envelope:
        return self.emit("intake", "task.flag_cleared", {"task_id": self.task_id, "reason": reason})

    # ---- readiness, matcher ---------------------------------------------------------------
    def readiness(self, ready: bool, missing: tuple[Any, ...] = ("s3://bucket-a/data/part-0.parquet",), fraction: float = 0.5) -> Envelope:
        data = {"task_id": self.task_id, "ready": ready, "missing_inputs": () if ready else missing,
                "ready_fraction": 1.0 if ready else fraction}
        return self.emit("readiness", "task.readiness_changed", data)

    def matched(self, chosen: str = "A100", cost: float = 12.5) -> Envelope:
        ranking = [{"card_type": chosen, "est_runtime_s": 3600.0, "est_cost": cost},
                   {"card_type": "H100-X", "est_runtime_s": 1800.0, "est_cost": cost * 2}]
        data = {"task_id": self.task_id, "ranking": ranking, "chosen": chosen, "reason": "cheapest adequate card"}
        return self.emit("matcher", "task.matched", data)

    def unmatchable(self, reason: str = "insufficient_vram", detail: str = "no card has 200 GB per GPU") -> Envelope:
        return self.emit("matcher", "task.unmatchable", {"task_id": self.task_id, "reason": reason, "detail": detail})

    # ---- dispatcher -----------------------------------------------------------------------
    def queued(self) -> Envelope:
        data = {"task_id": self.task_id, "project": "proj-a", "priority_class": "standard", "priority": 5}
        return self.emit("dispatcher", "task.queued", data)

    def held(self, reason: str = "quota_exhausted", detail: str = "quota of proj-a covers 1 of 4 GPU-hours") -> Envelope:
        return self.emit("dispatcher", "task.held", {"task_id": self.task_id, "reason": reason, "detail": detail})

    def approved(self) -> Envelope:
        return self.emit("dispatcher", "task.approved", {"task_id": self.task_id, "note": "ok"})

    def granted(self, node: str = "n1", card: str = "A100", gpus: tuple[int, ...] = (0, 1), *,
                queued: bool = False, borrowed_headroom: bool = False) -> Envelope:
        """`queued`: the grant carries the task's entry into the queue (no `task.queued` of its own);
        `borrowed_headroom`: a standard filler of the burst headroom."""
        self._leases += 1
        data = {
            "lease_id": self.lease_id, "task_id": self.task_id, "agent_id": f"agent-{node}", "node_id": node,
            "card_type": card, "gpu_indices": gpus, "fencing_token": self._leases, "ttl_s": 30.0,
            "expires_at": self.clock + timedelta(seconds=31), "borrowed_headroom": borrowed_headroom,
        }
        if queued:
            data["queued"] = {"project": "proj-a", "priority_class": "standard", "priority": 5}
        return self.emit("dispatcher", "lease.granted", data, subject=lease_subject(self.lease_id))

    def started(self, node: str = "n1", resumed_from: str | None = None) -> Envelope:
        data = {"task_id": self.task_id, "lease_id": self.lease_id, "node_id": node, "resumed_from": resumed_from}
        return self.emit("dispatcher", "task.started", data)

    def checkpointed(self, progress: float = 0.5) -> Envelope:
        data = {"task_id": self.task_id, "lease_id": self.lease_id, "progress": progress,
                "checkpoint_uri": f"s3://ckpt/{self.task_id}/{progress}"}
        return self.emit("dispatcher", "task.checkpointed", data)

    def succeeded(self, output_units: float | None = 1000.0, flags: tuple[str, ...] = (), detail: str = "",
                  claimed: float | None = None, *, started_on: str | None = None,
                  resumed_from: str | None = None, releasing: bool = False) -> Envelope:
        """`started_on`: the success carries its run's start on that node (no `task.started` of its own);
        `releasing`: it carries its lease's end, `release_facts("succeeded")` (no `lease.released` of its own)."""
        data = {"task_id": self.task_id, "lease_id": self.lease_id, "output_units": output_units}
        if started_on is not None:
            data["started"] = {"node_id": started_on, "resumed_from": resumed_from}
        if releasing:
            data["released"] = self.release_facts("succeeded")
        if flags:
            data |= {"flags": flags, "flag_detail": detail, "claimed_output_units": claimed}
        return self.emit("dispatcher", "task.succeeded", data)

    def failed(self, error: str = "CUDA out of memory", exit_code: int | None = 1, *,
               started_on: str | None = None, releasing: bool = False) -> Envelope:
        """`started_on`: the failure carries its run's start on that node (no `task.started` of its own);
        `releasing`: it carries its lease's end, `release_facts("failed")` (no `lease.released` of its own)."""
        data = {"task_id": self.task_id, "lease_id": self.lease_id, "error": error, "exit_code": exit_code}
        if started_on is not None:
            data["started"] = {"node_id": started_on, "resumed_from": None}
        if releasing:
            data["released"] = self.release_facts("failed")
        return self.emit("dispatcher", "task.failed", data)

    def released(self, reason: str = "succeeded") -> Envelope:
        """The lease's end as an event of its own (`release_facts(reason)`)."""
        data = {"lease_id": self.lease_id, "task_id": self.task_id, **self.release_facts(reason)}
        return self.emit("dispatcher", "lease.released", data, subject=lease_subject(self.lease_id))

    def release_facts(self, reason: str) -> dict[str, Any]:
        """How the current lease ended: granted at T0 on node n1, two A100 GPUs, held one hour."""
        return {"node_id": "n1", "card_type": "A100", "gpus": 2, "granted_at": T0, "ended_at": T0 + timedelta(hours=1),
                "reason": reason}

    def requeued(self, reason: str = "preempted", resume_from: str | None = "s3://ckpt/T1/0.5") -> Envelope:
        data = {"task_id": self.task_id, "lease_id": self.lease_id, "reason": reason, "resume_from": resume_from}
        return self.emit("dispatcher", "task.requeued", data)

    def cancelled(self, reason: str = "") -> Envelope:
        data = {"task_id": self.task_id, "lease_id": None, "reason": reason}
        return self.emit("dispatcher", "task.cancelled", data)

    # ---- ledger -------------------------------------------------------------------------------
    def usage(self, gpu_seconds: float = 3600.0, cost: float = 3.0) -> Envelope:
        data = {"lease_id": self.lease_id, "task_id": self.task_id, "project": "proj-a", "card_type": "A100",
                "gpu_seconds": gpu_seconds, "cost": cost}
        return self.emit("ledger", "usage.recorded", data, subject=lease_subject(self.lease_id))
