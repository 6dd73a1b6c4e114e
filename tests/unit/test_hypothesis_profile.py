"""The suite's hypothesis profile (tests/conftest.py): properties check decisions, never time."""

from __future__ import annotations

from hypothesis import settings


def test_no_property_has_a_deadline_unless_it_sets_one() -> None:
    assert settings().deadline is None
    assert settings(max_examples=5).deadline is None  # a test's own settings inherit the profile's
