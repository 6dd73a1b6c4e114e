"""Re-checking tasks: probe their S3 inputs, then decide and report in one transaction.

`Checker.recheck(task_ids, causes)` is the recipe shared by the event handler and the sweep:

1. list the S3 keys still to probe for those tasks (no lock held);
2. HEAD each distinct key once (`probing.probe_keys`), outside any transaction;
3. one transaction: lock the tasks (`FOR UPDATE`, id order), `review` each (pure), save input
   states and readiness, emit `task.readiness_changed` where `review` says one is due.

The lock and the comparison with what was last reported make concurrent re-checks of one task
(handler and sweep, or two instances) report a change once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from services.common.runtime import Emitter
from shared.events.emission import Emission
from services.readiness.checks import InputKind, Probe, Readiness, ref_to_json, review, signal_that_readied
from services.readiness.probing import HeadsObjects, ProbeResult, probe_keys
from services.readiness.store import (
    InputUpdate,
    ReadinessUpdate,
    TrackedTask,
    lock_tracked,
    probe_targets,
    save_checks,
    waiting_tasks,
)
from shared.events import Envelope, TaskReadinessChanged
from shared.events.subjects import task_subject


@dataclass
class Checker:
    """What a re-check needs: the database, the outbox emitter, an object store, and limits."""

    pool: asyncpg.Pool
    emitter: Emitter
    store: HeadsObjects
    probe_concurrency: int = 32
    sweep_batch: int = 500

    @property
    def schema(self) -> str:
        return self.emitter.schema

    async def recheck(self, task_ids: Sequence[str], causes: Mapping[str, str] | None = None) -> list[Envelope]:
        """Re-check `task_ids` (see module docstring); `causes` maps a task to the event id that
        prompted the check. Returns the events emitted."""
        if not task_ids:
            return []
        keys = await probe_targets(self.pool, self.schema, task_ids)
        probes = await probe_keys(self.store, keys, concurrency=self.probe_concurrency)
        async with self.pool.acquire() as conn, conn.transaction():
            return await self.decide_and_save(conn, task_ids, probes, causes or {})

    async def sweep(self) -> list[Envelope]:
        """Re-check the open tasks that are not ready yet, least recently checked first."""
        return await self.recheck(await waiting_tasks(self.pool, self.schema, self.sweep_batch))

    async def decide_and_save(
        self,
        conn: asyncpg.Connection,
        task_ids: Sequence[str],
        probes: Mapping[str, ProbeResult],
        causes: Mapping[str, str],
    ) -> list[Envelope]:
        tracked = await lock_tracked(conn, self.schema, task_ids)
        verdicts = {key: result.probe for key, result in probes.items()}
        input_updates: list[InputUpdate] = []
        reported: list[ReadinessUpdate] = []
        found_by: dict[str, str | None] = {}  # task -> the event that prompted or explains its report
        for task in tracked:
            outcome = review(task.inputs, task.previous, verdicts)
            input_updates += _input_updates(task, outcome.availability, probes)
            if outcome.emit and outcome.readiness is not None:
                reported.append(ReadinessUpdate(task.task_id, outcome.readiness))
                found_by[task.task_id] = causes.get(task.task_id) or signal_that_readied(task.inputs, outcome.availability)
        await save_checks(conn, self.schema, input_updates, reported, [t.task_id for t in tracked])
        by_id = {t.task_id: t for t in tracked}
        emissions = [self._emission(u, by_id[u.task_id], found_by[u.task_id]) for u in reported]
        return await self.emitter.emit(conn, emissions) if emissions else []

    def _emission(self, update: ReadinessUpdate, task: TrackedTask, cause_id: str | None) -> Emission:
        """The report; the first one is caused by the submission unless something else prompted it."""
        readiness: Readiness = update.readiness
        if cause_id is None and task.previous is None:
            cause_id = task.submitted_event_id
        return Emission(
            TaskReadinessChanged,
            subject=task_subject(update.task_id),
            data={
                "task_id": update.task_id,
                "ready": readiness.ready,
                "missing_inputs": [ref_to_json(ref) for ref in readiness.missing],
                "ready_fraction": readiness.ready_fraction,
            },
            actor=self.emitter.actor,
            correlation_id=task.correlation_id,
            causation_id=cause_id,
        )


def _input_updates(
    task: TrackedTask, availability: Sequence[bool | None], probes: Mapping[str, ProbeResult]
) -> list[InputUpdate]:
    """Rows to write: inputs whose availability changed or that were probed this round."""
    updates = []
    for state, available in zip(task.inputs, availability, strict=True):
        result = probes.get(state.key) if state.kind is not InputKind.DATASET else None
        if available == state.available and result is None:
            continue
        error = result.error if result is not None and result.probe is Probe.ERROR else None
        updates.append(InputUpdate(task.task_id, state.position, available, error, probed=result is not None))
    return updates
