"""The hash chain: each link is sha256(prev_hash || body); the first row that breaks is named with its kind."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from services.audit.chain import EMPTY_HEAD, GENESIS, BreakKind, ChainHead, StoredLink, chain_from, find_break, link


def stored(bodies: list[str]) -> list[StoredLink]:
    return [StoredLink(row.seq, f"E{row.seq}", row.body, row.prev_hash, row.hash) for row in chain_from(EMPTY_HEAD, bodies)]


def test_a_link_is_sha256_of_the_previous_hash_text_and_the_body() -> None:
    assert link(GENESIS, '{"a":1}') == hashlib.sha256(("0" * 64 + '{"a":1}').encode()).hexdigest()
    linked = chain_from(ChainHead(7, "f" * 64), ["x", "y"])
    assert [(r.seq, r.prev_hash) for r in linked] == [(8, "f" * 64), (9, linked[0].hash)]
    assert linked[1].hash == link(linked[0].hash, "y")


def test_an_intact_chain_has_no_break_and_resumes_from_a_head() -> None:
    rows = stored(["a", "b", "c", "d"])
    assert find_break(rows) is None
    assert find_break(rows[2:], ChainHead(2, rows[1].hash)) is None


@pytest.mark.parametrize(
    ("tamper", "kind"),
    [
        (lambda rows: rows[:2] + rows[3:], BreakKind.GAP),  # a row deleted
        (lambda rows: rows[:2] + [replace(rows[2], body="C")] + rows[3:], BreakKind.HASH),  # a body changed
        (lambda rows: rows[:2] + [replace(rows[2], hash="0" * 64)] + rows[3:], BreakKind.HASH),  # a hash changed
        (lambda rows: rows[:2] + [replace(rows[2], prev_hash="1" * 64)] + rows[3:], BreakKind.PREV_HASH),
    ],
)
def test_the_first_row_that_breaks_is_named(tamper, kind: BreakKind) -> None:
    broken = find_break(tamper(stored(["a", "b", "c", "d", "e"])))
    assert broken is not None
    assert (broken.seq, broken.kind) == ((4, kind) if kind is BreakKind.GAP else (3, kind))
    assert broken.detail


def test_a_rehashed_forgery_still_breaks_at_the_next_row() -> None:
    rows = stored(["a", "b", "c"])
    forged = replace(rows[1], body="B", hash=link(rows[1].prev_hash, "B"))  # the forger recomputed this row only
    broken = find_break([rows[0], forged, rows[2]])
    assert broken is not None and (broken.seq, broken.kind) == (3, BreakKind.PREV_HASH)
