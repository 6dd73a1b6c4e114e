"""The workload a simulation replays: tasks as read from a trace, before and after defaults.

Importers produce `TraceTask`s whose optional fields are `None` when the trace does not say
(class, estimate, readiness, checkpointing). `synthesize` may fill them; `resolve` applies the
documented defaults so the engine only ever sees fully specified `SimTask`s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from shared.scheduling.model import PriorityClass, Profile


@dataclass(frozen=True, slots=True)
class TraceTask:
    """One task as the trace describes it; `None` means "the trace does not say"."""

    task_id: str
    submit_s: float
    gpus: int
    duration_s: float  # true run time on `trace_card` (or on any card when `trace_card` is None)
    project: str = "default"
    estimate_s: float | None = None  # the user's estimate, same card as duration
    priority_class: PriorityClass | None = None
    priority: int = 0
    card_types: tuple[str, ...] = ()  # allowed card types; empty = any card in the cluster
    trace_card: str | None = None  # card the duration was measured on; None = card-independent
    min_vram_gb: float = 0.0
    ready_s: float | None = None  # when the task's input data is ready
    checkpoint_interval_s: float | None = None
    profile: Profile = Profile.BALANCED
    heavy: bool = False
    deadline_s: float | None = None  # finish-by time (the cardflow order puts earlier deadlines first in a class)


@dataclass(frozen=True, slots=True)
class SimTask:
    """A fully specified task: what the engine replays."""

    task_id: str
    submit_s: float
    gpus: int
    duration_s: float
    estimate_s: float
    priority_class: PriorityClass
    priority: int
    project: str
    card_types: tuple[str, ...]
    trace_card: str | None
    min_vram_gb: float
    ready_s: float
    checkpoint_interval_s: float | None
    profile: Profile
    heavy: bool
    deadline_s: float | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """Tasks of one trace plus what the importer wants to tell the reader (skips, roundings)."""

    name: str
    tasks: tuple[TraceTask, ...]
    notes: dict[str, Any] = field(default_factory=dict)
    cluster_nodes: tuple[tuple[str, str, int], ...] = ()  # (node_id, card_type, gpus) if the trace has a node list

    def with_tasks(self, tasks: Iterable[TraceTask], **notes: Any) -> Trace:
        """A copy with other tasks and extra notes."""
        return replace(self, tasks=tuple(tasks), notes={**self.notes, **notes})


DEFAULT_CLASS = PriorityClass.STANDARD


def resolve(task: TraceTask) -> SimTask:
    """Apply the defaults for what the trace leaves open: estimate = duration, ready = submit,
    class = standard, no checkpointing."""
    return SimTask(
        task_id=task.task_id,
        submit_s=task.submit_s,
        gpus=task.gpus,
        duration_s=task.duration_s,
        estimate_s=task.duration_s if task.estimate_s is None else task.estimate_s,
        priority_class=task.priority_class or DEFAULT_CLASS,
        priority=task.priority,
        project=task.project,
        card_types=task.card_types,
        trace_card=task.trace_card,
        min_vram_gb=task.min_vram_gb,
        ready_s=task.submit_s if task.ready_s is None else max(task.ready_s, task.submit_s),
        checkpoint_interval_s=task.checkpoint_interval_s,
        profile=task.profile,
        heavy=task.heavy,
        deadline_s=task.deadline_s,
    )


def limit_tasks(tasks: Iterable[TraceTask], limit: int | None) -> list[TraceTask]:
    """The first `limit` tasks in submission order (all when `limit` is None)."""
    ordered = sorted(tasks, key=lambda t: (t.submit_s, t.task_id))
    return ordered if limit is None else ordered[:limit]
