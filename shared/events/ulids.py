"""ULIDs for event ids and other public ids: monotonic within a process, ~3x cheaper than python-ulid.

The format is python-ulid's (and the spec's): 26 Crockford base32 characters, the first 10 the
48-bit millisecond timestamp, the last 16 80 random bits, so the strings sort by creation time.
Within one millisecond the next id is the previous one plus one (the spec's monotonic mode), and
the same holds when the wall clock steps back: an id is never smaller than the one before it in
this process. An increment that overflows the 80 random bits carries into the timestamp (one
millisecond ahead), so there is no error case. A forked child starts afresh, so it never repeats
its parent's next ids.

Why not `str(ulid.ULID())`: it builds an object through a generator and a policy, then encodes it
in Python one 5-bit digit at a time (~3.1 us an id against ~1.0 here; `bench/event_encoding.py`).
Here the timestamp's 10 characters are encoded once per millisecond and the random part as 8
lookups of 10 bits each.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = tuple(high + low for high in CROCKFORD for low in CROCKFORD)
"""Every 10-bit value as its two base32 characters: `_PAIRS[v]` for 0 <= v < 1024."""

RANDOM_BITS = 80
_RANDOM_MASK = (1 << RANDOM_BITS) - 1


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def fresh_randomness() -> int:
    """80 random bits from the operating system's CSPRNG."""
    return int.from_bytes(os.urandom(RANDOM_BITS // 8), "big")


def _timestamp_chars(ms: int) -> str:
    """The first 10 characters of a ULID: 50 bits, the top 2 always zero."""
    return _PAIRS[ms >> 40] + _PAIRS[(ms >> 30) & 1023] + _PAIRS[(ms >> 20) & 1023] + _PAIRS[(ms >> 10) & 1023] + _PAIRS[ms & 1023]


def _random_chars(bits: int) -> str:
    """The last 16 characters of a ULID: its 80 random bits."""
    return (
        _PAIRS[(bits >> 70) & 1023] + _PAIRS[(bits >> 60) & 1023] + _PAIRS[(bits >> 50) & 1023]
        + _PAIRS[(bits >> 40) & 1023] + _PAIRS[(bits >> 30) & 1023] + _PAIRS[(bits >> 20) & 1023]
        + _PAIRS[(bits >> 10) & 1023] + _PAIRS[bits & 1023]
    )  # fmt: skip


def encode_ulid(value: int) -> str:
    """The 26-character string of a 128-bit ULID value (what `str(ulid.ULID.from_int(value))` gives)."""
    return _timestamp_chars(value >> RANDOM_BITS) + _random_chars(value & _RANDOM_MASK)


class MonotonicUlids:
    """A source of ULID strings, each greater than the one before (see the module docstring).

    Thread-safe; `clock_ms` and `randomness` are parameters so tests can step the clock.
    """

    def __init__(
        self, clock_ms: Callable[[], int] = wall_clock_ms, randomness: Callable[[], int] = fresh_randomness
    ) -> None:
        self._clock_ms = clock_ms
        self._randomness = randomness
        self.forget_after_fork()

    def forget_after_fork(self) -> None:
        """Start afresh: the next id takes new random bits, so a forked child never repeats its parent's
        next ids (and a new lock, in case another thread held the old one at the fork)."""
        self._lock = threading.Lock()
        self._last = 0  # the last id handed out, as its 128-bit value
        self._prefix_ms = -1  # the millisecond `_prefix` encodes
        self._prefix = ""

    def new(self) -> str:
        """The next ULID string."""
        ms = self._clock_ms()
        with self._lock:
            if ms > self._last >> RANDOM_BITS:
                self._last = (ms << RANDOM_BITS) | self._randomness()
            else:  # the same millisecond, or the clock stepped back: stay above the last id
                self._last += 1
            value = self._last
            head = value >> RANDOM_BITS
            if head != self._prefix_ms:
                self._prefix_ms, self._prefix = head, _timestamp_chars(head)
            prefix = self._prefix
        return prefix + _random_chars(value & _RANDOM_MASK)


_PROCESS_ULIDS = MonotonicUlids()
os.register_at_fork(after_in_child=_PROCESS_ULIDS.forget_after_fork)

new_ulid: Callable[[], str] = _PROCESS_ULIDS.new
"""A new ULID string from this process's monotonic source."""
