"""One batch of `cf:events`, folded in stream order into the ledger's effects (pure).

- `task.submitted` -> the task's project, name and output unit (`ledger.tasks`);
- `lease.granted` -> a lease account opens at the event's `occurred_at`, priced from the catalog,
  with the node's `time_scale` (a simulated agent's clock speed; the match review scales by it);
- `lease.renewed` -> the lease is accounted up to its `heard_at` (when the heartbeat reached
  `cf:reports`; the event's `occurred_at` in events without it) (with the idle GPU-seconds
  the dispatcher counted since the previous one, and the mean GPU utilisation it reported:
  `accounting.with_utilisation`);
- `lease.released` -> accounted up to `ended_at` and closed, likewise (opened from its own data, at
  time scale 1, if the grant was never seen), with its run's `last_checkpoint_at` (a round's
  preemption losses count from there); a release carried by a `task.succeeded` / `task.failed`
  (`released`) likewise, just before its carrier (`shared.events.carried.with_carried_releases`);
- `task.checkpointed` / `task.succeeded` with `output_units` -> the output of that run (lease),
  the highest value reported wins; a `task.succeeded` with `flags` (the dispatcher did not take it
  at the agent's word) makes that run's output FLAGGED instead (`ledger.flagged_output`): kept and
  shown, counted in no total;
- `task.flag_cleared` -> a person checked a flagged run's output: the ledger moves it into the counted
  output (once per run, counted at the moment of clearing; a claim refused as out of bounds stays
  uncounted);
- `task.matched` -> the task's latest match (ranked card types and estimates) for the match review;
- `node.registered` / `node.lost` -> the node's alive spans (`ledger.node_spans`, `services.ledger.capacity`),
  which a round's capacity counts.

A lease's increments in one batch are joined into one (`accounting.joined`: consecutive, so the sums are
the same), a row of `ledger.usage_increments`; the batch's increments of one project are announced by one
`usage.batch_recorded` (`usage_emissions`), which carries a `usage.recorded` slice per lease — one event,
one delivery per consumer and one dispatcher inbox row per batch and project instead of one per lease per
renewal or end. `BatchEffects.emissions` holds one per project, in the order the batch first accounted
it; an increment's row names the event of its lease's project (`store.save_effects`). Each change
of a run's counted output (a rise, a flag, a clearing) becomes a row of `ledger.output_increments`
(`services.ledger.outputs`), over the runs' rows the handler loaded and locked.

Which events need an inbox row: `is_repeatable` (below) says, per type, why folding an event again
over the state its first delivery left changes nothing; only the others are recorded in the inbox.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from shared.events.emission import Emission
from services.ledger.accounting import (
    Increment,
    LeaseAccount,
    advance,
    close,
    joined,
    price_of,
    with_idle,
    with_utilisation,
)
from services.ledger.capacity import AliveSpan, NodeSpanEffects, NodeSpanFold
from services.ledger.outputs import ClearedFlag, FlaggedOutput, OutputEffects, OutputFold, OutputSnapshot, Run
from shared.cards import Catalog
from shared.events import (
    Envelope,
    LeaseGranted,
    LeaseReleased,
    LeaseRenewed,
    LeaseUsageSlice,
    NodeLost,
    NodeRegistered,
    TaskCheckpointed,
    TaskFailed,
    TaskFlagCleared,
    TaskMatched,
    TaskSubmitted,
    TaskSucceeded,
    UsageBatchRecorded,
    UsageBatchRecordedData,
)
from shared.events.carried import carries_release, with_carried_releases
from shared.events.ledger import UNKNOWN_PROJECT
from shared.events.subjects import usage_subject
from shared.logging import get_logger

RELEVANT_TYPES: tuple[type[Envelope], ...] = (
    TaskSubmitted, LeaseGranted, LeaseRenewed, LeaseReleased, TaskCheckpointed, TaskSucceeded, TaskFailed,
    TaskMatched, TaskFlagCleared, NodeRegistered, NodeLost,
)  # fmt: skip

log = get_logger(__name__)

Step = tuple[LeaseAccount, Increment | None]


class UnpricedCardError(LookupError):
    """A lease on a card type the catalog has no price for (the event goes to the dead-letter stream)."""


@dataclass(frozen=True, slots=True)
class TaskInfo:
    task_id: str
    project: str
    name: str
    output_unit: str | None
    submitted_at: datetime
    scenario: str | None = None
    profile: str | None = None
    gpus: int | None = None


SCENARIO_LABEL = "scenario"
"""The submission label rounds group spend by."""


@dataclass(frozen=True, slots=True)
class TaskMatch:
    """A task's latest match: the ranked card types with the matcher's estimates."""

    task_id: str
    chosen: str
    ranking: list[dict[str, Any]]
    oversized: bool
    reason: str
    catalog_version: str | None
    matched_at: datetime
    event_id: str
    subject_seq: int = 0
    """The matcher's number of this event of the task: orders two matches of the same instant."""

    @property
    def order(self) -> tuple[datetime, int]:
        """Which match is the latest: the greatest `matched_at`, then `subject_seq`."""
        return self.matched_at, self.subject_seq


