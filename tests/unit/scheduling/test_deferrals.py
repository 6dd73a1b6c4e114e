"""`Deferrals`: a plan's deferrals as columns that also read as a sequence of `Deferral`."""

from __future__ import annotations

import pytest

from shared.scheduling.model import Deferral, DeferralReason, Deferrals, Plan

from . import builders
from .builders import NOW, a_lease, a_node, a_task

R = DeferralReason
ITEMS = [Deferral("T1", R.NO_CAPACITY, "no room"), Deferral("T2", R.QUOTA_EXHAUSTED, "no hours"),
         Deferral("T3", R.RESERVED, "holds the reservation")]


def test_the_sequence_is_the_columns_row_by_row() -> None:
    deferrals = Deferrals.of(ITEMS)
    assert deferrals.task_ids == ("T1", "T2", "T3")
    assert deferrals.reasons == (R.NO_CAPACITY, R.QUOTA_EXHAUSTED, R.RESERVED)
    assert deferrals.details == ("no room", "no hours", "holds the reservation")
    assert len(deferrals) == 3
    assert list(deferrals) == ITEMS
    assert [deferrals[i] for i in range(-3, 3)] == ITEMS + ITEMS
    assert deferrals[1:] == Deferrals.of(ITEMS[1:])
    assert ITEMS[2] in deferrals and Deferral("T3", R.RESERVED, "other") not in deferrals
    assert deferrals.index(ITEMS[1]) == 1
    assert list(reversed(deferrals)) == ITEMS[::-1]
    with pytest.raises(IndexError):
        deferrals[3]


def test_equal_columns_are_equal_and_hash_alike() -> None:
    assert Deferrals.of(ITEMS) == Deferrals(("T1", "T2", "T3"), (R.NO_CAPACITY, R.QUOTA_EXHAUSTED, R.RESERVED),
                                            ("no room", "no hours", "holds the reservation"))
    assert hash(Deferrals.of(ITEMS)) == hash(Deferrals.of(list(ITEMS)))
    assert Deferrals.of(ITEMS) != Deferrals.of(ITEMS[:2])
    assert not Deferrals() and len(Deferrals()) == 0


def test_columns_of_different_lengths_are_refused_with_their_lengths() -> None:
    with pytest.raises(ValueError, match="2 task ids, 1 reasons, 1 details"):
        Deferrals(("T1", "T2"), (R.NO_CAPACITY,), ("no room",))


def test_extended_appends_in_order() -> None:
    held = [Deferral("T9", R.DEADLINE_UNREACHABLE, "too late")]
    assert list(Deferrals.of(ITEMS).extended(held)) == ITEMS + held


def test_a_plan_given_a_plain_sequence_keeps_it_as_columns() -> None:
    decided = Plan(deferrals=tuple(ITEMS))
    assert isinstance(decided.deferrals, Deferrals)
    assert decided.deferrals == Deferrals.of(ITEMS)
    assert decided == Plan(deferrals=Deferrals.of(ITEMS))
    assert Plan().deferrals == Deferrals()


def test_only_the_last_deferral_learns_of_the_preemption_grace() -> None:
    """The cycle replaces the detail of its last deferral (`Cycle._mention_grace`): the core task waiting
    out its grace is told when it may preempt, once, in its own sentence; the deferrals before and after
    it keep theirs."""
    leases = [a_lease("o").on("a").gpus(*range(8)).opportunistic().started(NOW - 60).checkpoints_on_preempt()]
    tasks = [a_task("wide").core().gpus(64).submitted(NOW - 900),  # never fits: deferred first, no grace
             a_task("c").core().gpus(4).submitted(NOW - 100), a_task("s").gpus(4).submitted(NOW - 900)]
    decided = builders.run([a_node("a").free(0)], tasks, leases=leases, preempt_after_s=600)
    columns = decided.deferrals
    assert columns.task_ids == ("wide", "c", "s")
    wide, core, standard = columns.details
    assert core.endswith("; if still waiting in 8m, it may preempt opportunistic work")
    assert core.count("if still waiting") == 1
    assert "if still waiting" not in wide and "if still waiting" not in standard
    assert list(columns) == [Deferral(*row) for row in zip(columns.task_ids, columns.reasons, columns.details)]
