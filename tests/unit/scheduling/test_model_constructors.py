"""`new_grant` and `new_placement`: the plan's grants made without the frozen dataclasses' `__init__` are the
same values as those the dataclasses make."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from shared.scheduling.model import Grant, Placement, new_grant, new_placement


def test_a_placement_made_fast_is_the_dataclass_value() -> None:
    made, expected = new_placement("n1", (0, 3)), Placement("n1", (0, 3))
    assert type(made) is Placement
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)


@pytest.mark.parametrize("borrowed", [False, True])
def test_a_grant_made_fast_is_the_dataclass_value(borrowed: bool) -> None:
    placements = (new_placement("n1", (0, 3)), new_placement("n2", (5,)))
    made = new_grant("t1", "H100", placements, 1234.5, borrowed)
    expected = Grant("t1", "H100", (Placement("n1", (0, 3)), Placement("n2", (5,))), 1234.5, borrowed)
    assert type(made) is Grant
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    assert dataclasses.asdict(made) == dataclasses.asdict(expected)
    assert pickle.loads(pickle.dumps(made)) == expected
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.task_id = "other"  # type: ignore[misc]


@pytest.mark.parametrize(("cls", "make"), [(Placement, new_placement), (Grant, new_grant)])
def test_the_fast_constructors_set_every_field_in_order(cls: type, make) -> None:
    """A field added to the dataclass must be added to its fast constructor too (else the slot stays unset)."""
    assert list(inspect.signature(make).parameters) == [field.name for field in dataclasses.fields(cls)]
