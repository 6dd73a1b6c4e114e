"""Agent reports (`cf:reports`): registration, heartbeats, progress, checkpoints, finished runs.

One batch of reports = one transaction. EVERY report that names a lease is checked by
`fencing.check_claim` against the locked lease row first; a refused report is recorded in
`rejected_reports`, logged with its reason and never applied. Accepted reports:

- `report.registered`: upsert the node, `node.registered`; leases on the node the agent no longer
  holds end (`lease.released(revoked)`, task requeued `agent_failed`); held ones are renewed;
- `report.heartbeat`: the node is seen (a lost node is back: `node.registered`), GPU utilisation is
  kept, every listed lease is renewed (`lease.renewed` at most once per lease per
  `renewal_event_every_s`, counting the heartbeats it stands for);
- `report.progress` / `report.checkpointed`: the run has started (`task.started` once); a
  checkpoint becomes the task's `resume_from` (`task.checkpointed`);
- `report.finished`: the lease ends and the task moves (see `shared.leasing.lease_end.decide_lease_end`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg

from services.dispatcher.context import Dispatcher
from services.dispatcher.emitting import EventBatch
from shared.leasing.fencing import LeaseClaim, Refusal, Rejection, check_claim, lease_facts
from services.dispatcher.leases import LeaseEnder, RunOutcome, lock_leases, started_data, stop_zombies
from services.dispatcher.registration import register_agent
from shared.leasing.lease_end import Trigger
from shared.delivery.db import quote_schema
from shared.delivery.inbox import record_consumed_many
from shared.events import LeaseRenewed, NodeRegistered, TaskCheckpointed, TaskStarted
from shared.events.reports import AgentRegistered, AgentReport, Heartbeat, TaskFinished, TaskProgress
from shared.events.reports import TaskCheckpointed as CheckpointReport
from shared.events.subjects import lease_subject, node_subject, task_subject
from shared.logging import get_logger

log = get_logger(__name__)

REPORTS_CONSUMER = "dispatcher:reports"
Row = Any


@dataclass(frozen=True, slots=True)
class RejectedReport:
    report: AgentReport
    agent_id: str
    lease_id: str | None
    fencing_token: int | None
    refusal: Refusal


class ReportStep:
    """Applies the reports of one batch inside one transaction.

    The leases the batch names are locked once (`prefetch`) and kept as dicts that every step
    updates, so later reports of the batch see the effects of earlier ones; row updates that
    many reports share (ended leases, started runs, progress) are written in bulk by `finish`.
    """

    def __init__(self, dc: Dispatcher, conn: asyncpg.Connection, batch: EventBatch) -> None:
        self.dc, self.conn, self.batch = dc, conn, batch
        self.schema = quote_schema(dc.schema)
        self.ender = LeaseEnder(conn, batch, dc.config.revoke_grace_s)
        self.leases: dict[str, dict[str, Any]] = {}
        self.rejected: list[RejectedReport] = []
        self.started: set[str] = set()
        self.progress: dict[str, tuple[float | None, float | None]] = {}
        self.zombies: list[dict[str, Any]] = []  # ended leases an agent still says it runs
        self.capacity_changed = False

    async def prefetch(self, reports: Sequence[AgentReport]) -> None:
        """Lock every lease the batch names, in one query (id order: no deadlock between batches)."""
        await self.lock([claim.lease_id for report in reports for claim in claims_of(report)])

    async def lock(self, lease_ids: Sequence[str]) -> None:
        missing = sorted(set(lease_ids) - set(self.leases))
        if missing:
            rows = await lock_leases(self.conn, self.dc.schema, "l.lease_id = ANY($1::text[])", missing)
            self.leases.update((row["lease_id"], row) for row in rows)

    async def apply(self, report: AgentReport) -> None:
        if isinstance(report, Heartbeat):
            await self.heartbeat(report)
        elif isinstance(report, TaskFinished):
            await self.finished(report)
        elif isinstance(report, CheckpointReport):
            await self.checkpointed(report)
        elif isinstance(report, TaskProgress):
            await self.progressed(report)
        elif isinstance(report, AgentRegistered):
            await register_agent(self, report)

    async def finish(self) -> None:
        """Write the batch's bulk updates (ended leases first: a started run may have ended too)."""
        await self.ender.flush()
        if self.zombies:
            await stop_zombies(self.conn, self.batch, self.zombies, self.dc.config.revoke_grace_s)
        if self.started:
            ids = sorted(self.started)
            await self.conn.execute(f"UPDATE {self.schema}.leases SET started = true WHERE lease_id = ANY($1::text[])", ids)
            await self.conn.execute(
                f"UPDATE {self.schema}.tasks t SET state = 'running' FROM {self.schema}.leases l"
                " WHERE l.lease_id = ANY($1::text[]) AND t.task_id = l.task_id AND t.run = l.run AND t.state = 'leased'",
                ids,
            )
        if self.progress:
            ids = sorted(self.progress)
            await self.conn.execute(
                f"UPDATE {self.schema}.leases l SET progress = coalesce(p.progress, l.progress),"
                " output_units = coalesce(p.units, l.output_units)"
                " FROM unnest($1::text[], $2::float8[], $3::float8[]) AS p(lease_id, progress, units)"
                " WHERE l.lease_id = p.lease_id",
                ids, [self.progress[i][0] for i in ids], [self.progress[i][1] for i in ids],
            )

    # -- checks --------------------------------------------------------------------------------

    async def accepted_leases(self, report: AgentReport, claims: Sequence[LeaseClaim]) -> list[dict[str, Any]]:
        """The lease rows of the claims that pass fencing; the others are rejected."""
        await self.lock([claim.lease_id for claim in claims])
        accepted = []
        for claim in claims:
            lease = self.leases.get(claim.lease_id)
            refusal = check_claim(claim, lease_facts(lease))
            if refusal is None:
                accepted.append(lease)
            else:
                self.reject(report, claim.agent_id, refusal, claim.lease_id, claim.fencing_token)
        return accepted

    def reject(self, report: AgentReport, agent_id: str, refusal: Refusal, lease_id: str | None = None,
               token: int | None = None) -> None:
        log.warning("agent report rejected", report_type=report.type, agent_id=agent_id, lease_id=lease_id,
                    fencing_token=token, reason=refusal.reason.value, detail=refusal.detail)
        self.rejected.append(RejectedReport(report, agent_id, lease_id, token, refusal))

    # -- effects shared by the reports ----------------------------------------------------------

    async def end(self, lease: dict[str, Any], trigger: Trigger, cause: AgentReport,
                  outcome: RunOutcome = RunOutcome()) -> None:
        """End a lease (bulk-written at `finish`) and keep the batch's view of its task current."""
        await self.ender.end(lease, trigger, cause=cause, outcome=outcome)
        self.capacity_changed = True
        if lease["task_id"] in self.ender.task_states:
            self.set_task(lease["task_id"], task_state=self.ender.task_states[lease["task_id"]])

    def set_task(self, task_id: str, **columns: Any) -> None:
        for row in self.leases.values():
            if row["task_id"] == task_id:
                row.update(columns)

    def mark_started(self, lease: dict[str, Any], cause: AgentReport) -> None:
        """The first accepted report about a lease means its run started (`task.started` once)."""
        if lease["started"]:
            return
        lease["started"] = True
        self.started.add(lease["lease_id"])
        if lease["run"] == lease["task_run"] and lease["task_state"] == "leased":
            self.set_task(lease["task_id"], task_state="running")
            self.batch.add(TaskStarted, subject=task_subject(lease["task_id"]), cause=cause, data=started_data(lease))

    # -- reports -------------------------------------------------------------------------------

    async def finished(self, report: TaskFinished) -> None:
        d = report.data
        for lease in await self.accepted_leases(report, [claim_of(d)]):
            await self.end(lease, Trigger.FINISHED, report,
                           RunOutcome(exit_code=d.exit_code, output_units=d.output_units, error=d.error))

    async def progressed(self, report: TaskProgress) -> None:
        d = report.data
        for lease in await self.accepted_leases(report, [claim_of(d)]):
            old = self.progress.get(lease["lease_id"], (None, None))
            self.progress[lease["lease_id"]] = (_latest(d.progress, old[0]), _latest(d.output_units, old[1]))
            self.mark_started(lease, report)

    async def checkpointed(self, report: CheckpointReport) -> None:
        d = report.data
        for lease in await self.accepted_leases(report, [claim_of(d)]):
            self.mark_started(lease, report)
            output = await self.conn.fetchval(
                f"UPDATE {self.schema}.leases SET last_checkpoint = $2, last_checkpoint_at = $3,"
                " progress = coalesce($4, progress) WHERE lease_id = $1 RETURNING output_units",
                lease["lease_id"], d.checkpoint_uri, self.batch.now, d.progress,
            )
            output = _latest(self.progress.get(lease["lease_id"], (None, None))[1], output)
            if lease["run"] == lease["task_run"]:
                await self.conn.execute(f"UPDATE {self.schema}.tasks SET resume_from = $2 WHERE task_id = $1",
                                        lease["task_id"], d.checkpoint_uri)
                self.set_task(lease["task_id"], task_resume_from=d.checkpoint_uri)
            self.batch.add(TaskCheckpointed, subject=task_subject(d.task_id), cause=report, data={
                "task_id": d.task_id, "lease_id": d.lease_id, "checkpoint_uri": d.checkpoint_uri,
                "checksum": d.checksum, "progress": d.progress, "output_units": output,
            })

    async def heartbeat(self, report: Heartbeat) -> None:
        d = report.data
        node = await self.conn.fetchrow(
            f"WITH old AS (SELECT node_id, alive FROM {self.schema}.nodes WHERE node_id = $1 AND agent_id = $2"
            f" FOR UPDATE) UPDATE {self.schema}.nodes n SET last_seen = $3, alive = true FROM old"
            " WHERE n.node_id = old.node_id"
            " RETURNING n.node_id, n.agent_id, n.card_type, n.gpus, n.mode, old.alive AS was_alive",
            d.node_id, d.agent_id, self.batch.now,
        )
        if node is None:
            detail = f"node {d.node_id} of agent {d.agent_id} is not registered (the agent must register first)"
            self.reject(report, d.agent_id, Refusal(Rejection.UNKNOWN_NODE, detail))
            return
        await self.revive_if_lost(node, report)
        await self.save_utilisation(report)
        claims = claims_of(report)
        leases = await self.accepted_leases(report, claims)
        self.zombies += [self.leases[c.lease_id] for c in claims if _still_run_after_end(c, self.leases.get(c.lease_id))]
        await self.renew(leases, report)
        for lease in leases:
            self.mark_started(lease, report)

    async def renew(self, leases: Sequence[dict[str, Any]], cause: AgentReport) -> None:
        """Extend each lease by its TTL; coalesce the renewals into few `lease.renewed` events."""
        if not leases:
            return
        now = self.batch.now
        rows = await self.conn.fetch(
            f"UPDATE {self.schema}.leases SET expires_at = $2::timestamptz + ttl_s * interval '1 second',"
            " last_renewed_at = $2, renewals_unreported = renewals_unreported + 1 WHERE lease_id = ANY($1::text[])"
            " RETURNING lease_id, task_id, expires_at, renewals_unreported, renewal_reported_at",
            [lease["lease_id"] for lease in leases], now,
        )
        quiet_since = now - timedelta(seconds=self.dc.config.renewal_event_every_s)
        due = [r for r in rows if r["renewal_reported_at"] is None or r["renewal_reported_at"] <= quiet_since]
        for row in sorted(due, key=lambda r: r["lease_id"]):
            self.batch.add(LeaseRenewed, subject=lease_subject(row["lease_id"]), cause=cause, data={
                "lease_id": row["lease_id"], "task_id": row["task_id"], "until": row["expires_at"],
                "heartbeats": row["renewals_unreported"],
            })
        if due:
            await self.conn.execute(
                f"UPDATE {self.schema}.leases SET renewals_unreported = 0, renewal_reported_at = $2"
                " WHERE lease_id = ANY($1::text[])",
                [row["lease_id"] for row in due], now,
            )

    async def revive_if_lost(self, node: Row, cause: AgentReport) -> None:
        """A heartbeat from a node marked lost: it is back (`node.registered` again)."""
        if node["was_alive"]:
            return
        self.capacity_changed = True
        self.batch.add(NodeRegistered, subject=node_subject(node["node_id"]), cause=cause, data={
            "node_id": node["node_id"], "agent_id": node["agent_id"], "card_type": node["card_type"],
            "gpus": node["gpus"], "mode": node["mode"],
        })

    async def save_utilisation(self, report: Heartbeat) -> None:
        d = report.data
        if not d.gpus:
            return
        await self.conn.execute(
            f"INSERT INTO {self.schema}.gpu_utilisation AS g (node_id, gpu_index, util_pct, memory_used_gb, reported_at)"
            " SELECT $1, i, u, m, $5 FROM unnest($2::int[], $3::float8[], $4::float8[]) AS x(i, u, m)"
            " ON CONFLICT (node_id, gpu_index) DO UPDATE SET util_pct = excluded.util_pct,"
            " memory_used_gb = excluded.memory_used_gb, reported_at = excluded.reported_at",
            d.node_id, [g.index for g in d.gpus], [g.util_pct for g in d.gpus],
            [g.memory_used_gb for g in d.gpus], self.batch.now,
        )


