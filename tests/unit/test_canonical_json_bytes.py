"""canonical_json gives exactly the bytes it gave before its C encoder was built once: the audit hash
chain hashes them. Every event, report, command and submission type is compared by the hypothesis
properties in test_events_roundtrip.py; these are the edge cases named, one by one."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.events import canonical_json, make_event
from tests.helpers.canonical_reference import reference_canonical_json
from tests.helpers.task_events import TaskStory


class Colour(StrEnum):
    RED = "red"


class Size(IntEnum):
    LARGE = 3


BERLIN = timezone(timedelta(hours=1))
TEXTS = ["", "plain", "quote \" backslash \\ slash /", "tab\t newline\n cr\r nul\x00 bell\x07 del\x7f",
         "é ü ß 日本語 🚀 \U0001f600", "line sep \u2028 para sep \u2029", "</script>"]  # fmt: skip
FLOATS = [0.0, -0.0, 0.1, 2.5, 1e-05, 1e-7, 1e16, 1e22, 123456789012345678.0, 5e-324, 1.7976931348623157e308, -3.25]
INTS = [0, -1, 2**31, 2**63, 2**70, -(2**100)]
DATETIMES = [
    datetime(2026, 12, 3, 22, 37, 56, tzinfo=UTC),
    datetime(2026, 12, 3, 22, 37, 56, 120000, tzinfo=UTC),
    datetime(2026, 12, 3, 22, 37, 56, 1, tzinfo=UTC),
    datetime(2026, 12, 3, 23, 37, 56, 999999, tzinfo=BERLIN),
    datetime(2026, 12, 3, 9, 0, tzinfo=timezone(timedelta(hours=-9, minutes=-30))),
    datetime(1999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=14))),
]


@pytest.mark.parametrize(
    "body",
    [
        {"texts": TEXTS, "floats": FLOATS, "ints": INTS, "datetimes": DATETIMES},
        {"nested": {"b": [{"z": 1, "a": [None, True, False]}, ()], "a": {"y": {"x": Colour.RED, "w": Size.LARGE}}}},
        {"é": 1, "e": 2, "E": 3, "": 4, "🚀": 5, "10": 6, "9": 7},  # key order by code point
        {},
    ],
    ids=["scalars", "nested", "keys", "empty"],
)
def test_a_dict_gives_the_old_bytes(body: dict[str, Any]) -> None:
    assert canonical_json(body) == reference_canonical_json(body)


@pytest.mark.parametrize("when", DATETIMES, ids=str)
@pytest.mark.parametrize("text", TEXTS)
def test_an_event_with_each_kind_of_text_and_time_gives_the_old_bytes(when: datetime, text: str) -> None:
    story = TaskStory(f"T-{text}")
    events = [story.submitted(name=text or "x"), story.held(detail=text), story.granted(), story.failed(error=text)]
    for event in events:
        event = event.model_copy(update={"occurred_at": when})
        assert canonical_json(event) == reference_canonical_json(event)


@pytest.mark.parametrize("value", FLOATS)
def test_a_float_in_a_payload_gives_the_old_bytes(value: float) -> None:
    event = make_event("usage.recorded", subject="lease/L1", subject_seq=1, producer="ledger/t", actor="service:ledger",
                       data={"lease_id": "L1", "task_id": "T1", "project": "p", "card_type": "A100",
                             "gpu_seconds": abs(value), "cost": abs(value)})  # fmt: skip
    assert canonical_json(event) == reference_canonical_json(event)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
    | st.datetimes(timezones=st.just(UTC) | st.builds(timezone, st.timedeltas(timedelta(hours=-23), timedelta(hours=23)))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
))  # fmt: skip
def test_any_json_like_value_gives_the_old_bytes_or_the_same_error(body: Any) -> None:
    try:
        expected: bytes | type[Exception] = reference_canonical_json(body)
    except (UnicodeEncodeError, ValueError, TypeError) as exc:  # lone surrogates, out-of-range offsets
        expected = type(exc)
    if isinstance(expected, bytes):
        assert canonical_json(body) == expected
    else:
        with pytest.raises(expected):
            canonical_json(body)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_as_before(value: float) -> None:
    with pytest.raises(ValueError):
        reference_canonical_json({"x": value})
    with pytest.raises(ValueError):
        canonical_json({"x": value})


@pytest.mark.parametrize("value", [Decimal("1.5"), b"bytes", {1, 2}, object()])
def test_what_json_cannot_hold_is_refused_as_before(value: Any) -> None:
    with pytest.raises(TypeError):
        reference_canonical_json({"x": value})
    with pytest.raises(TypeError):
        canonical_json({"x": value})
