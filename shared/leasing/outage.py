"""Outages of the report path, and the grace they give leases and nodes (pure; `now` is a parameter).

The dispatcher hears agents only through `cf:reports`, applied in its write steps. While it cannot
(Redis unreachable, PostgreSQL unreachable, no leader at all before a takeover, or so far behind on
the stream that unread reports wait longer than half a lease TTL), an agent's
silence proves nothing: its heartbeats and `report.finished` may be waiting in the stream, or in
the agent's own queue. So, whenever the dispatcher KNOWS of such an outage:

- while it is under way, no lease expires and no node is lost (the sweep judges nothing);
- once it is over (at `ended_at`), a lease that was alive during it (granted before it ended, not
  expired when it began) does not expire before
  `ended_at + lease_ttl_s + claim_after_s` — one TTL for the agent to be heard again, plus the time
  after which the reports a failed batch left pending are claimed and applied again; a node alive
  then is not lost before `ended_at + node_lost_after_s`.

A new leader knows neither when its predecessor stopped nor what it left unread: a takeover is an
outage of unknown start that ends when the new leader takes over (every lease counts as alive at
its start) — but a lease the new leader grants itself after taking over was never alive during it
and expires on its own TTL. An outage that starts again within the grace of the previous one continues it (the
leases it covered keep their cover).

`OutageWatch` is the dispatcher's record of outages: `down(source, now)` when a probe or a write
step fails for a backend, `up(source, now)` when it works again; `current()` is what the sweep's
rules (`lease_deadline`, `node_heard_since`) apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from shared.leasing.records import LeaseRecord, NodeRecord
from shared.leasing.work import LeaseRules


class OutageSource(StrEnum):
    """What kept the dispatcher from hearing the agents."""

    REDIS = "redis"  # cf:reports could not be read
    POSTGRES = "postgres"  # reports could not be applied (a write step failed on its connection)
    LEADER = "leader"  # no leader applied reports before this one took over
    BACKLOG = "backlog"  # the oldest report not yet read from cf:reports waits longer than the backlog limit


BACKLOG_LIMIT_SHARE_OF_TTL = 0.5
"""The dispatcher is behind on `cf:reports` (a report storm, a slow machine) once the oldest report
it has not read waits longer than this share of the lease TTL: a heartbeat may be among them, so a
lease's silence proves nothing until it catches up."""


def report_backlog_s(first_unread_id: str | None, now: datetime) -> float:
    """Seconds the oldest unread report has waited (its stream id's milliseconds), 0 when none waits."""
    if first_unread_id is None:
        return 0.0
    appended_ms = int(first_unread_id.split("-", 1)[0])
    return max(0.0, now.timestamp() - appended_ms / 1000)


def behind_on_reports(first_unread_id: str | None, now: datetime, rules: LeaseRules) -> bool:
    return report_backlog_s(first_unread_id, now) > rules.lease_ttl_s * BACKLOG_LIMIT_SHARE_OF_TTL


@dataclass(frozen=True, slots=True)
class Outage:
    """One outage of the report path: `started_at` None = unknown (before a takeover), `ended_at`
    None = still under way."""

    started_at: datetime | None
    ended_at: datetime | None
    sources: frozenset[OutageSource]

    @property
    def ongoing(self) -> bool:
        return self.ended_at is None

    def covers(self, lease: LeaseRecord) -> bool:
        """Was this lease alive during the outage: granted before it ended, not yet expired when it began?

        A lease granted after the outage ended (a new leader's own grants after its takeover) cannot have
        a report the outage kept unread, so it gets no grace. `granted_at` is the granting leader's clock
        and `ended_at` this one's: like lease expiry itself, this assumes dispatcher clocks agree to well
        under a TTL."""
        granted_during_or_before = self.ended_at is None or lease.granted_at < self.ended_at
        alive_at_start = self.started_at is None or lease.expires_at >= self.started_at
        return granted_during_or_before and alive_at_start

    def grace_end(self, rules: LeaseRules) -> datetime | None:
        """Until when a covered lease cannot expire (None while the outage lasts)."""
        if self.ended_at is None:
            return None
        return self.ended_at + timedelta(seconds=rules.lease_ttl_s + rules.claim_after_s)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


def lease_deadline(lease: LeaseRecord, outage: Outage | None, rules: LeaseRules) -> datetime | None:
    """When the lease expires unless renewed: its `expires_at`, later for a lease an outage covered;
    None while an outage is under way (it cannot expire now)."""
    if outage is None or not outage.covers(lease):
        return lease.expires_at
    grace_end = outage.grace_end(rules)
    if grace_end is None:
        return None
    return max(lease.expires_at, grace_end)


def node_heard_since(node: NodeRecord, outage: Outage | None) -> datetime | None:
    """The instant a node's silence counts from: when it was last seen, or the end of an outage that
    began while it was alive (None while an outage is under way: its silence proves nothing)."""
    if outage is None:
        return node.last_seen
    if outage.ended_at is None:
        return None
    return max(node.last_seen, outage.ended_at)


class OutageWatch:
    """The dispatcher's record of report-path outages (see the module docstring)."""

    def __init__(self, rules: LeaseRules) -> None:
        self._rules = rules
        self._failing: set[OutageSource] = set()
        self._started: datetime | None = None  # of the outage under way
        self._sources: set[OutageSource] = set()  # every source that failed during it
        self._last: Outage | None = None  # the last one that ended

    def took_over(self, now: datetime) -> None:
        """This instance just became leader: whatever came before is an outage of unknown start."""
        self._last = Outage(None, now, frozenset({OutageSource.LEADER}))

    def down(self, source: OutageSource, now: datetime) -> bool:
        """`source` failed at `now`; True if that starts (or resumes) an outage."""
        if source in self._failing:
            return False
        starts = not self._failing
        if starts:
            previous = self._last
            grace_end = previous.grace_end(self._rules) if previous is not None else None
            if previous is not None and grace_end is not None and now <= grace_end:  # within its grace: one outage
                self._started, self._sources = previous.started_at, set(previous.sources)
            else:
                self._started, self._sources = now, set()
        self._failing.add(source)
        self._sources.add(source)
        return starts

    def up(self, source: OutageSource, now: datetime) -> Outage | None:
        """`source` works again; the outage that ended now, if this was the last failing source."""
        if source not in self._failing:
            return None
        self._failing.discard(source)
        if self._failing:
            return None
        self._last = Outage(self._started, now, frozenset(self._sources))
        return self._last

    def is_down(self, source: OutageSource) -> bool:
        return source in self._failing

    def current(self) -> Outage | None:
        """The outage under way, else the last one that ended, else None."""
        if self._failing:
            return Outage(self._started, None, frozenset(self._sources))
        return self._last
