"""The tick's sweep: leases not renewed within their TTL expire; silent nodes are lost.

An expired lease ends with `lease.expired` + `lease.released(expired)`, and its task is requeued
(`task.requeued(lease_expired)`, resuming from its last checkpoint) — or cancelled, if a cancel
was waiting for the agent. A node silent for `node_lost_after_s` — or for a lease TTL when one of its
leases just expired — is marked lost (`node.lost`, naming the leases still on it; they expire by their
own TTL) and leaves the snapshot, so a requeued task is not granted straight back to a dead agent.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg

from services.dispatcher.context import Dispatcher
from services.dispatcher.leases import LeaseEnder, lock_leases
from shared.leasing.lease_end import Trigger
from shared.delivery.db import quote_schema
from shared.events import NodeLost, utcnow
from shared.events.reasons import ReleaseReason
from shared.events.subjects import node_subject
from shared.logging import get_logger

log = get_logger(__name__)


async def sweep(dc: Dispatcher) -> int:
    """Expire overdue leases and mark silent nodes lost; return how many things changed."""
    now = utcnow()
    s = quote_schema(dc.schema)
    async with dc.writing() as conn:
        batch = dc.batch(now)
        expired = await lock_leases(conn, dc.schema, "l.state = 'active' AND l.expires_at < $1", now)
        ender = LeaseEnder(conn, batch, dc.config.revoke_grace_s)
        for lease in expired:
            await ender.end(lease, Trigger.EXPIRED)
        await ender.flush()
        lost = await lost_nodes(conn, dc, now)
        for node, silence_s in lost:
            await conn.execute(f"UPDATE {s}.nodes SET alive = false WHERE node_id = $1", node["node_id"])
            lease_ids = await conn.fetch(
                f"SELECT lease_id FROM {s}.leases WHERE node_id = $1 AND state = 'active' ORDER BY lease_id",
                node["node_id"],
            )
            batch.add(NodeLost, subject=node_subject(node["node_id"]), data={
                "node_id": node["node_id"], "agent_id": node["agent_id"],
                "detail": f"no heartbeat for {silence_s:.0f}s",
                "lease_ids": [row["lease_id"] for row in lease_ids],
            })
        await batch.flush(conn)
    if expired or lost:
        log.info("sweep", expired=[lease["lease_id"] for lease in expired], lost=[n["node_id"] for n, _ in lost])
    return len(expired) + len(lost)


async def lost_nodes(conn: asyncpg.Connection, dc: Dispatcher, now: datetime) -> list[tuple[asyncpg.Record, float]]:
    """Alive nodes to mark lost now (locked), each with the silence that condemns it.

    A node silent for `node_lost_after_s` is lost. So is a node silent for a lease TTL that has not
    been heard from since one of its leases expired: the expiry already proves the agent gone, and
    waiting longer would let the next cycle grant the requeued task straight back to it. (Stateless,
    so a node whose last report came just after the renewal is still caught by a later sweep.)
    """
    long_quiet = now - timedelta(seconds=dc.config.node_lost_after_s)
    ttl_quiet = now - timedelta(seconds=dc.config.lease_ttl_s)
    s = quote_schema(dc.schema)
    rows = await conn.fetch(
        f"SELECT n.node_id, n.agent_id, n.last_seen < $1 AS long_silent FROM {s}.nodes n"
        " WHERE n.alive AND (n.last_seen < $1 OR (n.last_seen < $2 AND EXISTS ("
        f"  SELECT 1 FROM {s}.leases l WHERE l.node_id = n.node_id AND l.end_reason = $3"
        "   AND l.ended_at > n.last_seen)))"
        " ORDER BY n.node_id FOR UPDATE OF n",
        long_quiet, ttl_quiet, ReleaseReason.EXPIRED.value,
    )
    return [(row, dc.config.node_lost_after_s if row["long_silent"] else dc.config.lease_ttl_s) for row in rows]
