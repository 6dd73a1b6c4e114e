"""Mutable per-task and per-lease state of a running simulation (the engine's bookkeeping)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from shared.scheduling.model import CardOption, Placement, QueuedTask
from shared.simulation.workload import SimTask


class EventKind(IntEnum):
    """Event kinds; at equal times they are handled in this order."""

    FINISH = 0
    CHECKPOINT = 1  # before preemption: a checkpoint at the same instant saves the progress
    QUOTA_EXPIRY = 2
    PREEMPT = 3
    READY = 4
    ARRIVAL = 5
    QUOTA_START = 6
    REVISIT = 7  # the last plan asked to be revisited (a core task's preemption grace ends)


@dataclass(slots=True)
class LeaseRun:
    """A running task: where, since when, and when it really ends."""

    lease_ids: tuple[str, ...]  # one per node the task spans
    card_type: str
    placements: tuple[Placement, ...]
    started_s: float
    work_start_s: float  # max(start, data ready): readiness-blind starts hold GPUs idle until then
    end_s: float  # true end on the granted card
    estimated_end: float  # what the scheduling core believes
    speed: float  # seconds on the granted card per second on the trace card
    charged_gpu_hours: float  # estimate charged to the project's quota at grant
    last_checkpoint_s: float | None = None
    borrowed_headroom: bool = False  # standard work granted on headroom GPUs as a filler (`Grant.borrowed_headroom`)


@dataclass(slots=True)
class TaskRun:
    """A task's life in the simulation."""

    task: SimTask
    base_options: tuple[CardOption, ...]  # options for the full estimate
    remaining_work_s: float  # true work left, in trace-card seconds
    remaining_estimate_s: float  # estimate of the work left, in trace-card seconds
    data_ready: bool = False
    view: QueuedTask | None = None  # set while queued
    lease: LeaseRun | None = None
    work_began_s: float | None = None
    cut_off: bool = False
    attempts: int = 0  # leases granted so far (names each lease uniquely)

    @property
    def gpus(self) -> int:
        return self.task.gpus

    def scaled_options(self) -> tuple[CardOption, ...]:
        """Options for the work still left (the whole estimate until a preemption)."""
        share = self.remaining_estimate_s / self.task.estimate_s if self.task.estimate_s > 0 else 1.0
        if share >= 1.0:
            return self.base_options
        return tuple(CardOption(o.card_type, o.runtime_s * share, o.cost * share) for o in self.base_options)

    def queued_view(self) -> QueuedTask:
        """The task as the scheduling core sees it in the queue."""
        task = self.task
        return QueuedTask(
            task_id=task.task_id,
            project=task.project,
            priority_class=task.priority_class,
            priority=task.priority,
            gpus=task.gpus,
            submitted_at=task.submit_s,
            options=self.scaled_options(),
            data_ready=self.data_ready,
            heavy=task.heavy,
            checkpoint_interval_s=task.checkpoint_interval_s,
            deadline=task.deadline_s,
        )
