"""What the demo's live view knows, folded from `cf:events` (pure: `board.apply(event)`).

- tasks: the same projection as the console (`shared.projection.evolve`);
- fleet: registered nodes (card type, GPUs) and the GPUs active leases hold right now;
- leases: GPU-seconds of every ended lease (`lease.released`, or the release a run's end carries), priced with the card catalog —
  what the ledger should have charged;
- ledger: what the ledger did charge (`usage.recorded`), per project.
"""

from __future__ import annotations

import math

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shared.cards import Catalog
from shared.events import (
    Envelope,
    LeaseGrantedData,
    LeaseReleasedData,
    NodeLostData,
    NodeRegisteredData,
    TaskState,
    UnmatchableReason,
    UsageRecordedData,
)
from shared.events.ledger import UNKNOWN_PROJECT
from shared.leasing.records import PERSON_HOLDS
from shared.projection import told_into_views
from shared.task_view import TaskView

_SECONDS_PER_HOUR = 3600.0
PASSING_UNMATCHABLE = frozenset({UnmatchableReason.NO_FLEET.value})
"""Unmatchable reasons that pass by themselves (no node registered yet); any other is for good."""
PERSON_HOLD_REASONS = frozenset(reason.value for reason in PERSON_HOLDS)
"""Holds only a person lifts (an operator's hold, a task reclaimed for idleness again and again)."""


@dataclass(frozen=True)
class Node:
    node_id: str
    agent_id: str
    card_type: str
    gpus: int
    lost: bool = False


@dataclass(frozen=True)
class ActiveLease:
    node_id: str
    card_type: str
    gpus: int


@dataclass
class Money:
    """GPU-seconds and their cost."""

    gpu_seconds: float = 0.0
    cost: float = 0.0

    def add(self, gpu_seconds: float, cost: float) -> None:
        self.gpu_seconds += gpu_seconds
        self.cost += cost

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / _SECONDS_PER_HOUR


@dataclass
class Board:
    """The demo's read model. `apply` every event of `cf:events` in stream order."""

    catalog: Catalog
    tasks: dict[str, TaskView] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    active: dict[str, ActiveLease] = field(default_factory=dict)
    leased: dict[str, Money] = field(default_factory=dict)  # per project, from lease.released
    charged: dict[str, Money] = field(default_factory=dict)  # per project, from usage.recorded (carried ones too)
    events: int = 0
    deadletters: int = 0

    def apply(self, event: Envelope) -> None:
        self.events += 1
        for told in told_into_views(self.tasks, event):  # a batch's usage slices, the event, a run's end's lease end
            handler = _FLEET_AND_MONEY.get(told.type)
            if handler is not None:
                handler(self, told.data)

    def apply_all(self, events: Iterable[Envelope]) -> None:
        for event in events:
            self.apply(event)

    # ---- questions the view asks ---------------------------------------------------------------

    def counts(self) -> Counter[TaskState]:
        return Counter(view.state for view in self.tasks.values())

    def recent(self, limit: int) -> list[TaskView]:
        """The tasks that changed last, newest first."""
        dated = [v for v in self.tasks.values() if v.last_event_at is not None]
        return sorted(dated, key=lambda v: v.last_event_at, reverse=True)[:limit]  # type: ignore[arg-type,return-value]

    def fleet(self) -> dict[str, tuple[int, int]]:
        """Per card type: (GPUs leased now, GPUs registered)."""
        usage: dict[str, list[int]] = {}
        for node in self.nodes.values():
            if not node.lost:
                usage.setdefault(node.card_type, [0, 0])[1] += node.gpus
        for lease in self.active.values():
            usage.setdefault(lease.card_type, [0, 0])[0] += lease.gpus
        return {card: (busy, total) for card, (busy, total) in sorted(usage.items())}

    def views_of(self, keys: Iterable[str]) -> list[TaskView]:
        wanted = set(keys)
        return [v for v in self.tasks.values() if v.idempotency_key in wanted]

    def is_settled(self, keys: Iterable[str]) -> bool:
        """True when every task with one of these idempotency keys is known and terminal, or
        unmatchable for a reason that will not pass by itself (e.g. no card has enough VRAM), or held
        for a person (e.g. reclaimed for idle GPUs again and again)."""
        wanted = set(keys)
        views = self.views_of(wanted)
        return len({v.idempotency_key for v in views}) == len(wanted) and all(map(is_settled, views))

    def ledger_caught_up(self) -> bool:
        """True when some lease has ended and the ledger charged every project the GPU-seconds its ended leases
        held (to float rounding: the ledger counts whole microseconds exactly, the board adds floats)."""
        if not self.leased:
            return False
        return all(math.isclose(self.charged.get(project, Money()).gpu_seconds, held.gpu_seconds, rel_tol=1e-9,
                                abs_tol=1e-6) for project, held in self.leased.items())  # fmt: skip

    def totals(self, money: dict[str, Money]) -> Money:
        total = Money()
        for part in money.values():
            total.add(part.gpu_seconds, part.cost)
        return total

    def project_of(self, task_id: str) -> str:
        view = self.tasks.get(task_id)
        return (view.project if view else None) or "?"


def is_settled(view: TaskView) -> bool:
    if view.state is TaskState.UNMATCHABLE:
        return view.reason not in PASSING_UNMATCHABLE
    if view.state is TaskState.HELD:
        return view.reason in PERSON_HOLD_REASONS
    return view.state.is_terminal


def _registered(board: Board, data: NodeRegisteredData) -> None:
    board.nodes[data.node_id] = Node(data.node_id, data.agent_id, data.card_type, data.gpus)


def _lost(board: Board, data: NodeLostData) -> None:
    node = board.nodes.get(data.node_id)
    if node is not None:
        board.nodes[node.node_id] = Node(node.node_id, node.agent_id, node.card_type, node.gpus, lost=True)


def _granted(board: Board, data: LeaseGrantedData) -> None:
    board.active[data.lease_id] = ActiveLease(data.node_id, data.card_type, len(data.gpu_indices))


def _released(board: Board, data: LeaseReleasedData) -> None:
    board.active.pop(data.lease_id, None)
    seconds = (data.ended_at - data.granted_at).total_seconds() * data.gpus
    price = board.catalog.card(data.card_type).price_per_gpu_hour if data.card_type in board.catalog else 0.0
    project = board.project_of(data.task_id)
    board.leased.setdefault(project, Money()).add(seconds, seconds * price / _SECONDS_PER_HOUR)


def _usage(board: Board, data: UsageRecordedData) -> None:
    project = board.project_of(data.task_id) if data.project == UNKNOWN_PROJECT else data.project  # as the ledger books it
    board.charged.setdefault(project, Money()).add(data.gpu_seconds, data.cost)


_FLEET_AND_MONEY: dict[str, Callable[[Board, Any], None]] = {
    "node.registered": _registered,
    "node.lost": _lost,
    "lease.granted": _granted,
    "lease.released": _released,
    "usage.recorded": _usage,
}
