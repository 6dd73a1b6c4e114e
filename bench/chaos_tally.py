"""What a chaos run did to its tasks, counted from its logs (pure; `bench/chaos.py` prints it).

    counts = tally_runs(events, reports, names)   # cf:events and cf:reports, as read from Redis

Delivery is at least once: an outbox relay that dies (or whose Redis dies) after its XADD and before
it marks the rows sent publishes the same events again, with the same event ids, and every consumer
de-duplicates by that id. So the count is over DISTINCT event ids; the copies are a figure of their
own (`delivered_twice`), never "run twice".

A task counts as **run twice** when its work was done more than once:

- more than one of its leases ended with a clean finish reported by the agent (`report.finished`,
  exit code 0, not a stop the dispatcher asked for) — whether or not the dispatcher accepted the
  report: a finish refused because the lease had expired meanwhile is still a finished run; or
- more than one distinct `task.succeeded` names it; or
- a lease was granted for it after its first success.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shared.events import Envelope
from shared.leasing.lease_end import succeeded

FORGED_LEASE = "forged"
"""The lease id `bench/chaos.py` puts in the successes it forges (never an honest one)."""


@dataclass(frozen=True)
class RunCounts:
    """The valid tasks' outcomes (by the submission names the run used)."""

    submitted: dict[str, str]  # task id -> name
    succeeded: frozenset[str]
    failed: frozenset[str]
    ended: frozenset[str]
    run_twice: tuple[str, ...]
    delivered_twice: dict[str, int] = field(default_factory=dict)  # event type -> copies beyond the first


def distinct(events: Iterable[Envelope]) -> list[Envelope]:
    """Each event once (its first copy), in log order."""
    seen: dict[str, Envelope] = {}
    for event in events:
        seen.setdefault(event.event_id, event)
    return list(seen.values())


def delivered_twice(events: Sequence[Envelope]) -> dict[str, int]:
    """Copies of an already-published event (same event id), by event type."""
    copies = Counter(event.event_id for event in events)
    extra: Counter[str] = Counter()
    first = {event.event_id: event for event in reversed(events)}
    for event_id, count in copies.items():
        if count > 1:
            extra[first[event_id].type] += count - 1
    return dict(extra)


def honest_successes(events: Iterable[Envelope]) -> list[Envelope]:
    """`task.succeeded` events written by the dispatcher (not the run's own forgeries)."""
    return [e for e in events if e.type == "task.succeeded" and e.producer.startswith("dispatcher")
            and e.data.lease_id != FORGED_LEASE]  # fmt: skip


def cleanly_finished_leases(reports: Iterable[Envelope]) -> dict[str, set[str]]:
    """Task id -> the leases whose run the agent reported finished cleanly (distinct report ids)."""
    finished: dict[str, set[str]] = {}
    for report in {r.event_id: r for r in reports}.values():
        if report.type == "report.finished" and succeeded(report.data.exit_code, report.data.error):
            finished.setdefault(report.data.task_id, set()).add(report.data.lease_id)
    return finished


def tally_runs(events: Sequence[Envelope], reports: Sequence[Envelope], names: set[str]) -> RunCounts:
    """Outcomes of the tasks submitted under `names` (see the module docstring)."""
    unique = distinct(events)
    submitted = {e.data.task_id: e.data.submission.name for e in unique
                 if e.type == "task.submitted" and e.data.submission.name in names}  # fmt: skip
    successes = honest_successes(unique)
    success_count = Counter(e.data.task_id for e in successes)
    first_success_at = {}
    for event in successes:
        first_success_at.setdefault(event.data.task_id, event.occurred_at)
    granted_after_success = {
        e.data.task_id for e in unique
        if e.type == "lease.granted" and e.data.task_id in first_success_at and e.occurred_at > first_success_at[e.data.task_id]
    }  # fmt: skip
    finished_runs = cleanly_finished_leases(reports)
    failed = {e.data.task_id for e in unique if e.type == "task.failed"}
    cancelled = {e.data.task_id for e in unique if e.type == "task.cancelled"}
    twice = tuple(
        task_id for task_id in submitted
        if success_count[task_id] > 1 or task_id in granted_after_success or len(finished_runs.get(task_id, ())) > 1
    )  # fmt: skip
    return RunCounts(
        submitted=submitted,
        succeeded=frozenset(t for t in submitted if success_count[t]),
        failed=frozenset(t for t in submitted if t in failed),
        ended=frozenset(t for t in submitted if success_count[t] or t in failed or t in cancelled),
        run_twice=twice,
        delivered_twice=delivered_twice(events),
    )


def story_of(task_id: str, name: str, events: Sequence[Envelope], reports: Sequence[Envelope]) -> str:
    """One line: the task's lease events, outcomes and finish reports in time order (each event once;
    `xN` marks an event delivered N times)."""
    kinds = {"lease.granted", "lease.expired", "lease.released", "lease.revoked", "task.requeued", "task.succeeded"}
    copies = Counter(e.event_id for e in events)
    steps = []
    for e in distinct(events):
        if e.type in kinds and getattr(e.data, "task_id", None) == task_id:
            why = getattr(e.data, "reason", "")
            lease = getattr(e.data, "lease_id", "")
            times = f" x{copies[e.event_id]}" if copies[e.event_id] > 1 else ""
            steps.append((e.occurred_at, f"{e.type}{f' ({why})' if why else ''} {lease[-6:]}{times}"))
    for r in {r.event_id: r for r in reports}.values():
        if r.type == "report.finished" and r.data.task_id == task_id:
            steps.append((r.occurred_at, f"agent finished {r.data.lease_id[-6:]} exit {r.data.exit_code}"
                                         f"{f' ({r.data.error[:40]})' if r.data.error else ''}"))
    steps.sort(key=lambda step: step[0])
    return f"{name} ({task_id}): " + "; ".join(f"{at:%H:%M:%S.%f}"[:-3] + f" {what}" for at, what in steps)
