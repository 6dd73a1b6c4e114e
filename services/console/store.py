"""Writes of the views service: fold a batch of events into `views.tasks`, `views.events`, the fleet.

One call per consumed batch, inside the batch's transaction:

1. task events (among them the `usage.recorded`s a `usage.batch_recorded` carries, each for its task):
   lock the batch's task ids (advisory, in a fixed order, so two views instances never interleave on
   one task), load their views, `evolve` in stream order (pure), then one
   multi-row upsert of the views and one multi-row insert of the history (each line with the
   `history_facts` its Chinese sentence is rendered from). A `ViewCache` keeps the
   views this process last read or wrote with their row version (`xmin`): the load sends the
   cached versions and gets the view's JSON back only for rows that changed since (another views
   instance, a rolled-back batch), so a view still as cached is not parsed again — a task's view
   is loaded about seven times on its way, and parsing it was the service's largest cost;
2. fleet events: nodes (registered / lost / drained / undrained) and leases (granted / ended, also by the release a
   `task.succeeded` / `task.failed` carries), as order-independent upserts.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import asyncpg

from services.common.bulk import column_arrays, execute_bulk
from services.console.sentences import history_facts
from shared.events import Envelope
from shared.events.carried import with_carried_releases, with_carried_usage
from shared.logging import get_logger
from shared.projection import evolve, task_id_of
from shared.task_view import TaskView

SCHEMA = "views"
LEASE_END_TYPES = {"lease.released", "lease.expired", "lease.revoked"}
DRAIN_TYPES = {"node.drained", "node.undrained"}
NODE_TYPES = {"node.registered", "node.lost"} | DRAIN_TYPES
"""Fleet events whose writes are not idempotent (a repeated `node.registered` after `node.lost` would revive
the node): the only ones the views record in their inbox. A lease's grant and end are upserts (the first end
recorded wins), safe to apply again."""
FLEET_TYPES = NODE_TYPES | {"lease.granted"} | LEASE_END_TYPES

log = get_logger(__name__)


class ViewCache:
    """The task views this process last read or wrote, each with the `xmin` of the row it came from
    or went to; the least recently used are forgotten beyond `capacity`. A cached view is used only
    while its row still has that `xmin` (any later write of the row changes it)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._views: OrderedDict[str, tuple[str, TaskView]] = OrderedDict()

    def cached(self, task_ids: Iterable[str]) -> dict[str, tuple[str, TaskView]]:
        """Task id -> (the row version its view was read or written at, the view), cached ids only."""
        return {task_id: self._views[task_id] for task_id in task_ids if task_id in self._views}

    def put(self, task_id: str, version: str, view: TaskView) -> None:
        self._views[task_id] = (version, view)
        self._views.move_to_end(task_id)
        while len(self._views) > self.capacity:
            self._views.popitem(last=False)


async def apply_events(conn: asyncpg.Connection, events: Sequence[Envelope], cache: ViewCache | None = None) -> None:
    """Project `events` (already de-duplicated, in stream order) in the caller's transaction."""
    tasks = [e for e in with_carried_usage(events) if task_id_of(e) is not None]
    await project_tasks(conn, tasks, cache or ViewCache(0))
    await project_fleet(conn, [e for e in with_carried_releases(events) if e.type in FLEET_TYPES])


async def project_tasks(conn: asyncpg.Connection, events: Sequence[Envelope], cache: ViewCache) -> None:
    if not events:
        return
    task_ids = sorted({task_id_of(e) for e in events})  # type: ignore[type-var]
    await conn.execute(
        "SELECT pg_advisory_xact_lock(k) FROM"
        " (SELECT hashtextextended('views.task:' || id, 0) AS k FROM unnest($1::text[]) AS id ORDER BY 1) AS keys",
        task_ids,
    )
    views = await load_views(conn, task_ids, cache)
    history: list[tuple[Envelope, TaskView]] = []
    for event in events:
        task_id = task_id_of(event)
        before = views.get(task_id)  # type: ignore[arg-type]
        after = evolve(before, event)
        if after is before or after is None:
            log.warning("event superseded or repeated; not applied", event_id=event.event_id, type=event.type)
            continue
        views[after.id] = after
        history.append((event, after))
    changed = {view.id: view for _, view in history}
    await save_views(conn, list(changed.values()), cache)
    await save_history(conn, history)


