"""The audit hash chain (pure): `hash_n = sha256(hash_{n-1} || body_n)` over the archive order.

`body_n` is the canonical JSON of event n exactly as it was archived (UTF-8 bytes); the chain
starts from `GENESIS` (64 zeros). Hashes are lower-case hex text, and `hash_{n-1}` enters the
digest as that text (ASCII), so anyone can recompute the chain with `sha256sum`-style tools:

    sha256(prev_hash.encode() + body.encode()).hexdigest()

- `link` is one step; `chain_from` numbers and links new events after the archive's last row;
- `find_break` walks stored rows and names the first one that does not hold (a changed body, a
  prev_hash that is not the previous row's hash, a missing sequence number).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

GENESIS = "0" * 64
"""The `prev_hash` of the first archived event."""


def link(prev_hash: str, body: str | bytes) -> str:
    """The hash of an event whose canonical JSON is `body`, following `prev_hash`."""
    data = body.encode() if isinstance(body, str) else body
    return hashlib.sha256(prev_hash.encode("ascii") + data).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The archive's last row: its sequence number and hash (`EMPTY_HEAD` for an empty archive)."""

    seq: int
    hash: str


EMPTY_HEAD = ChainHead(0, GENESIS)


@dataclass(frozen=True, slots=True)
class Linked:
    """A body with its place in the chain."""

    seq: int
    body: str
    prev_hash: str
    hash: str


def chain_from(head: ChainHead, bodies: Iterable[str]) -> list[Linked]:
    """Number `bodies` after `head` and link each to the one before."""
    linked: list[Linked] = []
    seq, prev = head.seq, head.hash
    for body in bodies:
        seq += 1
        digest = link(prev, body)
        linked.append(Linked(seq, body, prev, digest))
        prev = digest
    return linked


class BreakKind(StrEnum):
    """What is wrong with the first row that breaks the chain."""

    GAP = "gap"  # a sequence number is missing (a row was deleted) or out of order
    PREV_HASH = "prev_hash"  # the stored prev_hash is not the previous row's hash
    HASH = "hash"  # sha256(prev_hash || body) is not the stored hash: the body or hash changed


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first row where the chain does not hold, and why, in a sentence."""

    seq: int
    event_id: str
    kind: BreakKind
    detail: str


@dataclass(frozen=True, slots=True)
class StoredLink:
    """One archived row as far as the chain is concerned."""

    seq: int
    event_id: str
    body: str
    prev_hash: str
    hash: str


def find_break(rows: Sequence[StoredLink], head: ChainHead = EMPTY_HEAD) -> ChainBreak | None:
    """The first row of `rows` (consecutive, after `head`) that breaks the chain; None if all hold."""
    expected_seq, prev = head.seq + 1, head.hash
    for row in rows:
        if row.seq != expected_seq:
            return ChainBreak(row.seq, row.event_id, BreakKind.GAP,
                              f"expected sequence {expected_seq} next, found {row.seq}: rows are missing")  # fmt: skip
        if row.prev_hash != prev:
            return ChainBreak(row.seq, row.event_id, BreakKind.PREV_HASH,
                              f"prev_hash {row.prev_hash[:12]}… is not the hash of sequence {row.seq - 1} ({prev[:12]}…)")  # fmt: skip
        recomputed = link(row.prev_hash, row.body)
        if recomputed != row.hash:
            return ChainBreak(row.seq, row.event_id, BreakKind.HASH,
                              f"sha256(prev_hash || body) is {recomputed[:12]}…, the stored hash {row.hash[:12]}…:"
                              " the event's body or its hash was changed")  # fmt: skip
        expected_seq, prev = row.seq + 1, row.hash
    return None


def head_after(rows: Sequence[StoredLink], head: ChainHead = EMPTY_HEAD) -> ChainHead:
    """The head once `rows` (which hold) follow `head`."""
    return ChainHead(rows[-1].seq, rows[-1].hash) if rows else head
