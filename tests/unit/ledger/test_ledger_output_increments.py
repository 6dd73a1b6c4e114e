"""A run's counted output and its output increments (pure): each rise, flag and clearing is one
increment, and a run's increments add up to its counted output however the events are batched."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.ledger.batch import BatchEffects, fold_batch
from services.ledger.outputs import OutputCause, OutputSnapshot, RunOutput
from shared.cards import load_catalog

from .builders import T0, checkpointed, flag_cleared, granted, succeeded

CATALOG = load_catalog()
RUN = ("T1", "L1")
REPORTED, FLAGGED, CLEARED = OutputCause.REPORTED, OutputCause.FLAGGED, OutputCause.CLEARED
EARLY = ("implausibly_early_success",)


def at(minutes: int):  # noqa: ANN201
    return T0 + timedelta(minutes=minutes)


def counted(units: int, *, final: bool = False, minutes: int = 0) -> OutputSnapshot:
    return OutputSnapshot(counted={RUN: RunOutput(*RUN, Decimal(units), final, at(minutes))}, cards={"L1": "H100"})


CASES = [  # (why, events, loaded snapshot, increments (units, cause, minutes), counted after (None: no row))
    ("a checkpoint then the success: each counts its rise", [checkpointed("T1", "L1", 500, at=at(1)),
     succeeded("T1", "L1", 1000, at=at(2))], OutputSnapshot(), [(500, REPORTED, 1), (500, REPORTED, 2)], 1000),
    ("the success after a checkpoint another batch counted: only the rise", [succeeded("T1", "L1", 1000, at=at(9))],
     counted(500), [(500, REPORTED, 9)], 1000),
    ("a redelivered success over the row it left: nothing", [succeeded("T1", "L1", 1000, at=at(9))],
     counted(1000, final=True, minutes=9), [], 1000),
    ("a report below what the run counts: nothing", [checkpointed("T1", "L1", 300, at=at(5))], counted(500), [], 500),
    ("a flagged success takes back what the run counted", [succeeded("T1", "L1", 400, at=at(3), flags=EARLY)],
     counted(500), [(-500, FLAGGED, 3)], None),
    ("a flag without counted output: nothing to take back", [succeeded("T1", "L1", 400, at=at(3), flags=EARLY)],
     OutputSnapshot(), [], None),
    ("a clearing counts the held-back output, from the clearing", [flag_cleared("T1", at=at(60))],
     OutputSnapshot(held={RUN: Decimal(500)}), [(500, CLEARED, 60)], 500),
    ("a clearing of a refused claim counts nothing", [flag_cleared("T1", at=at(60))],
     OutputSnapshot(held={RUN: None}), [], None),
    ("checkpoint, flag and clearing in one batch", [checkpointed("T1", "L1", 300, at=at(1)),
     succeeded("T1", "L1", None, at=at(2), flags=EARLY), flag_cleared("T1", at=at(3))],
     OutputSnapshot(), [(300, REPORTED, 1), (-300, FLAGGED, 2), (300, CLEARED, 3)], 300),
]  # fmt: skip


@pytest.mark.parametrize(("events", "loaded", "expected", "after"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])  # fmt: skip
def test_each_change_of_a_runs_counted_output_is_one_increment(events, loaded, expected, after) -> None:  # noqa: ANN001
    output = fold_batch(events, CATALOG, {}, {}, loaded).output
    assert [(i.output_units, i.cause, i.at) for i in output.increments] == [(u, c, at(m)) for u, c, m in expected]
    assert (output.rows[RUN].output_units if RUN in output.rows else None) == after
    before = loaded.counted[RUN].output_units if RUN in loaded.counted else 0
    assert before + sum(i.output_units for i in output.increments) == (after or 0)


def test_what_the_store_does_with_a_flagged_and_a_cleared_run() -> None:
    flagged = fold_batch([succeeded("T1", "L1", 400, at=at(3), flags=EARLY)], CATALOG, {}, {}, counted(500)).output
    assert flagged.uncounted == {RUN} and flagged.flagged[RUN].output_units == 500  # held: the most it reported
    cleared = fold_batch([flag_cleared("T1", at=at(60))], CATALOG, {}, {}, OutputSnapshot(held={RUN: Decimal(500)})).output
    assert cleared.cleared[0].lease_ids == ("L1",) and cleared.rows[RUN].final and cleared.stored == frozenset()
    again = fold_batch([flag_cleared("T1", at=at(61))], CATALOG, {}, {}, OutputSnapshot()).output
    assert again.cleared[0].lease_ids == () and again.increments == []  # nothing held any more: nothing moves


def test_an_increment_carries_the_card_type_where_the_ledger_has_the_lease() -> None:
    loaded = fold_batch([checkpointed("T1", "L1", 5)], CATALOG, {}, {}, counted(0)).output
    in_batch = fold_batch([granted("L2", "T2", card_type="L40S"), checkpointed("T2", "L2", 5)], CATALOG, {}, {}).output
    unseen = fold_batch([checkpointed("T3", "L3", 5)], CATALOG, {}, {}).output
    assert [o.increments[0].card_type for o in (loaded, in_batch, unseen)] == ["H100", "L40S", None]


def snapshot_after(loaded: OutputSnapshot, output) -> OutputSnapshot:  # noqa: ANN001
    """What the store holds after writing `output` over `loaded` (the handler's next snapshot)."""
    rows = {run: row for run, row in loaded.counted.items() if run not in output.uncounted} | output.rows
    held = {run: units for run, units in loaded.held.items()} | {run: f.output_units for run, f in output.flagged.items()}
    for clearing in output.cleared:
        for lease_id in clearing.lease_ids:
            held.pop((clearing.task_id, lease_id), None)
    return replace(loaded, counted=rows, held=held)


_EVENT = st.tuples(st.sampled_from(["checkpoint", "success", "flagged", "clear"]), st.sampled_from(["L1", "L2"]),
                   st.integers(0, 1000))  # fmt: skip


def as_run(steps: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """`steps` as a dispatcher reports them: a lease ends with one success; after a flagged one nothing
    but clearings (unflagged successes may repeat: a redelivery)."""
    kept, ended, flagged = [], set(), set()
    for kind, lease_id, units in steps:
        if kind != "clear" and (lease_id in flagged or (kind == "flagged" and lease_id in ended)):
            continue
        (flagged if kind == "flagged" else ended if kind == "success" else set()).add(lease_id)
        kept.append((kind, lease_id, units))
    return kept


def as_event(kind: str, lease_id: str, units: int, minute: int):  # noqa: ANN201
    if kind == "checkpoint":
        return checkpointed("T1", lease_id, units, at=at(minute))
    if kind == "success":
        return succeeded("T1", lease_id, units, at=at(minute))
    return succeeded("T1", lease_id, units, at=at(minute), flags=EARLY) if kind == "flagged" else flag_cleared("T1", at=at(minute))


@settings(max_examples=100, deadline=None)
@given(st.lists(_EVENT, max_size=12), st.data())
def test_a_runs_increments_add_up_to_its_counted_output_however_the_events_are_batched(steps, data) -> None:  # noqa: ANN001
    events = [as_event(kind, lease, units, minute) for minute, (kind, lease, units) in enumerate(as_run(steps))]
    cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=4)) | {0, len(events)})
    snapshot, increments = OutputSnapshot(), []
    for start, end in zip(cuts, cuts[1:], strict=False):
        output = fold_batch(events[start:end], CATALOG, {}, {}, snapshot).output
        increments += output.increments
        snapshot = snapshot_after(snapshot, output)
    whole = fold_batch(events, CATALOG, {}, {}).output
    assert snapshot.counted == whole.rows  # batched or not, the same counted output
    for run in {("T1", "L1"), ("T1", "L2")}:
        counted_units = snapshot.counted[run].output_units if run in snapshot.counted else 0
        assert sum(i.output_units for i in increments if (i.task_id, i.lease_id) == run) == counted_units
    assert sorted(increments, key=repr) == sorted(whole.increments, key=repr)


def test_effects_default_to_no_output() -> None:
    assert BatchEffects().output.increments == []
