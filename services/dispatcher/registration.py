"""`report.registered`: an agent announces its node — at start, and again periodically.

The node row is upserted; `node.registered` is emitted only when something changed (a new node,
another agent, card type, GPU count or mode, or a node that was lost), so periodic
re-registrations do not flood the log.

The active leases on the node fall in three groups (docs/agent.md, "Protocol"):

- listed in `held_leases` with the right agent and token: still running — renewed;
- granted AFTER the agent process's `started_at` but not listed: the grant may still be on its
  way through the outbox and the inbox — left alone (the agent's `report.finished` or the TTL
  ends it);
- every other one is lost with the old agent process: it ends at once (`lease.released(revoked)`,
  task requeued `agent_failed` from its last checkpoint) instead of waiting for the TTL.

Listed leases the dispatcher does not recognise are rejected like any other report.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.leasing.fencing import LeaseClaim, check_claim, lease_facts
from shared.leasing.lease_end import Trigger
from shared.events import NodeRegistered
from shared.events.reports import AgentRegistered
from shared.events.subjects import node_subject

if TYPE_CHECKING:
    from services.dispatcher.reports import ReportStep


async def register_agent(step: ReportStep, report: AgentRegistered) -> None:
    """Upsert the node (+ `node.registered` on change), keep held leases, end the lost ones."""
    d = report.data
    if await _upsert_node(step, report):
        step.batch.add(NodeRegistered, subject=node_subject(d.node_id), cause=report, data={
            "node_id": d.node_id, "agent_id": d.agent_id, "card_type": d.card_type, "gpus": len(d.gpus),
            "mode": d.mode,
        })
        step.capacity_changed = True
    ids = [r["lease_id"] for r in await step.conn.fetch(
        f"SELECT lease_id FROM {step.schema}.leases WHERE node_id = $1 AND state = 'active'", d.node_id)]
    await step.lock(ids)
    on_node = [step.leases[i] for i in sorted(ids) if i in step.leases and step.leases[i]["state"] == "active"]
    claims = {h.lease_id: LeaseClaim(d.agent_id, h.lease_id, h.task_id, h.fencing_token) for h in d.held_leases}
    kept = []
    for lease in on_node:
        claim = claims.get(lease["lease_id"])
        if claim is not None and check_claim(claim, lease_facts(lease)) is None:
            kept.append(lease)
        elif claim is None and _maybe_in_flight(lease, d.started_at):
            continue
        else:
            await step.end(lease, Trigger.AGENT_RESTARTED, report)
    known = {lease["lease_id"] for lease in kept}
    await step.accepted_leases(report, [c for lease_id, c in claims.items() if lease_id not in known])
    await step.renew(kept, report)


def _maybe_in_flight(lease: Any, agent_started_at: datetime | None) -> bool:
    """Granted after the agent process started, so its grant may not have reached the agent yet."""
    return agent_started_at is not None and lease["granted_at"] >= agent_started_at


async def _upsert_node(step: ReportStep, report: AgentRegistered) -> bool:
    """Write the node row; True when it is new or anything about it changed (or it was lost)."""
    d = report.data
    old = await step.conn.fetchrow(
        f"SELECT agent_id, card_type, gpus, mode, alive FROM {step.schema}.nodes WHERE node_id = $1 FOR UPDATE",
        d.node_id,
    )
    await step.conn.execute(
        f"INSERT INTO {step.schema}.nodes AS n (node_id, agent_id, card_type, gpus, mode, registered_at, last_seen, alive)"
        " VALUES ($1, $2, $3, $4, $5, $6, $6, true) ON CONFLICT (node_id) DO UPDATE SET agent_id = excluded.agent_id,"
        " card_type = excluded.card_type, gpus = excluded.gpus, mode = excluded.mode,"
        " registered_at = excluded.registered_at, last_seen = excluded.last_seen, alive = true",
        d.node_id, d.agent_id, d.card_type, len(d.gpus), d.mode.value, step.batch.now,
    )
    now = (d.agent_id, d.card_type, len(d.gpus), d.mode.value, True)
    return old is None or tuple(old) != now
