"""Report rate caps (`shared.leasing.screening.rate_cap`) and batch coalescing in `apply_reports`:
tables over the pure fold, in the agent's time (issue 15 item 2: the `1e-300` checkpoint storm)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from shared.events.reasons import RevokeReason
from shared.leasing.records import LeaseBook
from shared.leasing.report_fold import apply_reports, superseded_in_batch
from shared.leasing.report_limits import ReportLimits
from shared.leasing.work import LeaseRules
from tests.unit.dispatcher.builders import (
    NOW,
    a_book,
    a_lease_record,
    a_node_record,
    a_task_record,
    checkpointed,
    finished,
    progress,
    registered,
)


def rules(burst: int = 0, checkpoint_gap_s: float = 30.0, progress_gap_s: float = 5.0) -> LeaseRules:
    return LeaseRules(reports=ReportLimits(min_checkpoint_gap_s=checkpoint_gap_s, min_progress_gap_s=progress_gap_s,
                                           burst=burst))


def a_book_with(*, scale: float = 1.0, **lease: Any) -> LeaseBook:
    """A running lease L1 of T1 on n1 (agent a1, token 7) whose node registered this time scale."""
    return a_book(a_node_record(time_scale=scale), a_task_record(), a_lease_record(started=True, **lease))


CHECKPOINT = checkpointed("a1", "L1", "T1", 7, "s3://b/c1")
PROGRESS = progress("a1", "L1", "T1", 7)


def in_batches(offsets_s: list[float], *, scale: float = 1.0, burst: int = 0, report: Any = CHECKPOINT,
               **lease: Any) -> str:
    """Fold one report per batch at each offset from NOW; 'a' accepted, 'r' refused rate_limited."""
    book, seen = a_book_with(scale=scale, **lease), ""
    for offset in offsets_s:
        effects = apply_reports(book, [report], NOW + timedelta(seconds=offset), rules(burst))
        book = replace(book, leases={**book.leases, **effects.changes.leases})
        seen += "r" if [r.refusal.reason.value for r in effects.rejected] == ["rate_limited"] else "a"
    return seen


CASES: list[tuple[str, dict[str, Any], str]] = [
    # (case, in_batches arguments, accepted / refused in order)
    ("one checkpoint per 30 s passes", dict(offsets_s=[0, 30, 60, 90]), "aaaa"),
    ("a checkpoint 10 s after the last is refused; the next in time passes", dict(offsets_s=[0, 10, 30]), "ara"),
    ("x600: one per 0.1 s real is one per minute of the agent's time", dict(offsets_s=[0, 0.1, 0.2], scale=600), "aaa"),
    ("x600: one per 0.01 s real is one per 6 s of the agent's time", dict(offsets_s=[0, 0.01, 0.02], scale=600), "arr"),
    ("a burst of 3 early ones passes, then one per gap", dict(offsets_s=[0, 1, 2, 3, 4, 5, 120], burst=3), "aaaarra"),
    ("progress: one per 5 s", dict(offsets_s=[0, 1, 5], report=PROGRESS), "ara"),
    ("a checkpoint the dispatcher asked for (preemption) is never capped",
     dict(offsets_s=[0, 0.1, 0.2], preempting=True), "aaa"),
    ("nor one while the lease is revoked", dict(offsets_s=[0, 0.1], revoke_reason=RevokeReason.CANCELLED), "aa"),
]


@pytest.mark.parametrize(("case", "arguments", "expected"), CASES, ids=[c[0] for c in CASES])
def test_rate_cap(case: str, arguments: dict[str, Any], expected: str) -> None:
    assert in_batches(**arguments) == expected


def test_a_refused_checkpoint_changes_nothing_and_says_why() -> None:
    book = a_book_with(checkpoint_due_at=NOW + timedelta(seconds=20))
    effects = apply_reports(book, [CHECKPOINT], NOW, rules())
    assert not effects.changes.emissions and not effects.changes.leases
    [row] = effects.rejected
    assert row.refusal.reason.value == "rate_limited" and "one per 30 s" in row.refusal.detail


def test_caps_are_per_kind_and_a_finish_is_never_capped() -> None:
    book = a_book_with(checkpoint_due_at=NOW + timedelta(hours=1), progress_due_at=NOW + timedelta(hours=1))
    assert apply_reports(a_book_with(progress_due_at=NOW + timedelta(hours=1)), [CHECKPOINT], NOW, rules()).rejected == ()
    effects = apply_reports(book, [finished("a1", "L1", "T1", 7, exit_code=0)], NOW, rules())
    assert effects.rejected == () and effects.changes.tasks["T1"].state.value == "succeeded"


def test_fencing_comes_first() -> None:
    book = a_book_with(checkpoint_due_at=NOW + timedelta(hours=1))
    effects = apply_reports(book, [checkpointed("a1", "L1", "T1", 6, "u")], NOW, rules())
    assert [r.refusal.reason.value for r in effects.rejected] == ["stale_token"]


def test_a_gap_of_zero_turns_a_cap_off() -> None:
    book = a_book_with(checkpoint_due_at=NOW + timedelta(hours=1))
    effects = apply_reports(book, [CHECKPOINT], NOW, rules(checkpoint_gap_s=0))
    assert effects.rejected == () and len(effects.changes.emissions) == 1


def test_a_storm_in_one_batch_applies_only_the_last_checkpoint() -> None:
    storm = [checkpointed("a1", "L1", "T1", 7, f"s3://b/c{i}") for i in range(1000)]
    effects = apply_reports(a_book_with(), storm, NOW, rules())
    [saved] = effects.changes.emissions
    assert saved.data["checkpoint_uri"] == "s3://b/c999"
    assert effects.rejected == () and effects.coalesced == 999


def test_a_storm_over_batches_is_refused_and_counted_in_one_row_per_batch() -> None:
    book = a_book_with(checkpoint_due_at=NOW + timedelta(seconds=20))
    storm = [checkpointed("a1", "L1", "T1", 7, f"s3://b/c{i}") for i in range(50)]
    effects = apply_reports(book, storm, NOW, rules())
    assert not effects.changes.emissions and effects.coalesced == 0
    [row] = effects.rejected
    assert (row.refusal.reason.value, row.count, row.report_id) == ("rate_limited", 50, storm[-1].event_id)


def test_coalescing_is_per_lease_and_kind() -> None:
    reports = [CHECKPOINT, PROGRESS, checkpointed("a1", "L2", "T2", 7, "u"), progress("a1", "L1", "T1", 7, 0.6),
               checkpointed("a1", "L1", "T1", 7, "s3://b/c2")]
    assert superseded_in_batch(reports) == {CHECKPOINT.event_id, PROGRESS.event_id}


def test_other_refusals_are_recorded_one_by_one() -> None:
    stale = [checkpointed("a1", "L1", "T1", 6, f"u{i}") for i in range(3)]
    effects = apply_reports(a_book_with(), stale, NOW, rules())
    assert [(r.refusal.reason.value, r.count) for r in effects.rejected] == [("stale_token", 1)] * 3


def test_a_registration_records_the_agents_time_scale() -> None:
    plain = registered("a1", "n1")
    report = plain.model_copy(update={"data": plain.data.model_copy(update={"time_scale": 600.0})})
    assert apply_reports(a_book(), [report], NOW, rules()).changes.nodes["n1"].time_scale == 600.0
    assert apply_reports(a_book(), [plain], NOW, rules()).changes.nodes["n1"].time_scale == 1.0
