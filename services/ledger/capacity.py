"""A round's capacity: each node's alive spans, as the ledger keeps them itself (pure; `batch.fold_batch`
drives the fold, `round_inputs.load_capacity` the count).

The ledger folds `node.registered` / `node.lost` as it consumes them into `ledger.node_spans`, one row per
span a node was alive (`AliveSpan`): a registration while the node is not alive opens one, a registration
while it is alive changes nothing (an agent's restart), a loss closes the open one. A round's capacity is
counted from those rows, so it never waits for the archiver: before, it read the events from
`audit.events`, and a `node.lost` not archived yet when the round closed counted its node alive to the
round's end.

Events the ledger consumed before it kept spans (migration 014) are only in the archive: a loss of a node
whose registration it never saw is kept as a span without a start (`registered_at` None), and the round
reads the archived node events from before `node_spans_kept.since` that no span holds
(`capacity_changes` merges both, by time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from services.ledger.round_report import NodeSpan


class NodeChangeKind(StrEnum):
    """What happened to a node (the event types, as `audit.events.type` holds them)."""

    REGISTERED = "node.registered"
    LOST = "node.lost"


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node's registration (with its card type and GPUs) or loss, at `at`."""

    kind: NodeChangeKind
    at: datetime
    node_id: str
    card_type: str | None = None
    gpus: int | None = None


@dataclass(frozen=True, slots=True)
class AliveSpan:
    """A row of `ledger.node_spans`: a node alive from `registered_at` until `lost_at` (None: still alive).
    `registered_at` None: a loss whose registration the ledger never saw (before migration 014; the archive
    holds it), so the card type and GPUs are unknown too."""

    node_id: str
    card_type: str | None
    gpus: int | None
    registered_at: datetime | None
    registered_event_id: str | None
    lost_at: datetime | None = None
    lost_event_id: str | None = None

    @property
    def key(self) -> str:
        """The event that made the row (its registration, or the loss of a span without a start)."""
        return self.registered_event_id or self.lost_event_id or ""


@dataclass
class NodeSpanEffects:
    """What a batch's node events change: spans to insert (opened, and starts-less losses) and loaded open
    spans now closed (updated)."""

    inserted: dict[str, AliveSpan] = field(default_factory=dict)
    closed: dict[str, AliveSpan] = field(default_factory=dict)
    """Loaded open spans the batch closed, by node id."""


class NodeSpanFold:
    """Folds one batch's node events over the open spans the handler loaded (by node id)."""

    def __init__(self, open_spans: Mapping[str, AliveSpan], effects: NodeSpanEffects) -> None:
        self.open = dict(open_spans)
        self.loaded = set(open_spans)
        self.effects = effects

    def registered(self, node_id: str, card_type: str, gpus: int, at: datetime, event_id: str) -> None:
        """Opens a span unless the node is alive (a re-registration after an agent's restart changes nothing)."""
        if node_id not in self.open:
            span = AliveSpan(node_id, card_type, gpus, at, event_id)
            self.open[node_id] = self.effects.inserted[span.key] = span

    def lost(self, node_id: str, at: datetime, event_id: str) -> None:
        """Closes the node's open span; without one, keeps the loss as a span without a start (the node
        registered before the ledger kept spans; a round merges it with the archived registration)."""
        span = self.open.pop(node_id, None)
        if span is None:
            start_less = AliveSpan(node_id, None, None, None, None, at, event_id)
            self.effects.inserted[start_less.key] = start_less
            return
        closed = replace(span, lost_at=at, lost_event_id=event_id)
        if node_id in self.loaded and span.key not in self.effects.inserted:
            self.effects.closed[node_id] = closed
        else:
            self.effects.inserted[closed.key] = closed


def capacity_changes(kept: Iterable[AliveSpan], archived: Iterable[NodeChange]) -> list[NodeChange]:
    """The node changes a round counts, by time: those of the ledger's spans, and the archived ones it does
    not hold (from before it kept spans; the caller leaves out those a span holds). At the same instant an
    archived change comes first (it was consumed before the migration)."""
    changes = list(archived)
    for span in kept:
        if span.registered_at is not None:
            changes.append(NodeChange(NodeChangeKind.REGISTERED, span.registered_at, span.node_id, span.card_type, span.gpus))
        if span.lost_at is not None:
            changes.append(NodeChange(NodeChangeKind.LOST, span.lost_at, span.node_id))
    return sorted(changes, key=lambda change: change.at)


def node_spans(changes: Sequence[NodeChange], starts: datetime, ends: datetime) -> list[NodeSpan]:
    """Alive intervals of every node clipped to `[starts, ends)`, from its changes in time order; a
    re-registration while alive changes nothing, a loss while not alive neither, a node never lost is
    alive until `ends`."""
    alive: dict[str, NodeChange] = {}
    spans: list[NodeSpan] = []

    def close(node_id: str, at: datetime) -> None:
        since = alive.pop(node_id)
        seconds = (min(at, ends) - max(since.at, starts)).total_seconds()
        if seconds > 0 and since.card_type is not None and since.gpus is not None:
            spans.append(NodeSpan(node_id, since.card_type, since.gpus, Decimal(str(seconds))))

    for change in changes:
        if change.kind is NodeChangeKind.REGISTERED and change.node_id not in alive:
            alive[change.node_id] = change
        elif change.kind is NodeChangeKind.LOST and change.node_id in alive:
            close(change.node_id, change.at)
    for node_id in list(alive):
        close(node_id, ends)
    return spans