def renewed_until(event: LeaseRenewed) -> datetime:
    """How far a renewal accounts its lease: when its heartbeat reached `cf:reports` (`heard_at`), not when
    the dispatcher applied it (`occurred_at`, later if it was behind) — a finished run's `ended_at` is never
    earlier than `heard_at` (`shared.leasing.work.run_end`), so the close never finds the lease accounted
    beyond its end. Events written before `heard_at` existed: their `occurred_at`, as then."""
    return event.data.heard_at or event.occurred_at


def is_repeatable(event: Envelope) -> bool:
    """Whether folding `event` again, over the stored state its first delivery left (and whatever
    later events did to it), changes nothing — so it needs no inbox row. Per type:

    - `task.submitted`: the task row is inserted `ON CONFLICT DO NOTHING`; the project it gives leases
      of an unknown task was already given (no lease of that task has `UNKNOWN_PROJECT` any more).
    - `lease.granted`: opens the account only if no row of the lease exists; the first delivery left one,
      and no ledger row is ever deleted.
    - `lease.renewed`: accounts up to `renewed_until` only if that is after `accounted_until`, which
      the first delivery moved to at least `renewed_until` (it only grows) or the lease was closed; no
      increment means no idle or utilisation share either (`accounting.advance`, `with_idle`). (If the
      lease had no row at the first delivery, that delivery changed nothing: applying it later is its
      first effect, and a lease's increments add up to its whole cost however they are split.)
    - `lease.released`: closes the account; a closed account is never changed (`accounting.close`).
      So is a release carried by a `task.succeeded` or `task.failed`.
    - `task.failed`: nothing of it is folded but the release it may carry.
    - `task.succeeded` without flags: the run's output is raised to the highest value reported over the
      loaded row, which the first delivery left at least that high and final: no rise, so no output
      increment, and the same row; no flagged success exists for that run (a lease ends with one success).
    - `task.matched`: the stored match is replaced only by a later one, by (`matched_at`, the matcher's
      `subject_seq`) — a total order of one task's matches; the first delivery left this match or a
      later one, so a second writes nothing (`store._save_matches`).

    Not repeatable, so recorded in the inbox: `task.checkpointed` (after its run's success was flagged,
    a second delivery would count output again), a flagged `task.succeeded` (after its flag was cleared,
    a second delivery would move the counted output back out), `task.flag_cleared` (after a later
    flagged run, a second delivery would clear that one too), `node.registered` (after the node's loss, a
    second delivery would open a span again) and `node.lost` (after the node's next registration, a second
    delivery would close that span).

    Two deliveries at once (a handler slower than the claimer's idle time) are serialised by the lease
    rows' and the runs' output rows' locks, and a lease or a run's output row inserted by both is refused
    to the second (`store.save_effects`)."""
    if isinstance(event, TaskSucceeded):
        return not event.data.flags
    return isinstance(event, (TaskSubmitted, LeaseGranted, LeaseRenewed, LeaseReleased, TaskFailed, TaskMatched))


@dataclass
class BatchEffects:
    leases: dict[str, LeaseAccount] = field(default_factory=dict)
    opened: set[str] = field(default_factory=set)
    """Ids of the leases this batch opened (no row was loaded): written only if still absent."""
    increments: list[tuple[Increment, LeaseAccount]] = field(default_factory=list)
    """One per lease the batch accounted (its increments joined), with the account as it stood after."""
    emissions: list[Emission] = field(default_factory=list)
    """The `usage.batch_recorded` of each project in `increments`."""
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    output: OutputEffects = field(default_factory=OutputEffects)
    """Runs' counted output, flagged and cleared runs, and the output increments (`outputs.OutputFold`)."""
    matches: dict[str, TaskMatch] = field(default_factory=dict)
    nodes: NodeSpanEffects = field(default_factory=NodeSpanEffects)
    """Nodes' alive spans opened and closed (`capacity.NodeSpanFold`)."""


