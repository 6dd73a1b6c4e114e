"""The state of everything at a moment, folded from events (pure): what `cardflow audit replay`
shows and what `cardflow audit verify` compares with the live read models.

    state = replay(events)                      # events in archive order
    state.tasks["T1"].state                     # TaskView: the same `evolve` as the console
    state.leases["L9"].ended_at                 # every lease: grant, renewals, revocation, release
    state.usage_by_lease()["L9"]                # exact GPU-seconds and cost from usage.recorded
    state.quota_used_gpu_hours(state.quotas["acct-1"])

- Tasks: `shared.projection.evolve`, unchanged, so replay and the console can never disagree by
  construction, only by what they were fed.
- Leases: `lease.granted` opens, `lease.renewed` moves `renewed_until`, `lease.revoked` marks why
  the dispatcher took it back, `lease.released` ends it, or the `task.succeeded` / `task.failed` that
  carries its release (`shared.events.carried`; any arrival order: a release seen before its grant
  opens the record from its own fields).
- Usage: each `usage.recorded` is a slice of one lease's time (on its own in archives from before, or
  carried by a `usage.batch_recorded`: one per ledger batch and project, a slice per lease, each folded
  as the event it stands for, `shared.events.carried.carried_usage`); its floats are read back as exact
  decimals (`Decimal(str(x))`: the ledger's values have at most 15 significant digits, so this is
  the ledger's number to the last digit). A slice booked to project `unknown` (the lease opened
  before the ledger saw the task) counts for the task's project, as the ledger later books it.
- Quotas: `quota.granted` and `quota.adjusted`; used GPU-hours = the slices of the account's
  project (and card type) cut at the window's edges, like `services.ledger.quotas`.
- Nodes: registered and lost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from shared.events.ledger import UNKNOWN_PROJECT
from shared.events.envelope import Envelope
from shared.projection import told_into_views
from shared.task_view import TaskView

_SECONDS_PER_HOUR = Decimal(3600)


def exact(value: float) -> Decimal:
    """A float from an event as the decimal it was written from."""
    return Decimal(str(value))


@dataclass(frozen=True, slots=True)
class ReplayedLease:
    """One lease as the events tell it."""

    lease_id: str
    task_id: str
    node_id: str | None = None
    agent_id: str | None = None
    card_type: str | None = None
    gpu_indices: tuple[int, ...] = ()
    gpus: int = 0
    fencing_token: int | None = None
    granted_at: datetime | None = None
    granted_event: str | None = None
    borrowed_headroom: bool = False
    renewed_until: datetime | None = None
    renewals: int = 0
    revoke_reason: str | None = None
    ended_at: datetime | None = None
    end_reason: str | None = None
    released_event: str | None = None

    @property
    def is_active(self) -> bool:
        return self.ended_at is None


@dataclass(frozen=True, slots=True)
class UsageSlice:
    """One `usage.recorded`: a lease's GPU time and cost over one interval. `event_id` is the archived event
    that says it (a carried slice's: its carrier's, which says one slice per lease), so (`event_id`,
    `lease_id`) names a slice."""

    event_id: str
    lease_id: str
    task_id: str
    project: str
    card_type: str
    gpu_seconds: Decimal
    cost: Decimal
    gpus: int | None
    from_at: datetime | None
    to_at: datetime


@dataclass(frozen=True, slots=True)
class UsageTotal:
    gpu_seconds: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    slices: int = 0

    def plus(self, piece: UsageSlice) -> UsageTotal:
        return UsageTotal(self.gpu_seconds + piece.gpu_seconds, self.cost + piece.cost, self.slices + 1)


@dataclass(frozen=True, slots=True)
class ReplayedQuota:
    """A quota account: granted hours plus adjustments, its window."""

    account_id: str
    project: str
    card_type: str | None
    gpu_hours: Decimal
    valid_from: datetime
    valid_to: datetime
    granted_event: str
    granted_by: str
    adjustments: int = 0


@dataclass(frozen=True, slots=True)
class ReplayedNode:
    node_id: str
    agent_id: str
    card_type: str
    gpus: int
    registered_at: datetime
    lost_at: datetime | None = None

    @property
    def alive(self) -> bool:
        return self.lost_at is None


@dataclass
class ReplayState:
    """Everything `replay` rebuilt; `events` counts what was folded, `as_of` is the latest time seen."""

    tasks: dict[str, TaskView] = field(default_factory=dict)
    leases: dict[str, ReplayedLease] = field(default_factory=dict)
    usage: list[UsageSlice] = field(default_factory=list)
    quotas: dict[str, ReplayedQuota] = field(default_factory=dict)
    nodes: dict[str, ReplayedNode] = field(default_factory=dict)
    events: int = 0
    as_of: datetime | None = None

    def project_of(self, piece: UsageSlice) -> str:
        """The slice's project; `unknown` resolved through the task's submission, as the ledger does."""
        if piece.project != UNKNOWN_PROJECT:
            return piece.project
        view = self.tasks.get(piece.task_id)
        return view.project if view is not None and view.project else UNKNOWN_PROJECT

    def usage_by_lease(self) -> dict[str, UsageTotal]:
        return _totals(self.usage, lambda piece: piece.lease_id)

    def usage_by_project(self) -> dict[str, UsageTotal]:
        return _totals(self.usage, self.project_of)

    def usage_by_card(self) -> dict[str, UsageTotal]:
        return _totals(self.usage, lambda piece: piece.card_type)

    def usage_by_task(self) -> dict[str, UsageTotal]:
        return _totals(self.usage, lambda piece: piece.task_id)

    def quota_used_gpu_hours(self, quota: ReplayedQuota) -> Decimal:
        """GPU-hours of the account's project (and card type) inside its window, cut at the edges."""
        seconds = Decimal(0)
        for piece in self.usage:
            if self.project_of(piece) != quota.project or (quota.card_type and piece.card_type != quota.card_type):
                continue
            seconds += _inside(piece, quota.valid_from, quota.valid_to)
        return seconds / _SECONDS_PER_HOUR


