"""Fuzzing what upstream may send (hypothesis): whatever the JSON-ish value or text, validation
either yields a submission or `SubmissionInvalid` whose problems PostgreSQL can store — never
another exception — and what intake stores of a rejected body is always valid jsonb text."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.intake.commands import stored_raw
from shared.submission import SubmissionInvalid, TaskSubmission, validate_submission
from tests.reliability.hostile import VALID

HOSTILE_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["\x00", "\ud800", "a\udfffb", "NaN", "", " " * 300]
)
NUMBERS = st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=True, allow_infinity=True) | st.booleans()
SCALARS = st.none() | NUMBERS | HOSTILE_TEXT
JSONISH = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4), max_leaves=25
)
FIELDS = st.sampled_from(sorted(TaskSubmission.model_fields)) | HOSTILE_TEXT


def storable_json(value: Any) -> bool:
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")
    return "\x00" not in repr(value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.dictionaries(FIELDS, JSONISH, max_size=6))
def test_any_submission_is_valid_or_rejected_with_storable_problems(overrides: dict[str, Any]) -> None:
    body = {**VALID, **overrides}
    try:
        validate_submission(body)
    except SubmissionInvalid as invalid:
        assert invalid.problems
        assert all(storable_json(p.model_dump(mode="json")) for p in invalid.problems)
    assert storable_json(json.loads(stored_raw(body)))


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200) | JSONISH.map(lambda v: json.dumps(v, allow_nan=True).encode("utf-8", "surrogatepass")))
def test_any_body_bytes_are_valid_or_rejected_never_an_exception(raw: bytes) -> None:
    try:
        validate_submission(raw)
    except SubmissionInvalid as invalid:
        assert all(storable_json(p.model_dump(mode="json")) for p in invalid.problems)
    assert storable_json(json.loads(stored_raw(raw)))
