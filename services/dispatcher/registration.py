"""`report.registered`: an agent (re)starts and announces its node; what it no longer holds ends.

After an agent restart, the leases on its node fall in two groups. Those the agent lists as still
held (same agent, same fencing token) keep running and are renewed. Every other active lease on
the node ends at once (`lease.released(revoked)`, the task requeued with reason `agent_failed`
and its last checkpoint) instead of waiting for the TTL. Held leases the dispatcher does not
recognise are rejected like any other report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.dispatcher.fencing import LeaseClaim, check_claim, lease_facts
from services.dispatcher.leases import end_lease, lock_leases
from services.dispatcher.transitions import Trigger
from shared.events import NodeRegistered
from shared.events.reports import AgentRegistered
from shared.events.subjects import node_subject

if TYPE_CHECKING:
    from services.dispatcher.reports import ReportStep


async def register_agent(step: ReportStep, report: AgentRegistered) -> None:
    """Upsert the node, emit `node.registered`, keep held leases, end the ones the agent lost."""
    d, now = report.data, step.batch.now
    await step.conn.execute(
        f"INSERT INTO {step.schema}.nodes AS n (node_id, agent_id, card_type, gpus, mode, registered_at, last_seen, alive)"
        " VALUES ($1, $2, $3, $4, $5, $6, $6, true) ON CONFLICT (node_id) DO UPDATE SET agent_id = excluded.agent_id,"
        " card_type = excluded.card_type, gpus = excluded.gpus, mode = excluded.mode,"
        " registered_at = excluded.registered_at, last_seen = excluded.last_seen, alive = true",
        d.node_id, d.agent_id, d.card_type, len(d.gpus), d.mode.value, now,
    )
    step.batch.add(NodeRegistered, subject=node_subject(d.node_id), cause=report, data={
        "node_id": d.node_id, "agent_id": d.agent_id, "card_type": d.card_type, "gpus": len(d.gpus), "mode": d.mode,
    })
    step.capacity_changed = True
    on_node = await lock_leases(step.conn, step.dc.schema, "l.state = 'active' AND l.node_id = $1", d.node_id)
    claims = {h.lease_id: LeaseClaim(d.agent_id, h.lease_id, h.task_id, h.fencing_token) for h in d.held_leases}
    kept = []
    for lease in on_node:
        claim = claims.get(lease["lease_id"])
        if claim is not None and check_claim(claim, lease_facts(lease)) is None:
            kept.append(lease)
        else:
            await end_lease(step.conn, step.batch, lease, Trigger.AGENT_RESTARTED, cause=report,
                            revoke_grace_s=step.dc.config.revoke_grace_s)
    known = {lease["lease_id"] for lease in kept}
    unknown = [claim for lease_id, claim in claims.items() if lease_id not in known]
    await step.accepted_leases(report, unknown)  # records why each one is refused
    await step.renew(kept, report)