async def load_views(conn: asyncpg.Connection, task_ids: Sequence[str], cache: ViewCache) -> dict[str, TaskView]:
    """The stored views of `task_ids`: the cached one where the row is unchanged since (`xmin`),
    else read as JSON text and validated by pydantic in one step (and cached)."""
    known = cache.cached(task_ids)
    rows = await conn.fetch(
        f"SELECT t.id, t.xmin::text AS version,"
        " CASE WHEN t.xmin::text = c.version THEN NULL ELSE t.view::text END AS view"
        f" FROM {SCHEMA}.tasks AS t LEFT JOIN unnest($2::text[], $3::text[]) AS c(id, version) ON c.id = t.id"
        " WHERE t.id = ANY($1::text[])",
        list(task_ids), list(known), [version for version, _ in known.values()],
    )  # fmt: skip
    views: dict[str, TaskView] = {}
    for row in rows:
        view = known[row["id"]][1] if row["view"] is None else TaskView.model_validate_json(row["view"])
        cache.put(row["id"], row["version"], view)
        views[view.id] = view
    return views


async def save_views(conn: asyncpg.Connection, views: Sequence[TaskView], cache: ViewCache) -> None:
    if not views:
        return
    rows = await conn.fetch(
        f"INSERT INTO {SCHEMA}.tasks (id, state, project, idempotency_key, name, updated_at, view)"
        " SELECT id, state, project, idempotency_key, name, updated_at, view::json"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[])"
        " AS t(id, state, project, idempotency_key, name, updated_at, view)"
        " ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, project = EXCLUDED.project,"
        " idempotency_key = EXCLUDED.idempotency_key, name = EXCLUDED.name, updated_at = EXCLUDED.updated_at,"
        " view = EXCLUDED.view RETURNING id, xmin::text AS version",
        *column_arrays(views, ("id", "state.value", "project", "idempotency_key", "name", "last_event_at",
                               TaskView.model_dump_json)),
    )  # fmt: skip
    saved = {view.id: view for view in views}
    for row in rows:
        cache.put(row["id"], row["version"], saved[row["id"]])


async def save_history(conn: asyncpg.Connection, history: Sequence[tuple[Envelope, TaskView]]) -> None:
    if not history:
        return
    await conn.execute(
        f"INSERT INTO {SCHEMA}.events (task_id, event_id, type, occurred_at, actor, state, reason, detail, facts)"
        " SELECT t.task_id, t.event_id, t.type, t.occurred_at, t.actor, t.state, t.reason, t.detail, t.facts::json"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[],"
        " $8::text[], $9::text[]) AS t(task_id, event_id, type, occurred_at, actor, state, reason, detail, facts)"
        " ON CONFLICT DO NOTHING",
        [view.id for _, view in history],
        [event.event_id for event, _ in history],
        [event.type for event, _ in history],
        [event.occurred_at for event, _ in history],
        [event.actor for event, _ in history],
        [view.state.value for _, view in history],
        [view.reason for _, view in history],
        [view.reason_detail for _, view in history],
        [json.dumps(history_facts(view), ensure_ascii=False) for _, view in history],
    )


async def project_fleet(conn: asyncpg.Connection, events: Sequence[Envelope]) -> None:
    for event in events:
        if event.type == "node.registered":
            await _node_registered(conn, event)
        elif event.type == "node.lost":
            await _node_lost(conn, event)
        elif event.type in DRAIN_TYPES:
            await _node_drain(conn, event)
    grants = _first_per_lease(e for e in events if e.type == "lease.granted")
    ends = _first_per_lease(e for e in events if e.type in LEASE_END_TYPES)
    if grants:
        await _leases_granted(conn, grants)
    if ends:
        await _leases_ended(conn, ends)


