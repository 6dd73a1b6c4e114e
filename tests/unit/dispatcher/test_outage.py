"""Outages of the report path (`shared.leasing.outage`) and what the sweep does during and after them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.leasing.expiry import expire
from shared.leasing.outage import Outage, OutageSource, OutageWatch, lease_deadline
from shared.leasing.work import LeaseRules
from tests.unit.dispatcher.builders import NOW, a_book, a_lease_record, a_node_record, a_task_record

RULES = LeaseRules(lease_ttl_s=6.0, node_lost_after_s=15.0, claim_after_s=5.0)
S = timedelta(seconds=1)
REDIS, POSTGRES = OutageSource.REDIS, OutageSource.POSTGRES


def kinds(changes) -> list[str]:  # noqa: ANN001
    return [e.event_type.model_fields["type"].default for e in changes.emissions]


def overdue_book(**node):  # noqa: ANN003, ANN201
    """T1 under L1, whose TTL ran out 4 s ago; its node last seen 20 s ago."""
    return a_book(a_node_record(last_seen=NOW - 20 * S, **node), a_task_record(),
                  a_lease_record(expires_at=NOW - 4 * S))


def test_without_an_outage_an_overdue_lease_expires_and_a_silent_node_is_lost() -> None:
    assert kinds(expire(overdue_book(), NOW, RULES)) == ["lease.expired", "lease.released", "task.requeued", "node.lost"]


def test_during_an_outage_nothing_expires_and_no_node_is_lost() -> None:
    outage = Outage(NOW - 30 * S, None, frozenset({REDIS}))
    assert not expire(overdue_book(), NOW, RULES, outage)


@pytest.mark.parametrize(("ended_s_ago", "expires"), [
    (10, False),  # ended 10 s ago: grace = 6 s TTL + 5 s claim delay, 1 s left
    (12, True),   # grace over: the agent had a TTL to be heard, and its pending reports were claimed
])  # fmt: skip
def test_after_an_outage_a_lease_alive_when_it_began_gets_a_ttl_plus_the_claim_delay(ended_s_ago: int,
                                                                                      expires: bool) -> None:
    outage = Outage(NOW - 40 * S, NOW - ended_s_ago * S, frozenset({POSTGRES}))
    changes = expire(a_book(a_node_record(), a_task_record(), a_lease_record(expires_at=NOW - 30 * S)), NOW, RULES, outage)
    assert ("lease.expired" in kinds(changes)) is expires


def test_a_lease_already_overdue_before_the_outage_began_gets_no_grace() -> None:
    outage = Outage(NOW - 40 * S, NOW - 1 * S, frozenset({REDIS}))
    book = a_book(a_node_record(), a_task_record(), a_lease_record(expires_at=NOW - 41 * S))
    assert kinds(expire(book, NOW, RULES, outage))[:1] == ["lease.expired"]


def test_a_takeover_covers_every_lease_the_new_leader_finds() -> None:
    # The chaos run's case: PostgreSQL killed, the leader lost its lock; 16 s later the new leader's
    # first sweep expired a lease whose agent's clean report.finished was still pending in cf:reports.
    watch = OutageWatch(RULES)
    watch.took_over(NOW)
    book = a_book(a_node_record(last_seen=NOW - 20 * S), a_task_record(), a_lease_record(expires_at=NOW - 10 * S))
    assert not expire(book, NOW + 1 * S, RULES, watch.current())
    assert kinds(expire(book, NOW + 12 * S, RULES, watch.current()))[:1] == ["lease.expired"]


def test_a_lease_the_new_leader_grants_after_its_takeover_expires_on_its_own_ttl() -> None:
    # The takeover's outage is of unknown start, but it ended when this leader took over: a lease granted
    # afterwards has no report a predecessor left unread, so it gets no grace (before: TTL + claim delay).
    watch = OutageWatch(RULES)
    watch.took_over(NOW)
    own = a_lease_record(granted_at=NOW + 1 * S, expires_at=NOW + 3 * S)
    book = a_book(a_node_record(last_seen=NOW + 1 * S), a_task_record(), own)
    assert lease_deadline(own, watch.current(), RULES) == NOW + 3 * S
    assert kinds(expire(book, NOW + 4 * S, RULES, watch.current()))[:1] == ["lease.expired"]
    inherited = a_lease_record(granted_at=NOW - 1 * S, expires_at=NOW + 3 * S)
    assert lease_deadline(inherited, watch.current(), RULES) == NOW + 11 * S  # takeover + TTL 6 s + claim 5 s


def test_a_lease_granted_while_an_outage_is_under_way_or_before_it_resumed_keeps_the_cover() -> None:
    during = a_lease_record(granted_at=NOW - 5 * S, expires_at=NOW - 1 * S)
    assert lease_deadline(during, Outage(NOW - 30 * S, None, frozenset({REDIS})), RULES) is None
    watch = OutageWatch(RULES)
    watch.down(REDIS, NOW - 30 * S)
    watch.up(REDIS, NOW - 20 * S)
    between = a_lease_record(granted_at=NOW - 15 * S, expires_at=NOW - 9 * S)
    assert lease_deadline(between, watch.current(), RULES) == NOW - 9 * S  # after the end: its own TTL
    watch.down(POSTGRES, NOW - 12 * S)  # within the first outage's grace: the same outage goes on
    watch.up(POSTGRES, NOW - 2 * S)
    assert lease_deadline(between, watch.current(), RULES) == NOW + 9 * S  # alive while it resumed


def test_a_node_alive_when_the_outage_began_is_silent_only_from_its_end() -> None:
    outage = Outage(NOW - 60 * S, NOW - 10 * S, frozenset({REDIS}))
    assert not expire(a_book(a_node_record(last_seen=NOW - 50 * S)), NOW, RULES, outage)
    assert kinds(expire(a_book(a_node_record(last_seen=NOW - 50 * S)), NOW + 6 * S, RULES, outage)) == ["node.lost"]


def test_the_deadline_of_a_lease_renewed_after_the_outage_is_its_own() -> None:
    outage = Outage(NOW - 60 * S, NOW - 50 * S, frozenset({REDIS}))
    lease = a_lease_record(expires_at=NOW + 3 * S)
    assert lease_deadline(lease, outage, RULES) == NOW + 3 * S
    assert lease_deadline(lease, Outage(NOW - 60 * S, None, frozenset({REDIS})), RULES) is None


def test_the_watch_reports_an_outage_once_every_failing_source_is_back() -> None:
    watch = OutageWatch(RULES)
    assert watch.current() is None
    assert watch.down(REDIS, NOW) is True
    assert watch.down(POSTGRES, NOW + 2 * S) is False and watch.down(REDIS, NOW + 3 * S) is False
    assert watch.current() == Outage(NOW, None, frozenset({REDIS, POSTGRES}))
    assert watch.up(REDIS, NOW + 4 * S) is None and watch.is_down(POSTGRES)
    ended = watch.up(POSTGRES, NOW + 5 * S)
    assert ended == Outage(NOW, NOW + 5 * S, frozenset({REDIS, POSTGRES})) and ended.duration_s == 5.0
    assert watch.current() == ended and watch.up(POSTGRES, NOW + 6 * S) is None


def test_an_outage_within_the_previous_ones_grace_continues_it() -> None:
    watch = OutageWatch(RULES)
    watch.down(REDIS, NOW)
    watch.up(REDIS, NOW + 10 * S)
    watch.down(POSTGRES, NOW + 15 * S)  # 5 s after: the first outage's 11 s of grace were still running
    assert watch.current() == Outage(NOW, None, frozenset({REDIS, POSTGRES}))
    watch.up(POSTGRES, NOW + 16 * S)
    watch.down(REDIS, NOW + 40 * S)  # long after: a new outage
    assert watch.current() == Outage(NOW + 40 * S, None, frozenset({REDIS}))
