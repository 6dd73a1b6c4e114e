"""`RunOutcome`: what an agent said about a finished run; `run_end`: until when its lease is charged.

The report fold builds a `RunOutcome` from a `report.finished` (after `plausibility.judge_success`), the
lease verbs (`work.LeaseWork.end_lease`) write it into `task.succeeded` / `task.failed`, and `run_end`
bounds the agent's own finish time by what Redis and the dispatcher saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.events.reasons import SuccessFlag
from shared.leasing.records import LeaseRecord


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What the agent said about a finished run (`report.finished` only)."""

    exit_code: int | None = None
    output_units: float | None = None
    error: str | None = None
    finished_at: datetime | None = None  # when the agent saw the run end (the report's `occurred_at`)
    # a success judged by `plausibility.judge_success`: what is not taken at the agent's word
    flags: tuple[SuccessFlag, ...] = ()
    flag_detail: str = ""
    claimed_output_units: float | None = None  # output claimed beyond the policy's bound (then `output_units` is None)

    def succeeded_data(self, task_id: str, lease_id: str) -> dict[str, Any]:
        """`task.succeeded`'s payload for this outcome."""
        data: dict[str, Any] = {"task_id": task_id, "lease_id": lease_id, "output_units": self.output_units}
        if self.flags:
            data |= {"flags": self.flags, "flag_detail": self.flag_detail,
                     "claimed_output_units": self.claimed_output_units}
        return data


def run_end(lease: LeaseRecord, outcome: RunOutcome, now: datetime) -> datetime:
    """When the lease's use of its GPUs ended, as charged (`lease.released`'s `ended_at`): when the
    agent saw the run end — not when its report got through (after an outage, much later) — but no
    earlier than the last report that showed the lease held reached `cf:reports`, and no later than
    now (an agent's clock is not trusted beyond what Redis and the dispatcher saw themselves).
    Without a finish time: now.

    "Reached", not "was applied": a heartbeat sent before the run ended but applied after it (the
    dispatcher behind on `cf:reports`, e.g. after an outage) proves the lease held only until it
    reached the stream. A lease stored before `last_heard_at` existed falls back to its last renewal."""
    if outcome.finished_at is None:
        return now
    return min(now, max(lease.granted_at, lease.last_heard, outcome.finished_at))
