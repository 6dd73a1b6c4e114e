"""Behind on cf:reports: the dispatcher's own backlog counts as a report-path outage (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.leasing.outage import OutageSource, OutageWatch, behind_on_reports, lease_deadline, report_backlog_s
from shared.leasing.work import LeaseRules
from tests.unit.dispatcher.builders import a_lease_record

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.mark.parametrize(("first_unread", "waited_s", "behind"), [
    (None, 0.0, False),                       # nothing unread
    (f"{NOW_MS - 2_000}-0", 2.0, False),      # a normal batch in flight
    (f"{NOW_MS - 15_000}-7", 15.0, False),    # exactly half the TTL: not yet
    (f"{NOW_MS - 15_001}-0", 15.001, True),   # past half the TTL: a heartbeat may be waiting there
    (f"{NOW_MS + 500}-0", 0.0, False),        # Redis's clock a little ahead: no negative wait
])  # fmt: skip
def test_the_oldest_unread_report_decides(first_unread: str | None, waited_s: float, behind: bool) -> None:
    rules = LeaseRules(lease_ttl_s=30.0)
    assert report_backlog_s(first_unread, NOW) == pytest.approx(waited_s)
    assert behind_on_reports(first_unread, NOW, rules) is behind


def test_while_behind_no_lease_expires_and_after_it_gets_a_ttl_plus_the_claim_delay() -> None:
    rules = LeaseRules(lease_ttl_s=30.0, claim_after_s=30.0)
    watch = OutageWatch(rules)
    lease = a_lease_record(expires_at=NOW)
    assert watch.down(OutageSource.BACKLOG, NOW)
    assert lease_deadline(lease, watch.current(), rules) is None
    caught_up = NOW.replace(minute=5)
    watch.up(OutageSource.BACKLOG, caught_up)
    assert (lease_deadline(lease, watch.current(), rules) - caught_up).total_seconds() == 60.0
