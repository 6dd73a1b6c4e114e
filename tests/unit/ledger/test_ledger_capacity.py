"""Nodes' alive spans folded from `node.registered` / `node.lost`, and a round's capacity from them and the
archive's older changes (pure tables, and a property: the spans, with the archive for what came before them,
count what the whole archive counts)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.ledger.batch import fold_batch, is_repeatable, node_ids_of
from services.ledger.capacity import (
    AliveSpan,
    NodeChange,
    NodeChangeKind,
    NodeSpanEffects,
    capacity_changes,
    node_spans,
)
from services.ledger.round_report import NodeSpan
from shared.cards import load_catalog
from tests.unit.matcher.builders import T0, lost, registered

CATALOG = load_catalog()
REG, LOST = NodeChangeKind.REGISTERED, NodeChangeKind.LOST


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def open_span(node_id: str, minutes: int, event_id: str = "E-open", card: str = "H100", gpus: int = 8) -> AliveSpan:
    return AliveSpan(node_id, card, gpus, at(minutes), event_id)


def spans_of(effects: NodeSpanEffects) -> list[tuple]:
    """(node, registered, lost, inserted or closed) of every span the batch writes, in a stable order."""
    rows = [(s.node_id, s.registered_at, s.lost_at, "inserted") for s in effects.inserted.values()]
    rows += [(s.node_id, s.registered_at, s.lost_at, "closed") for s in effects.closed.values()]
    return sorted(rows, key=lambda row: (row[0], row[1] or row[2], row[3]))


FOLDS = [  # why, events (node, kind, minute), loaded open spans (node, minute), spans written
    ("a registration opens a span", [("n1", REG, 0)], [], [("n1", at(0), None, "inserted")]),
    ("a loss in the same batch closes it", [("n1", REG, 0), ("n1", LOST, 30)], [],
     [("n1", at(0), at(30), "inserted")]),
    ("a loss closes the loaded open span", [("n1", LOST, 30)], [("n1", 0)], [("n1", at(0), at(30), "closed")]),
    ("a re-registration while alive changes nothing (an agent's restart)", [("n1", REG, 10)], [("n1", 0)], []),
    ("registered again after its loss: a second span", [("n1", LOST, 30), ("n1", REG, 40)], [("n1", 0)],
     [("n1", at(0), at(30), "closed"), ("n1", at(40), None, "inserted")]),
    ("a loss without an open span is kept without a start (registered before the ledger kept spans)",
     [("n1", LOST, 30)], [], [("n1", None, at(30), "inserted")]),
    ("nodes are apart", [("n1", REG, 0), ("n2", REG, 5), ("n2", LOST, 6)], [],
     [("n1", at(0), None, "inserted"), ("n2", at(5), at(6), "inserted")]),
]  # fmt: skip


@pytest.mark.parametrize(("events", "loaded", "written"), [case[1:] for case in FOLDS], ids=[case[0] for case in FOLDS])
def test_node_events_fold_into_alive_spans(events: list, loaded: list, written: list) -> None:
    batch = [registered(node, "H100", at=at(m)) if kind is REG else lost(node, at=at(m)) for node, kind, m in events]
    effects = fold_batch(batch, CATALOG, {}, {}, open_spans={node: open_span(node, m) for node, m in loaded})
    assert spans_of(effects.nodes) == written


def test_a_span_keeps_the_registrations_card_gpus_and_both_event_ids() -> None:
    reg, gone = registered("n1", "L40S", 4, at=at(0)), lost("n1", at=at(30))
    (span,) = fold_batch([reg, gone], CATALOG, {}, {}).nodes.inserted.values()
    assert span == AliveSpan("n1", "L40S", 4, at(0), reg.event_id, at(30), gone.event_id)


def test_node_events_need_an_inbox_row_and_name_their_nodes() -> None:
    # a second delivery of a registration after the node's loss would open a span again
    events = [registered("n1", "H100"), lost("n2")]
    assert not any(is_repeatable(event) for event in events)
    assert node_ids_of(events) == {"n1", "n2"}


def change(kind: NodeChangeKind, node_id: str, minutes: int, card: str | None = "H100", gpus: int | None = 8) -> NodeChange:
    return NodeChange(kind, at(minutes), node_id, card if kind is REG else None, gpus if kind is REG else None)


def hours(spans: list[NodeSpan]) -> dict[str, Decimal]:
    """Alive hours per node, over all its spans."""
    total: dict[str, Decimal] = {}
    for span in spans:
        total[span.node_id] = total.get(span.node_id, Decimal(0)) + span.seconds / 3600
    return total


CAPACITY = [  # why, kept spans (node, registered min, lost min), archived changes, round [start, end) min, hours
    ("a node lost mid-round counts only its alive time", [("n1", 0, 30)], [], (0, 120), {"n1": Decimal("0.5")}),
    ("a node never lost is alive to the round's end", [("n1", 60, None)], [], (0, 120), {"n1": 1}),
    ("clipped to the round's start", [("n1", -60, 30)], [], (0, 120), {"n1": Decimal("0.5")}),
    ("registered before the ledger kept spans: the archive's registration, the ledger's loss",
     [("n1", None, 30)], [change(REG, "n1", -30)], (0, 120), {"n1": Decimal("0.5")}),
    ("registered before, never lost: the archive's registration to the round's end", [],
     [change(REG, "n1", -30)], (0, 120), {"n1": 2}),
    ("registered before, re-registered while alive after: alive since the archived registration",
     [("n1", 10, 60)], [change(REG, "n1", -30)], (0, 120), {"n1": 1}),
    ("an archived span before the ledger kept spans, then a kept one", [("n1", 60, None)],
     [change(REG, "n1", -30), change(LOST, "n1", 30)], (0, 120), {"n1": Decimal("1.5")}),
    ("a node lost before the round counts nothing", [("n1", -60, -10)], [], (0, 120), {}),
]  # fmt: skip


@pytest.mark.parametrize(("kept", "archived", "period", "expected"), [case[1:] for case in CAPACITY],
                         ids=[case[0] for case in CAPACITY])  # fmt: skip
def test_capacity_counts_the_kept_spans_and_the_archives_older_changes(kept: list, archived: list,
                                                                       period: tuple, expected: dict) -> None:  # fmt: skip
    rows = [AliveSpan(node, None if reg is None else "H100", None if reg is None else 8,
                      None if reg is None else at(reg), None if reg is None else f"R{i}",
                      None if gone is None else at(gone), None if gone is None else f"L{i}")
            for i, (node, reg, gone) in enumerate(kept)]  # fmt: skip
    spans = node_spans(capacity_changes(rows, archived), at(period[0]), at(period[1]))
    assert hours(spans) == expected
    assert all((span.card_type, span.gpus) == ("H100", 8) for span in spans)


def test_at_the_same_instant_an_archived_change_comes_before_a_kept_one() -> None:
    # the archived registration (consumed before the migration) then the ledger's loss: not a node left alive
    changes = capacity_changes([AliveSpan("n1", None, None, None, None, at(0), "L")], [change(REG, "n1", 0)])
    assert [c.kind for c in changes] == [REG, LOST]


def kept_spans(batches: list[list]) -> list[AliveSpan]:
    """The rows `ledger.node_spans` holds after folding `batches` one by one, as `store.save_effects` writes them."""
    rows: dict[str, AliveSpan] = {}
    for batch in batches:
        open_spans = {span.node_id: span for span in rows.values() if span.lost_at is None}
        effects = fold_batch(batch, CATALOG, {}, {}, open_spans=open_spans).nodes
        rows |= {span.key: span for span in effects.closed.values()} | effects.inserted
    return list(rows.values())


HISTORIES = st.lists(st.tuples(st.sampled_from(["n1", "n2", "n3"]), st.booleans()), max_size=24)


@settings(max_examples=200, deadline=None)
@given(history=HISTORIES, cut=st.integers(0, 24), batch_size=st.integers(1, 5), bounds=st.tuples(st.integers(-5, 30),
       st.integers(0, 30)))  # fmt: skip
def test_kept_spans_and_the_archive_before_them_count_what_the_whole_archive_counts(
    history: list[tuple[str, bool]], cut: int, batch_size: int, bounds: tuple[int, int],
) -> None:
    # A node history (one event a minute), of which the ledger consumed the events from `cut` on, in batches
    # (those before: consumed before it kept spans, only in the archive); a round [start, start + length).
    events = [registered(node, "H100", at=at(i)) if up else lost(node, at=at(i)) for i, (node, up) in enumerate(history)]
    changes = [change(REG if up else LOST, node, i) for i, (node, up) in enumerate(history)]
    consumed = events[cut:]
    kept = kept_spans([consumed[i:i + batch_size] for i in range(0, len(consumed), batch_size)])
    starts, ends = at(bounds[0]), at(bounds[0] + bounds[1])
    assert hours(node_spans(capacity_changes(kept, changes[:cut]), starts, ends)) == hours(node_spans(changes, starts, ends))
