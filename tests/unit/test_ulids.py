"""The process's ULID source: python-ulid's format, and each id greater than the one before."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from shared.events import new_event_id
from shared.events.ulids import RANDOM_BITS, MonotonicUlids, encode_ulid

T0_MS = 1_764_800_000_000  # 2025-12-03


class SteppedClock:
    """A millisecond clock the test sets by hand."""

    def __init__(self, ms: int = T0_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_encoding_is_python_ulids(value: int) -> None:
    assert encode_ulid(value) == str(ULID.from_int(value))


def test_an_id_carries_the_clock_and_reads_back_with_python_ulid() -> None:
    ids = MonotonicUlids(clock_ms=SteppedClock(), randomness=lambda: 0xABCDE)
    parsed = ULID.from_str(ids.new())
    assert parsed.milliseconds == T0_MS
    assert int(parsed) & ((1 << RANDOM_BITS) - 1) == 0xABCDE


def test_new_event_id_is_a_26_character_ulid_near_now() -> None:
    event_id = new_event_id()
    assert len(event_id) == 26
    assert abs(ULID.from_str(event_id).milliseconds - ULID().milliseconds) < 60_000


def test_ids_in_one_millisecond_count_up_from_one_draw_of_randomness() -> None:
    draws = iter([5, 999])
    ids = MonotonicUlids(clock_ms=SteppedClock(), randomness=lambda: next(draws))
    values = [int(ULID.from_str(ids.new())) for _ in range(1000)]
    assert values == [(T0_MS << RANDOM_BITS) + 5 + n for n in range(1000)]


def test_a_new_millisecond_draws_fresh_randomness() -> None:
    clock = SteppedClock()
    draws = iter([7, 3])
    ids = MonotonicUlids(clock_ms=clock, randomness=lambda: next(draws))
    first = ids.new()
    clock.ms += 1
    second = ULID.from_str(ids.new())
    assert (second.milliseconds, int(second) & 0xFF) == (T0_MS + 1, 3)
    assert first < str(second)


def test_a_clock_stepping_back_never_gives_a_smaller_id() -> None:
    """python-ulid takes the earlier time with fresh random bits: its next id can sort first."""
    clock = SteppedClock()
    ids = MonotonicUlids(clock_ms=clock, randomness=lambda: 2**79)
    before = ids.new()
    clock.ms -= 5_000
    after = ids.new()
    assert after > before
    assert int(ULID.from_str(after)) == int(ULID.from_str(before)) + 1


def test_random_bits_running_out_carry_into_the_timestamp() -> None:
    ids = MonotonicUlids(clock_ms=SteppedClock(), randomness=lambda: (1 << RANDOM_BITS) - 1)
    last_of_the_millisecond = ids.new()
    carried = ULID.from_str(ids.new())
    assert carried.milliseconds == T0_MS + 1
    assert int(carried) & ((1 << RANDOM_BITS) - 1) == 0
    assert str(carried) > last_of_the_millisecond


def test_ids_sort_in_the_order_they_were_made_and_never_repeat() -> None:
    clock = SteppedClock()
    ids = MonotonicUlids(clock_ms=clock, randomness=lambda: int.from_bytes(os.urandom(10), "big"))
    made = []
    for step in range(3000):
        clock.ms += (1, 0, 0, -2)[step % 4]  # forward, the same millisecond twice, back
        made.append(ids.new())
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_forgetting_after_a_fork_draws_fresh_randomness_in_the_same_millisecond() -> None:
    """A forked child shares its parent's last id; counting on from it would repeat the parent's next ids."""
    draws = iter([100, 200])
    ids = MonotonicUlids(clock_ms=SteppedClock(), randomness=lambda: next(draws))
    ids.new()
    ids.forget_after_fork()
    assert int(ULID.from_str(ids.new())) & 0xFFFF == 200


def test_a_forked_child_does_not_repeat_its_parents_next_id(monkeypatch) -> None:
    """The process's source forgets in a forked child (os.register_at_fork); the clock is held still."""
    from shared.events import ulids

    monkeypatch.setattr(ulids._PROCESS_ULIDS, "_clock_ms", SteppedClock())
    new_event_id()
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        os.write(writing, new_event_id().encode())
        os._exit(0)
    os.close(writing)
    os.waitpid(child, 0)
    childs = os.read(reading, 64).decode()
    os.close(reading)
    assert childs != new_event_id()
