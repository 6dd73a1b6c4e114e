"""`expire`: the sweep's fold — leases not renewed within their TTL expire; silent nodes are lost.

An expired lease ends with `lease.expired` + `lease.released(expired)`, and its task is requeued
(`task.requeued(lease_expired)`, resuming from its last checkpoint) — or cancelled, if a cancel
was waiting for the agent. A node silent for `node_lost_after_s` — or for a lease TTL when one of
its leases expired after it was last heard from — is lost (`node.lost`, naming the leases still
on it; they expire by their own TTL) and leaves the snapshot, so a requeued task is not granted
straight back to a dead agent.

Silence counts only while the dispatcher could hear (`outage.py`): during a known outage of the
report path nothing expires and no node is lost; after one, the leases and nodes it covered get
their grace first.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from shared.events import NodeLost
from shared.events.subjects import node_subject
from shared.leasing.lease_end import Trigger
from shared.leasing.outage import Outage, lease_deadline, node_heard_since
from shared.leasing.records import LeaseBook, NodeRecord
from shared.leasing.work import BookChanges, LeaseRules, LeaseWork


def expire(book: LeaseBook, now: datetime, rules: LeaseRules, outage: Outage | None = None) -> BookChanges:
    """Expire overdue leases, then mark silent nodes lost (`outage`: the last known outage, if any)."""
    work = LeaseWork(book, now, rules)
    if outage is not None and outage.ongoing:
        return work.changes()
    for lease in work.active_leases():
        deadline = lease_deadline(lease, outage, rules)
        if deadline is not None and deadline < now:
            work.end_lease(lease, Trigger.EXPIRED)
    for node_id in sorted(book.nodes):
        node = work.node(node_id)
        assert node is not None
        silence_s = lost_after(node, now, rules, outage)
        if silence_s is None:
            continue
        work.put(replace(node, alive=False))
        work.emit(NodeLost, node_subject(node_id), {
            "node_id": node_id, "agent_id": node.agent_id, "detail": f"no heartbeat for {silence_s:.0f}s",
            "lease_ids": [lease.lease_id for lease in work.leases_on_node(node_id)],
        })
    return work.changes()


def lost_after(node: NodeRecord, now: datetime, rules: LeaseRules, outage: Outage | None = None) -> float | None:
    """The silence that condemns an alive node now, or None if it is not lost.

    Silent for `node_lost_after_s`: lost. Silent for a lease TTL, and not heard from since one of
    its leases expired: lost too — the expiry already proves the agent gone, and waiting longer
    would let the next cycle grant the requeued task straight back to it. Silence counts from
    `node_heard_since` (an outage's end, for a node alive when it began).
    """
    heard = node_heard_since(node, outage)
    if not node.alive or heard is None:
        return None
    if heard < now - timedelta(seconds=rules.node_lost_after_s):
        return rules.node_lost_after_s
    expired_since_seen = node.lease_expired_at is not None and node.lease_expired_at > node.last_seen
    if expired_since_seen and heard < now - timedelta(seconds=rules.lease_ttl_s):
        return rules.lease_ttl_s
    return None