class _Fold:
    def __init__(self, catalog: Catalog, leases: Mapping[str, LeaseAccount], projects: Mapping[str, str],
                 output: OutputSnapshot, open_spans: Mapping[str, AliveSpan]) -> None:  # fmt: skip
        self.catalog = catalog
        self.leases = dict(leases)
        self.projects = dict(projects)
        self.effects = BatchEffects()
        self.accounted: dict[str, tuple[Increment, LeaseAccount]] = {}  # by lease, in the order first accounted
        self.outputs = OutputFold(output, self.effects.output, lambda lease_id: self.card_of(lease_id, output))
        self.nodes = NodeSpanFold(open_spans, self.effects.nodes)

    def apply(self, event: Envelope) -> None:
        if isinstance(event, TaskSubmitted):
            self.submitted(event)
        elif isinstance(event, LeaseGranted):
            self.granted(event)
        elif isinstance(event, LeaseRenewed):
            self.step(event.data.lease_id, event, lambda lease: advance(lease, renewed_until(event)))
        elif isinstance(event, LeaseReleased):
            self.released(event)
        elif isinstance(event, (TaskCheckpointed, TaskSucceeded)):
            self.output(event)
        elif isinstance(event, TaskMatched):
            self.matched(event)
        elif isinstance(event, TaskFlagCleared):
            self.outputs.clear(ClearedFlag(event.data.task_id, event.occurred_at, event.actor, event.data.reason,
                                           event.event_id))  # fmt: skip
        elif isinstance(event, NodeRegistered):
            data = event.data
            self.nodes.registered(data.node_id, data.card_type, data.gpus, event.occurred_at, event.event_id)
        elif isinstance(event, NodeLost):
            self.nodes.lost(event.data.node_id, event.occurred_at, event.event_id)

    def submitted(self, event: TaskSubmitted) -> None:
        submission = event.data.submission
        task = TaskInfo(
            event.data.task_id, submission.project, submission.name, submission.output_unit, event.occurred_at,
            scenario=submission.labels.get(SCENARIO_LABEL), profile=submission.profile.value, gpus=submission.gpus,
        )  # fmt: skip
        self.effects.tasks[task.task_id] = task
        self.projects[task.task_id] = task.project
        for lease in [lease for lease in self.leases.values() if lease.task_id == task.task_id]:
            if lease.project == UNKNOWN_PROJECT:
                self.keep(replace(lease, project=task.project))

    def granted(self, event: LeaseGranted) -> None:
        data = event.data
        if data.lease_id not in self.leases:
            self.open(data.lease_id, data.task_id, data.card_type, len(data.gpu_indices), event.occurred_at,
                      data.time_scale)

    def released(self, event: LeaseReleased) -> None:
        data = event.data
        if data.lease_id not in self.leases:
            self.open(data.lease_id, data.task_id, data.card_type, data.gpus, data.granted_at)
        self.step(data.lease_id, event,
                  lambda lease: close(lease, data.ended_at, data.reason.value, data.last_checkpoint_at))

    def output(self, event: TaskCheckpointed | TaskSucceeded) -> None:
        data = event.data
        if isinstance(event, TaskSucceeded) and event.data.flags:
            self.outputs.flag(FlaggedOutput(
                data.task_id, data.lease_id, _decimal(data.output_units), _decimal(data.claimed_output_units),
                tuple(flag.value for flag in data.flags), data.flag_detail, event.occurred_at, event.event_id,
            ))  # fmt: skip
        elif data.output_units is not None and data.lease_id is not None:
            self.outputs.report((data.task_id, data.lease_id), Decimal(str(data.output_units)),
                                isinstance(event, TaskSucceeded), event.occurred_at, event.event_id)  # fmt: skip

    def card_of(self, lease_id: str, output: OutputSnapshot) -> str | None:
        lease = self.leases.get(lease_id)
        return lease.card_type if lease is not None else output.cards.get(lease_id)

    def matched(self, event: TaskMatched) -> None:
        data = event.data
        before = self.effects.matches.get(data.task_id)
        if before is not None and before.order > (event.occurred_at, event.subject_seq):
            return
        ranking = [option.model_dump(mode="json") for option in data.ranking]
        self.effects.matches[data.task_id] = TaskMatch(
            data.task_id, data.chosen, ranking, data.oversized, data.reason, data.catalog_version,
            event.occurred_at, event.event_id, event.subject_seq,
        )  # fmt: skip

    def open(self, lease_id: str, task_id: str, card_type: str, gpus: int, opened_at: datetime,
             time_scale: float = 1.0) -> None:
        if card_type not in self.catalog:
            raise UnpricedCardError(f"lease {lease_id}: card type {card_type!r} has no price in the card catalog")
        price = price_of(self.catalog.card(card_type).price_per_gpu_hour)
        project = self.projects.get(task_id, UNKNOWN_PROJECT)
        self.keep(LeaseAccount(lease_id, task_id, project, card_type, gpus, price, opened_at, opened_at,
                               time_scale=time_scale))
        self.effects.opened.add(lease_id)

    def step(self, lease_id: str, cause: Envelope, move: Callable[[LeaseAccount], Step]) -> None:
        lease = self.leases.get(lease_id)
        if lease is None:
            log.warning("usage event for a lease the ledger never saw opened; its end will account it", lease_id=lease_id)
            return
        updated, increment = move(lease)
        if increment is not None and isinstance(cause, LeaseRenewed | LeaseReleased):
            updated, increment = with_idle(updated, increment, cause.data.idle_gpu_seconds)
            updated = with_utilisation(updated, increment, cause.data.gpu_util_pct)
        self.keep(updated)
        if increment is not None:
            self.account(increment, updated)

    def account(self, increment: Increment, lease: LeaseAccount) -> None:
        """Keep the lease's increment, joined to the one this batch already accounted for it."""
        before = self.accounted.get(lease.lease_id)
        self.accounted[lease.lease_id] = (increment if before is None else joined(before[0], increment), lease)

    def keep(self, lease: LeaseAccount) -> None:
        self.leases[lease.lease_id] = lease
        self.effects.leases[lease.lease_id] = lease