def _first_per_lease(events: Iterable[Envelope]) -> list[Envelope]:
    """One event per lease (an upsert may touch a row once per statement); the first wins."""
    first: dict[str, Envelope] = {}
    for event in events:
        first.setdefault(event.data.lease_id, event)
    return list(first.values())


async def _node_registered(conn: asyncpg.Connection, event: Envelope) -> None:
    d = event.data
    await conn.execute(
        f"INSERT INTO {SCHEMA}.nodes (node_id, agent_id, card_type, gpus, mode, alive, registered_at)"
        " VALUES ($1, $2, $3, $4, $5, true, $6) ON CONFLICT (node_id) DO UPDATE SET agent_id = EXCLUDED.agent_id,"
        " card_type = EXCLUDED.card_type, gpus = EXCLUDED.gpus, mode = EXCLUDED.mode, alive = true,"
        " registered_at = EXCLUDED.registered_at, lost_at = NULL, detail = ''",
        d.node_id, d.agent_id, d.card_type, d.gpus, d.mode.value, event.occurred_at,
    )


async def _node_lost(conn: asyncpg.Connection, event: Envelope) -> None:
    d = event.data
    await conn.execute(
        f"UPDATE {SCHEMA}.nodes SET alive = false, lost_at = $2, detail = $3 WHERE node_id = $1",
        d.node_id, event.occurred_at, d.detail,
    )


async def _node_drain(conn: asyncpg.Connection, event: Envelope) -> None:
    """node.drained / node.undrained (the dispatcher's, in order): who, when, why."""
    drained = event.type == "node.drained"
    await conn.execute(
        f"UPDATE {SCHEMA}.nodes SET drained = $2, drained_at = $3, drained_by = $4, drain_reason = $5 WHERE node_id = $1",
        event.data.node_id, drained, event.occurred_at if drained else None, event.actor if drained else "",
        event.data.reason if drained else "",
    )


async def _leases_granted(conn: asyncpg.Connection, events: Sequence[Envelope]) -> None:
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.leases (lease_id, task_id, node_id, card_type, gpu_indices, granted_at)"
        " SELECT lease_id, task_id, node_id, card_type, string_to_array(gpus, ',')::integer[], granted_at"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])"
        " AS t(lease_id, task_id, node_id, card_type, gpus, granted_at)"
        " ON CONFLICT (lease_id) DO UPDATE SET node_id = EXCLUDED.node_id, card_type = EXCLUDED.card_type,"
        " gpu_indices = EXCLUDED.gpu_indices, granted_at = EXCLUDED.granted_at",
        events,
        ("data.lease_id", "data.task_id", "data.node_id", "data.card_type",
         lambda e: ",".join(map(str, e.data.gpu_indices)), "occurred_at"),
    )  # fmt: skip


async def _leases_ended(conn: asyncpg.Connection, ends: Sequence[Envelope]) -> None:
    """The first end recorded wins (a release after an expiry keeps the expiry as the reason)."""
    await conn.execute(
        f"INSERT INTO {SCHEMA}.leases AS l (lease_id, task_id, node_id, card_type, granted_at, ended_at, end_reason)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],"
        " $7::text[]) ON CONFLICT (lease_id) DO UPDATE SET ended_at = COALESCE(l.ended_at, EXCLUDED.ended_at),"
        " end_reason = COALESCE(l.end_reason, EXCLUDED.end_reason), node_id = COALESCE(l.node_id, EXCLUDED.node_id),"
        " card_type = COALESCE(l.card_type, EXCLUDED.card_type), granted_at = COALESCE(l.granted_at, EXCLUDED.granted_at)",
        [e.data.lease_id for e in ends],
        [e.data.task_id for e in ends],
        [getattr(e.data, "node_id", None) for e in ends],
        [getattr(e.data, "card_type", None) for e in ends],
        [getattr(e.data, "granted_at", None) for e in ends],
        [getattr(e.data, "ended_at", e.occurred_at) for e in ends],
        [_end_reason(e) for e in ends],
    )


def _end_reason(event: Envelope) -> str:
    if event.type == "lease.expired":
        return "expired"
    return event.data.reason.value
