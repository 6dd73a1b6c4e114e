"""The tick's sweep: leases not renewed within their TTL expire; silent nodes are lost.

An expired lease ends with `lease.expired` + `lease.released(expired)`, and its task is requeued
(`task.requeued(lease_expired)`, resuming from its last checkpoint) — or cancelled, if a cancel
was waiting for the agent. A node silent for `node_lost_after_s` — or for a lease TTL when one of its
leases just expired — is marked lost (`node.lost`, naming the leases still on it; they expire by their
own TTL) and leaves the snapshot, so a requeued task is not granted straight back to a dead agent.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from services.dispatcher.context import Dispatcher
from services.dispatcher.leases import LeaseEnder, lock_leases
from services.dispatcher.store import silent_nodes
from services.dispatcher.transitions import Trigger
from shared.delivery.db import quote_schema
from shared.events import NodeLost, utcnow
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
        lost = await lost_nodes(conn, dc, now, expired_on={lease["node_id"] for lease in expired})
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


async def lost_nodes(
    conn: asyncpg.Connection, dc: Dispatcher, now: datetime, expired_on: set[str]
) -> list[tuple[asyncpg.Record, float]]:
    """Nodes to mark lost now, each with the silence that condemns it.

    A node silent for `node_lost_after_s` is lost. So is a node whose lease just expired and that
    has not been heard from for a whole lease TTL either: the expiry already proves the agent gone,
    and waiting longer would let the next cycle grant the requeued task straight back to it.
    """
    lost = [(node, dc.config.node_lost_after_s) for node in await silent_nodes(conn, dc.schema, now, dc.config.node_lost_after_s)]
    seen = {node["node_id"] for node, _ in lost}
    if expired_on - seen:
        quiet = await silent_nodes(conn, dc.schema, now, dc.config.lease_ttl_s)
        lost += [(node, dc.config.lease_ttl_s) for node in quiet if node["node_id"] in expired_on - seen]
    return lost
