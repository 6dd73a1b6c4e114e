"""Report rate caps (`shared.leasing.screening.rate_cap`) and batch coalescing in `apply_reports`:
tables over the pure fold, in the agent's time (issue 15 item 2: the `1e-300` checkpoint storm)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

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

RULES = LeaseRules(reports=ReportLimits(min_checkpoint_gap_s=30.0, min_progress_gap_s=5.0))


def a_book_with(*, scale: float = 1.0, checkpoint_ago_s: float | None = None, progress_ago_s: float | None = None) -> LeaseBook:
    """A running lease L1 of T1 on n1 (agent a1, token 7), its last accepted checkpoint / progress so long ago."""
    ago = lambda s: None if s is None else NOW - timedelta(seconds=s)  # noqa: E731
    lease = a_lease_record(started=True, last_checkpoint_at=ago(checkpoint_ago_s), last_progress_at=ago(progress_ago_s))
    return a_book(a_node_record(time_scale=scale), a_task_record(), lease)


CHECKPOINT = checkpointed("a1", "L1", "T1", 7, "s3://b/c1")
PROGRESS = progress("a1", "L1", "T1", 7)

CASES: list[tuple[str, LeaseBook, Any, list[str], list[str]]] = [
    # (case, book, report, rejection reasons, emitted types)
    ("a first checkpoint is accepted", a_book_with(), CHECKPOINT, [], ["task.checkpointed"]),
    ("a checkpoint 10 s after the last one is refused", a_book_with(checkpoint_ago_s=10), CHECKPOINT,
     ["rate_limited"], []),
    ("a checkpoint 30 s after the last one is accepted", a_book_with(checkpoint_ago_s=30), CHECKPOINT,
     [], ["task.checkpointed"]),
    ("x600: 0.1 s real is a minute of the agent's time, accepted", a_book_with(scale=600, checkpoint_ago_s=0.1),
     CHECKPOINT, [], ["task.checkpointed"]),
    ("x600: 0.01 s real is 6 s of the agent's time, refused", a_book_with(scale=600, checkpoint_ago_s=0.01),
     CHECKPOINT, ["rate_limited"], []),
    ("a progress report 1 s after the last one is refused", a_book_with(progress_ago_s=1), PROGRESS,
     ["rate_limited"], []),
    ("a progress report 5 s after the last one is accepted", a_book_with(progress_ago_s=5), PROGRESS, [], []),
    ("a checkpoint is not capped by the last progress report", a_book_with(progress_ago_s=0), CHECKPOINT,
     [], ["task.checkpointed"]),
    ("a finish right after a checkpoint is never capped", a_book_with(checkpoint_ago_s=0),
     finished("a1", "L1", "T1", 7, exit_code=0), [], ["lease.released", "task.started", "task.succeeded"]),
    ("fencing comes first: a stale token is refused as such", a_book_with(checkpoint_ago_s=0),
     checkpointed("a1", "L1", "T1", 6, "s3://b/c1"), ["stale_token"], []),
]


@pytest.mark.parametrize(("case", "book", "report", "rejected", "emitted"), CASES, ids=[c[0] for c in CASES])
def test_rate_cap(case: str, book: LeaseBook, report: Any, rejected: list[str], emitted: list[str]) -> None:
    effects = apply_reports(book, [report], NOW, RULES)
    assert [r.refusal.reason.value for r in effects.rejected] == rejected
    assert [e.event_type.model_fields["type"].default for e in effects.changes.emissions] == emitted


def test_a_gap_of_zero_turns_a_cap_off() -> None:
    rules = replace(RULES, reports=ReportLimits(min_checkpoint_gap_s=0))
    effects = apply_reports(a_book_with(checkpoint_ago_s=0), [CHECKPOINT], NOW, rules)
    assert effects.rejected == () and len(effects.changes.emissions) == 1


def test_a_storm_in_one_batch_applies_the_last_checkpoint_and_counts_the_rest_in_one_row() -> None:
    storm = [checkpointed("a1", "L1", "T1", 7, f"s3://b/c{i}") for i in range(1000)]
    effects = apply_reports(a_book_with(), storm, NOW, RULES)
    [saved] = [e for e in effects.changes.emissions]
    assert saved.data["checkpoint_uri"] == "s3://b/c999"
    [row] = effects.rejected
    assert (row.refusal.reason.value, row.count, row.lease_id, row.report_id) == ("coalesced", 999, "L1", storm[998].event_id)


def test_a_storm_over_batches_is_refused_batch_after_batch_one_row_each() -> None:
    book = a_book_with()
    first = apply_reports(book, [CHECKPOINT], NOW, RULES)
    book = replace(book, leases={**book.leases, **first.changes.leases})
    storm = [checkpointed("a1", "L1", "T1", 7, f"s3://b/c{i}") for i in range(50)]
    later = apply_reports(book, storm, NOW + timedelta(seconds=1), RULES)
    assert not later.changes.emissions
    assert [(r.refusal.reason.value, r.count) for r in later.rejected] == [("rate_limited", 50)]


def test_coalescing_is_per_lease_and_kind() -> None:
    reports = [CHECKPOINT, PROGRESS, checkpointed("a1", "L2", "T2", 7, "u"), progress("a1", "L1", "T1", 7, 0.6),
               checkpointed("a1", "L1", "T1", 7, "s3://b/c2")]
    assert superseded_in_batch(reports) == {CHECKPOINT.event_id, PROGRESS.event_id}


def test_other_refusals_are_recorded_one_by_one() -> None:
    stale = [checkpointed("a1", "L1", "T1", 6, f"u{i}") for i in range(3)]
    effects = apply_reports(a_book_with(), stale, NOW, RULES)
    assert [(r.refusal.reason.value, r.count) for r in effects.rejected] == [("stale_token", 1)] * 3


def test_a_registration_records_the_agents_time_scale() -> None:
    plain = registered("a1", "n1")
    report = plain.model_copy(update={"data": plain.data.model_copy(update={"time_scale": 600.0})})
    assert apply_reports(a_book(), [report], NOW, RULES).changes.nodes["n1"].time_scale == 600.0
    assert apply_reports(a_book(), [plain], NOW, RULES).changes.nodes["n1"].time_scale == 1.0
