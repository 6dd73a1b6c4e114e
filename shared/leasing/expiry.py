"""`expire`: the sweep's fold — leases not renewed within their TTL expire; silent nodes are lost.

An expired lease ends with `lease.expired` + `lease.released(expired)`, and its task is requeued
(`task.requeued(lease_expired)`, resuming from its last checkpoint) — or cancelled, if a cancel
was waiting for the agent. A node silent for `node_lost_after_s` — or for a lease TTL when one of
its leases expired after it was last heard from — is lost (`node.lost`, naming the leases still
on it; they expire by their own TTL) and leaves the snapshot, so a requeued task is not granted
straight back to a dead agent.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from shared.events import NodeLost
from shared.events.subjects import node_subject
from shared.leasing.lease_end import Trigger
from shared.leasing.records import LeaseBook, NodeRecord
from shared.leasing.work import BookChanges, LeaseRules, LeaseWork


def expire(book: LeaseBook, now: datetime, rules: LeaseRules) -> BookChanges:
    """Expire overdue leases, then mark silent nodes lost."""
    work = LeaseWork(book, now, rules)
    for lease in work.active_leases():
        if lease.expires_at < now:
            work.end_lease(lease, Trigger.EXPIRED)
    for node_id in sorted(book.nodes):
        node = work.node(node_id)
        assert node is not None
        silence_s = lost_after(node, now, rules)
        if silence_s is None:
            continue
        work.put(replace(node, alive=False))
        work.emit(NodeLost, node_subject(node_id), {
            "node_id": node_id, "agent_id": node.agent_id, "detail": f"no heartbeat for {silence_s:.0f}s",
            "lease_ids": [lease.lease_id for lease in work.leases_on_node(node_id)],
        })
    return work.changes()


def lost_after(node: NodeRecord, now: datetime, rules: LeaseRules) -> float | None:
    """The silence that condemns an alive node now, or None if it is not lost.

    Silent for `node_lost_after_s`: lost. Silent for a lease TTL, and not heard from since one of
    its leases expired: lost too — the expiry already proves the agent gone, and waiting longer
    would let the next cycle grant the requeued task straight back to it.
    """
    if not node.alive:
        return None
    if node.last_seen < now - timedelta(seconds=rules.node_lost_after_s):
        return rules.node_lost_after_s
    expired_since_seen = node.lease_expired_at is not None and node.lease_expired_at > node.last_seen
    if expired_since_seen and node.last_seen < now - timedelta(seconds=rules.lease_ttl_s):
        return rules.lease_ttl_s
    return None