def claim_of(data: Any) -> LeaseClaim:
    return LeaseClaim(data.agent_id, data.lease_id, data.task_id, data.fencing_token)


def claims_of(report: AgentReport) -> list[LeaseClaim]:
    """Every lease claim a report makes (heartbeats and registrations may make several)."""
    d = report.data
    if isinstance(report, (Heartbeat, AgentRegistered)):
        held = d.leases if isinstance(report, Heartbeat) else d.held_leases
        return [LeaseClaim(d.agent_id, h.lease_id, h.task_id, h.fencing_token) for h in held]
    return [claim_of(d)]


def _still_run_after_end(claim: LeaseClaim, lease: dict[str, Any] | None) -> bool:
    """The holding agent heartbeats a lease (right token) that has ended: a zombie run."""
    return (lease is not None and lease["state"] == "ended" and lease["agent_id"] == claim.agent_id
            and lease["fencing_token"] == claim.fencing_token)


def _latest(new: float | None, old: float | None) -> float | None:
    return old if new is None else new


async def handle_reports(dc: Dispatcher, reports: Sequence[AgentReport]) -> None:
    """Apply a batch of reports in one transaction (duplicates already applied are skipped)."""
    async with dc.writing() as conn:
        fresh = await record_consumed_many(conn, dc.schema, REPORTS_CONSUMER, [r.event_id for r in reports])
        step = ReportStep(dc, conn, dc.batch())
        todo = [r for r in {r.event_id: r for r in reports}.values() if r.event_id in fresh]
        await step.prefetch(todo)
        for report in todo:
            await step.apply(report)
        await step.finish()
        await save_rejections(conn, dc.schema, step.rejected)
        await step.batch.flush(conn)
    if step.capacity_changed:
        dc.request_cycle()


async def save_rejections(conn: asyncpg.Connection, schema: str, rejected: Sequence[RejectedReport]) -> None:
    """Record refused reports (`dispatcher.rejected_reports` is their log and their count)."""
    if not rejected:
        return
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.rejected_reports"
        " (report_id, report_type, agent_id, lease_id, fencing_token, reason, detail)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[])",
        [r.report.event_id for r in rejected], [r.report.type for r in rejected], [r.agent_id for r in rejected],
        [r.lease_id for r in rejected], [r.fencing_token for r in rejected],
        [r.refusal.reason.value for r in rejected], [r.refusal.detail for r in rejected],
    )