def fold_batch(
    events: Iterable[Envelope], catalog: Catalog, leases: Mapping[str, LeaseAccount], projects: Mapping[str, str],
    output: OutputSnapshot | None = None, open_spans: Mapping[str, AliveSpan] | None = None,
) -> BatchEffects:
    """Apply `events` in order over the loaded leases, task projects, runs' output and nodes' open spans
    (by node id); return what to write."""
    fold = _Fold(catalog, leases, projects, output or OutputSnapshot(), open_spans or {})
    for event in with_carried_releases(events):
        fold.apply(event)
    fold.effects.increments = list(fold.accounted.values())
    fold.effects.emissions = usage_emissions(fold.effects.increments)
    return fold.effects


def usage_emissions(increments: Iterable[tuple[Increment, LeaseAccount]]) -> list[Emission]:
    """One `usage.batch_recorded` per project of `increments` (each with at most one increment per lease),
    carrying a slice per increment in the given order."""
    by_project: dict[str, list[LeaseUsageSlice]] = {}
    for increment, lease in increments:
        by_project.setdefault(lease.project, []).append(usage_slice(lease, increment))
    return [
        Emission(UsageBatchRecorded, usage_subject(project), UsageBatchRecordedData(project=project, slices=tuple(slices)),
                 actor="service:ledger")
        for project, slices in by_project.items()
    ]  # fmt: skip


def usage_slice(lease: LeaseAccount, increment: Increment) -> LeaseUsageSlice:
    """What the ledger says of one increment: the lease's `usage.recorded`, carried by its project's event."""
    return LeaseUsageSlice(
        lease_id=lease.lease_id,
        task_id=lease.task_id,
        card_type=lease.card_type,
        gpu_seconds=float(increment.gpu_seconds),
        cost=float(increment.cost),
        from_at=increment.from_at,
        to_at=increment.to_at,
        gpus=lease.gpus,
        idle_gpu_seconds=float(increment.idle_gpu_seconds),
    )


def lease_ids_of(events: Iterable[Envelope]) -> set[str]:
    """The leases the batch's lease events are about, a carried release's among them (its carrier's `lease_id`)."""
    return {e.data.lease_id for e in events
            if isinstance(e, (LeaseGranted, LeaseRenewed, LeaseReleased)) or carries_release(e)}  # fmt: skip


def runs_of(events: Iterable[Envelope]) -> set[Run]:
    """The runs (task, lease) the batch's output events report on."""
    return {(e.data.task_id, e.data.lease_id) for e in events
            if isinstance(e, (TaskCheckpointed, TaskSucceeded)) and e.data.lease_id is not None}  # fmt: skip


def node_ids_of(events: Iterable[Envelope]) -> set[str]:
    return {e.data.node_id for e in events if isinstance(e, (NodeRegistered, NodeLost))}


def cleared_tasks_of(events: Iterable[Envelope]) -> set[str]:
    return {e.data.task_id for e in events if isinstance(e, TaskFlagCleared)}


def task_ids_of(events: Iterable[Envelope]) -> set[str]:
    """The tasks whose project the batch needs, a carried release's among them (its carrier's `task_id`)."""
    return {e.data.task_id for e in events
            if isinstance(e, (LeaseGranted, LeaseReleased, TaskSubmitted)) or carries_release(e)}  # fmt: skip


def _decimal(value: float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))
