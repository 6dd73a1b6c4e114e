"""`cf:reports` -> the dispatcher: registrations, heartbeats, progress, checkpoints, finished runs.

One batch = one write step (the matcher's shape):

1. inbox: record the reports as consumed; duplicates and those already applied drop out;
2. load: the leases they name that are not in the working set (ended ones), with their tasks;
3. fold: `shared.leasing.report_fold.apply_reports` (pure; fencing on EVERY claim), given when each
   report reached the stream (its entry id, `shared.delivery.arrival`), not only when it is applied;
   memory takes the changes over;
4. save (`store.save_report_effects`, once the step before has committed): changed
   records, events and commands, rejected reports, GPU utilisation; a rejected report is also logged
   with its reason.

A step aborted because a step under it did not commit is decided again at once (`commit_order.again_if_aborted`).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.dispatcher.commit_order import again_if_aborted
from services.dispatcher.context import Dispatcher
from services.dispatcher.store import save_report_effects
from shared.delivery.arrival import Arrived
from shared.delivery.inbox import record_consumed_many
from shared.events.reports import AgentReport
from shared.leasing.report_fold import ReportEffects, apply_reports, claims_of
from shared.logging import get_logger

log = get_logger(__name__)

REPORTS_CONSUMER = "dispatcher:reports"


async def handle_reports(dc: Dispatcher, arrived: Sequence[Arrived[AgentReport]]) -> None:
    """Apply a batch of agent reports, each with when it reached `cf:reports` (see the module docstring)."""
    await again_if_aborted(lambda: reports_step(dc, arrived))


async def reports_step(dc: Dispatcher, arrived: Sequence[Arrived[AgentReport]]) -> None:
    """Steps 1-4 of the module docstring: one write step over the batch."""
    arrived_at = {a.envelope.event_id: a.arrived_at for a in reversed(arrived)}  # a duplicate: its first copy
    unique = list({a.envelope.event_id: a.envelope for a in arrived}.values())
    async with dc.write_step() as step:
        fresh = await record_consumed_many(step.conn, dc.schema, REPORTS_CONSUMER, [r.event_id for r in unique])
        todo = [r for r in unique if r.event_id in fresh]
        if not todo:
            return
        named = {claim.lease_id for report in todo for claim in claims_of(report)}
        ended = await step.load_leases(named - step.state.leases.keys())
        tasks = await step.load_tasks({lease.task_id for lease in ended.values()} - step.state.tasks.keys())
        book = step.state.book(tasks, ended)
        effects: ReportEffects = apply_reports(book, todo, step.now, dc.rules, arrived_at)
        step.write(effects.changes, lambda conn, stored: save_report_effects(conn, dc.schema, dc.emitter, effects, stored),
                   read=book)
    for rejected in effects.rejected:
        log.warning("agent report rejected", report_type=rejected.report_type, agent_id=rejected.agent_id,
                    lease_id=rejected.lease_id, fencing_token=rejected.fencing_token, count=rejected.count,
                    reason=rejected.refusal.reason.value, detail=rejected.refusal.detail)
    if effects.coalesced:
        log.debug("agent reports coalesced", count=effects.coalesced)
    if effects.capacity_changed:
        dc.request_cycle()
