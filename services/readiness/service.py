"""The readiness service: is each task's data there yet? (README.md has the picture.)

Consumes its events (group `readiness`) in batches from `cf:routed:readiness`, where the gate appends only
the types it handles (`shared.events.routing`). Per batch:

1. one transaction: inbox (each signal applied once; the other events are safe to apply again), then
   `task.submitted` -> track the task and its inputs; `data.ready_signalled` -> remember the
   dataset version, collect the open tasks waiting on it; terminal events (`task.cancelled`,
   `task.rejected`, `task.succeeded`, `task.failed`) -> stop checking the task;
2. re-check the collected tasks (`Checker.recheck`: S3 probes, then decide and report in a second
   transaction) — except when the batch collected only tasks it has just inserted and none of them
   has an S3 input: nothing is probed then, so they are decided and reported in the first
   transaction (`Checker.decide_and_save`): one transaction and four statements fewer per batch,
   and a submission is never left tracked but unreported.

A sweep (`ctx.every`, `CARDFLOW_READINESS_SWEEP_SECONDS`, default 5 s) re-checks open tasks that
are not ready yet; it also finishes any check a crash interrupted between steps 1 and 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.event_batches import events_stream_for, not_yet_handled
from services.common.runtime import ServiceContext, ServiceSpec, SkippedEntry, parse_events_of
from services.readiness.checks import plan_input_checks
from services.readiness.recheck import Checker
from services.readiness.store import close_tasks, insert_submitted, record_signals
from shared.delivery.consumer import reliable_batch_subscriber
from shared.events import (
    DataReadySignalled,
    Envelope,
    TaskCancelled,
    TaskFailed,
    TaskRejected,
    TaskSubmitted,
    TaskSucceeded,
)
from shared.logging import get_logger
from shared.names import READINESS_GROUP
from shared.storage import open_data_store

MIGRATIONS = Path(__file__).parent / "sql"

CLOSING_TYPES = frozenset({"task.cancelled", "task.rejected", "task.succeeded", "task.failed"})
HANDLED_TYPES = CLOSING_TYPES | {"task.submitted", "data.ready_signalled"}
REPEATABLE_TYPES = CLOSING_TYPES | {"task.submitted"}
"""Types whose second application changes nothing (`handle_events` says why): no inbox row."""
HANDLED_EVENTS = (TaskSubmitted, DataReadySignalled, TaskCancelled, TaskRejected, TaskSucceeded, TaskFailed)
"""Only these are parsed (and routed to readiness: `shared.events.routing.ROUTES`); any other entry
reaches the handler as a `SkippedEntry`."""
BATCH_SIZE = 200

log = get_logger(__name__)


class ReadinessSettings(BaseSettings):
    """Tuning of the readiness service (`CARDFLOW_READINESS_*`)."""

    model_config = SettingsConfigDict(env_prefix="CARDFLOW_READINESS_", extra="ignore")

    sweep_seconds: float = Field(5.0, gt=0, description="how often waiting tasks are re-checked")
    sweep_batch: int = Field(500, ge=1, description="tasks re-checked per sweep, least recently checked first")
    probe_concurrency: int = Field(32, ge=1, description="S3 HEAD requests in flight at once")


def make_spec(settings: ReadinessSettings | None = None) -> ServiceSpec:
    """The readiness `ServiceSpec`; tuning from `settings`, else from the environment at start."""

    async def setup(ctx: ServiceContext) -> None:
        tuning = settings or ReadinessSettings()
        store = await ctx.resources.enter_async_context(open_data_store(ctx.settings))
        checker = Checker(ctx.pool, ctx.emitter, store, tuning.probe_concurrency, tuning.sweep_batch)

        @reliable_batch_subscriber(
            ctx.broker,
            stream=events_stream_for(READINESS_GROUP, HANDLED_EVENTS),
            group=READINESS_GROUP,
            parse=parse_events_of(*HANDLED_EVENTS),
            parse_entry=True,
            consumer=f"readiness-{ctx.instance}",
            max_records=BATCH_SIZE,
        )
        async def on_events(events: list[Envelope | SkippedEntry]) -> None:
            await handle_events(ctx, checker, events)

        async def sweep(_: ServiceContext) -> None:
            await checker.sweep()

        ctx.every(tuning.sweep_seconds, sweep, name="sweep")

    return ServiceSpec(name="readiness", schema="readiness", migrations=MIGRATIONS, setup=setup)


SPEC = make_spec()


async def handle_events(ctx: ServiceContext, checker: Checker, events: Sequence[Envelope | SkippedEntry]) -> None:
    """Apply a batch of `cf:events` exactly once, then re-check the tasks it concerns. Only `data.ready`
    signals are recorded in the inbox: events of other types have nothing to apply; a closing event
    only closes a task still open, and a submission only inserts a task not tracked yet (`ON CONFLICT
    DO NOTHING`; its inputs and its re-check follow only that insert, and no task row is ever deleted)
    — applying either again changes nothing."""
    relevant = [event for event in events if isinstance(event, Envelope) and event.type in HANDLED_TYPES]
    if not relevant:
        return
    async with ctx.transaction() as conn:
        applied = await not_yet_handled(conn, ctx, relevant, repeatable=lambda event: event.type in REPEATABLE_TYPES)
        submitted = [e for e in applied if isinstance(e, TaskSubmitted)]
        signals = [e for e in applied if isinstance(e, DataReadySignalled)]
        new_tasks = await insert_submitted(conn, ctx.schema, submitted) if submitted else []
        waiting = await record_signals(conn, ctx.schema, signals) if signals else {}
        await close_tasks(conn, ctx.schema, {e.data.task_id: e.type for e in applied if e.type in CLOSING_TYPES})
        causes = {e.data.task_id: e.event_id for e in submitted} | waiting
        if new_tasks and not waiting and not _probes_needed(submitted, new_tasks):
            await checker.decide_and_save(conn, new_tasks, {}, causes)  # nothing to probe: decided right here
            return
    await checker.recheck([*new_tasks, *waiting], causes)


def _probes_needed(submitted: Sequence[TaskSubmitted], new_tasks: Sequence[str]) -> bool:
    """Whether any task inserted now has an S3 input: only a HEAD, outside any transaction, can tell."""
    inserted = set(new_tasks)
    return any(
        check.is_s3 for event in submitted if event.data.task_id in inserted
        for check in plan_input_checks(event.data.submission.inputs)
    )  # fmt: skip
