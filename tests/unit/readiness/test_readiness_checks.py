"""Input-check planning and readiness decisions (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.readiness.checks import (
    InputKind,
    InputState,
    Probe,
    Readiness,
    assess,
    merge_probe,
    needs_event,
    plan_input_checks,
    ref_from_json,
    ref_to_json,
    review,
    signal_that_readied,
)
from shared.submission import DatasetRef

CLICKS = DatasetRef(dataset="clicks", version="7")


def test_each_input_form_gets_its_check_in_input_order() -> None:
    checks = plan_input_checks(["s3://bkt/day/a.parquet", "s3://bkt/shards/", CLICKS])

    assert [(c.position, c.kind, c.key) for c in checks] == [
        (0, InputKind.OBJECT, "s3://bkt/day/a.parquet"),
        (1, InputKind.PREFIX, "s3://bkt/shards/_READY"),
        (2, InputKind.DATASET, "clicks@7"),
    ]
    assert [(c.bucket, c.object_key) for c in checks] == [("bkt", "day/a.parquet"), ("bkt", "shards/_READY"), (None, None)]
    assert [c.is_s3 for c in checks] == [True, True, False]


@pytest.mark.parametrize(
    ("known", "probe", "after"),
    [
        (None, Probe.FOUND, True),
        (None, Probe.NOT_FOUND, False),
        (None, Probe.ERROR, None),  # an error is no verdict
        (False, Probe.ERROR, False),  # ... and changes nothing known
        (False, Probe.FOUND, True),
        (True, Probe.NOT_FOUND, True),  # availability is sticky
        (True, Probe.ERROR, True),
        (False, None, False),  # not probed this round
    ],
)
def test_merging_a_probe(known: bool | None, probe: Probe | None, after: bool | None) -> None:
    assert merge_probe(known, probe) is after


def test_assessing_readiness() -> None:
    assert assess([]) == Readiness(True, (), 1.0)
    assert assess([("s3://b/a", True), ("s3://b/c", None)]) is None
    assert assess([("s3://b/a", True), (CLICKS, False), ("s3://b/c", False), ("s3://b/d", True)]) == Readiness(
        False, (CLICKS, "s3://b/c"), 0.5
    )


def test_an_event_is_due_at_the_first_assessment_and_on_every_change_only() -> None:
    waiting = Readiness(False, ("s3://b/a", "s3://b/c"), 0.0)
    closer = Readiness(False, ("s3://b/c",), 0.5)
    assert needs_event(None, waiting)
    assert not needs_event(None, None)
    assert not needs_event(waiting, Readiness(False, ("s3://b/a", "s3://b/c"), 0.0))
    assert needs_event(waiting, closer)
    assert needs_event(closer, Readiness(True, (), 1.0))


def test_review_uses_signals_for_datasets_and_probes_for_s3() -> None:
    inputs = [
        InputState(0, CLICKS, InputKind.DATASET, "clicks@7", available=None, signal_event_id="01SIGNAL"),
        InputState(1, "s3://b/x/", InputKind.PREFIX, "s3://b/x/_READY", available=None),
        InputState(2, "s3://b/y", InputKind.OBJECT, "s3://b/y", available=True),
    ]
    unknown = review(inputs, None, {"s3://b/x/_READY": Probe.ERROR})
    waiting = review(inputs, None, {"s3://b/x/_READY": Probe.NOT_FOUND})

    assert (unknown.availability, unknown.readiness, unknown.emit) == ((True, None, True), None, False)
    assert waiting.readiness == Readiness(False, ("s3://b/x/",), 2 / 3) and waiting.emit
    recorded = [inputs[0], replace(inputs[1], available=False), inputs[2]]
    assert not review(recorded, waiting.readiness, {}).emit  # nothing changed since the last report


def test_a_report_names_the_newest_signal_that_made_an_input_available_whoever_noticed_it() -> None:
    inputs = [
        InputState(0, CLICKS, InputKind.DATASET, "clicks@7", available=False, signal_event_id="01B"),
        InputState(1, "s3://b/y", InputKind.OBJECT, "s3://b/y", available=False),
        InputState(2, CLICKS, InputKind.DATASET, "clicks@8", available=False, signal_event_id="01C"),
        InputState(3, CLICKS, InputKind.DATASET, "clicks@9", available=True, signal_event_id="01D"),
    ]
    assert signal_that_readied(inputs, (True, True, True, True)) == "01C"  # 01D was available before
    assert signal_that_readied(inputs, (True, True, False, True)) == "01B"
    assert signal_that_readied(inputs, (False, True, False, True)) is None  # only a probe found data


def test_inputs_round_trip_through_their_stored_form() -> None:
    for ref in ("s3://b/k", CLICKS):
        assert ref_from_json(ref_to_json(ref)) == ref
