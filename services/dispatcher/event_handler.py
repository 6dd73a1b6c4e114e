"""`cf:events` -> the dispatcher: task facets, cancellations, operators' requests, quotas, usage (the matcher's shape).

One batch = one write step:

1. once per id: the relevant events, each event id once (others were skipped unparsed);
2. inbox: record them as consumed; the ones already consumed drop out (facets the fold applies at
   most once by itself, `task_facets.APPLIED_ONCE_BY_THE_FOLD`, get no inbox row: ~3 rows per task);
3. load: the tasks they name that are not in the working set (final ones, or never seen);
4. fold: `shared.leasing.task_facets.apply_events` (pure); memory takes the changes over;
5. save (`store.save_event_effects`, once the step before has committed): changed
   records, accounts (with their usage), events.

A step aborted because a step under it did not commit is decided again at once (`commit_order.again_if_aborted`).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.dispatcher.commit_order import again_if_aborted
from services.dispatcher.context import Dispatcher
from services.dispatcher.store import save_event_effects
from shared.delivery.inbox import record_consumed_many
from shared.events import Envelope
from shared.leasing.task_facets import APPLIED_ONCE_BY_THE_FOLD, RELEVANT, EventEffects, apply_events, task_ids_of
from shared.logging import get_logger

EVENTS_CONSUMER = "dispatcher:events"

log = get_logger(__name__)


async def handle_events(dc: Dispatcher, events: Sequence[object]) -> None:
    """Apply a batch of `cf:events` entries (see the module docstring)."""
    relevant: list[Envelope] = list({e.event_id: e for e in events if isinstance(e, RELEVANT)}.values())
    if relevant:
        await again_if_aborted(lambda: events_step(dc, relevant))


async def events_step(dc: Dispatcher, relevant: Sequence[Envelope]) -> None:
    """Steps 2-5 of the module docstring: one write step over the batch's relevant events."""
    async with dc.write_step() as step:
        guarded = [e.event_id for e in relevant if not isinstance(e, APPLIED_ONCE_BY_THE_FOLD)]
        fresh = await record_consumed_many(step.conn, dc.schema, EVENTS_CONSUMER, guarded) if guarded else set()
        todo = [e for e in relevant if isinstance(e, APPLIED_ONCE_BY_THE_FOLD) or e.event_id in fresh]
        if not todo:
            return
        book = step.state.book(tasks=await step.load_tasks(task_ids_of(todo) - step.state.tasks.keys()))
        effects: EventEffects = apply_events(book, todo, step.now, dc.rules)
        step.write(effects.changes, lambda conn, stored: save_event_effects(conn, dc.schema, dc.emitter, effects, stored),
                   read=book, accounts=effects.accounts)
    for refusal in effects.refused:
        log.warning("request not carried out", detail=refusal)  # a review or an operator's request
    if effects.wake:
        dc.request_cycle()