def _totals(usage: Iterable[UsageSlice], key: Any) -> dict[str, UsageTotal]:
    totals: dict[str, UsageTotal] = {}
    for piece in usage:
        name = key(piece)
        totals[name] = totals.get(name, UsageTotal()).plus(piece)
    return totals


def _inside(piece: UsageSlice, start: datetime, end: datetime) -> Decimal:
    """The slice's GPU-seconds that fall in [start, end); a slice without an interval (events from
    before `from_at` existed) counts whole when it ended inside the window."""
    if piece.from_at is None or piece.gpus is None:
        return piece.gpu_seconds if start <= piece.to_at < end else Decimal(0)
    overlap = min(piece.to_at, end) - max(piece.from_at, start)
    if overlap <= timedelta(0):
        return Decimal(0)
    return piece.gpus * Decimal(overlap // timedelta(microseconds=1)) / Decimal(1_000_000)


# ---- the fold -----------------------------------------------------------------------------------


def replay(events: Iterable[Envelope]) -> ReplayState:
    """Fold `events` (archive order) into a `ReplayState`."""
    state = ReplayState()
    for event in events:
        replay_event(state, event)
    return state


def replay_event(state: ReplayState, event: Envelope) -> None:
    """Fold one event into `state` (in place)."""
    state.events += 1
    if state.as_of is None or event.occurred_at > state.as_of:
        state.as_of = event.occurred_at
    for told in told_into_views(state.tasks, event):  # a batch's usage slices, the event, a run's end's lease end
        applier = _APPLY.get(told.type)
        if applier is not None:
            applier(state, told.data, told)


def _lease(state: ReplayState, lease_id: str, task_id: str) -> ReplayedLease:
    return state.leases.get(lease_id) or ReplayedLease(lease_id=lease_id, task_id=task_id)


def _granted(state: ReplayState, data: Any, event: Envelope) -> None:
    lease = _lease(state, data.lease_id, data.task_id)
    state.leases[data.lease_id] = replace(
        lease, node_id=data.node_id, agent_id=data.agent_id, card_type=data.card_type,
        gpu_indices=tuple(data.gpu_indices), gpus=len(data.gpu_indices), fencing_token=data.fencing_token,
        granted_at=event.occurred_at, granted_event=event.event_id, borrowed_headroom=data.borrowed_headroom,
    )  # fmt: skip


def _renewed(state: ReplayState, data: Any, event: Envelope) -> None:
    lease = _lease(state, data.lease_id, data.task_id)
    until = data.until if lease.renewed_until is None else max(lease.renewed_until, data.until)
    state.leases[data.lease_id] = replace(lease, renewed_until=until, renewals=lease.renewals + data.heartbeats)


def _revoked(state: ReplayState, data: Any, event: Envelope) -> None:
    lease = _lease(state, data.lease_id, data.task_id)
    state.leases[data.lease_id] = replace(lease, revoke_reason=data.reason.value)


def _released(state: ReplayState, data: Any, event: Envelope) -> None:
    lease = _lease(state, data.lease_id, data.task_id)
    state.leases[data.lease_id] = replace(
        lease, node_id=lease.node_id or data.node_id, card_type=lease.card_type or data.card_type,
        gpus=lease.gpus or data.gpus, granted_at=lease.granted_at or data.granted_at,
        ended_at=data.ended_at, end_reason=data.reason.value, released_event=event.event_id,
    )  # fmt: skip


def _usage(state: ReplayState, data: Any, event: Envelope) -> None:
    state.usage.append(
        UsageSlice(
            event_id=event.event_id, lease_id=data.lease_id, task_id=data.task_id, project=data.project,
            card_type=data.card_type, gpu_seconds=exact(data.gpu_seconds), cost=exact(data.cost),
            gpus=data.gpus, from_at=data.from_at, to_at=data.to_at or event.occurred_at,
        )  # fmt: skip
    )


def _quota_granted(state: ReplayState, data: Any, event: Envelope) -> None:
    state.quotas[data.account_id] = ReplayedQuota(
        account_id=data.account_id, project=data.project, card_type=data.card_type, gpu_hours=exact(data.gpu_hours),
        valid_from=data.valid_from, valid_to=data.valid_to, granted_event=event.event_id, granted_by=event.actor,
    )  # fmt: skip


def _quota_adjusted(state: ReplayState, data: Any, event: Envelope) -> None:
    quota = state.quotas.get(data.account_id)
    if quota is None:
        return  # adjusted before its grant was seen: nothing to adjust (verify reports the grant missing)
    state.quotas[data.account_id] = replace(
        quota, gpu_hours=quota.gpu_hours + exact(data.delta_gpu_hours), valid_to=data.valid_to or quota.valid_to,
        adjustments=quota.adjustments + 1,
    )  # fmt: skip


def _node_registered(state: ReplayState, data: Any, event: Envelope) -> None:
    state.nodes[data.node_id] = ReplayedNode(data.node_id, data.agent_id, data.card_type, data.gpus, event.occurred_at)


def _node_lost(state: ReplayState, data: Any, event: Envelope) -> None:
    node = state.nodes.get(data.node_id)
    if node is not None:
        state.nodes[data.node_id] = replace(node, lost_at=event.occurred_at)


_APPLY = {
    "lease.granted": _granted,
    "lease.renewed": _renewed,
    "lease.revoked": _revoked,
    "lease.released": _released,
    "usage.recorded": _usage,
    "quota.granted": _quota_granted,
    "quota.adjusted": _quota_adjusted,
    "node.registered": _node_registered,
    "node.lost": _node_lost,
}
