"""Reads and writes of the `matcher` schema, one statement per table per batch.

Batches that change the fleet take the fleet lock exclusively, the others share it, so a
registration batch sees every task that a concurrent instance has left waiting or open (and
re-matches it), a submission batch never matches against a fleet that a running registration
batch is still changing, and a match is not closed while a registration batch re-ranks it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import asyncpg

from services.common.bulk import execute_bulk
from services.common.runtime import Emitter
from services.matcher.batch import BatchEffects, NodeState, TaskRow
from services.matcher.request import request_from_json, request_to_json
from shared.delivery.migrations import advisory_key

SCHEMA = "matcher"
_FLEET_LOCK = advisory_key("matcher", "fleet")


async def lock_fleet(conn: asyncpg.Connection, *, exclusive: bool) -> None:
    """Take the fleet lock until the transaction ends (exclusive to change the fleet)."""
    function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    await conn.execute(f"SELECT {function}($1)", _FLEET_LOCK)


async def load_nodes(conn: asyncpg.Connection) -> dict[str, NodeState]:
    rows = await conn.fetch(f"SELECT node_id, agent_id, card_type, gpus, alive, changed_at FROM {SCHEMA}.fleet")
    return {row["node_id"]: NodeState(**dict(row)) for row in rows}


class KeptFleet:
    """One instance's copy of `matcher.fleet`, loaded again only when the fleet's version moved.

    Every write of the fleet bumps `matcher.fleet_version` in its own transaction under the
    exclusive fleet lock; a reader holds the lock shared, so the version it reads and the nodes
    it loads belong together, and an unchanged version means the kept nodes are the table's.
    """

    def __init__(self) -> None:
        self._version: int | None = None
        self._nodes: Mapping[str, NodeState] = MappingProxyType({})

    async def nodes(self, conn: asyncpg.Connection) -> Mapping[str, NodeState]:
        """The fleet as committed, read-only (call with the fleet lock held)."""
        version = await conn.fetchval(f"SELECT version FROM {SCHEMA}.fleet_version")
        if version != self._version:
            self._nodes = MappingProxyType(await load_nodes(conn))
            self._version = version
        return self._nodes


async def load_pending(conn: asyncpg.Connection, *, unmatchable: bool = False) -> list[TaskRow]:
    """Tasks a registration may change: waiting (unmatchable for lack of a fitting card type in the
    fleet) and open (matched, not yet granted); with `unmatchable`, also those no card type of the
    catalog could run (a new catalog may change that). Each with its latest match's catalog hash."""
    statuses = ["waiting", "matched"] + (["unmatchable"] if unmatchable else [])
    arms = " UNION ALL ".join(
        f"SELECT t.task_id, t.project, t.request, t.status, t.last_match_id, t.last_detail, t.last_ranked,"
        f" coalesce(m.catalog_hash, '') AS last_catalog_hash FROM {SCHEMA}.tasks AS t"
        f" LEFT JOIN {SCHEMA}.matches AS m ON m.match_id = t.last_match_id WHERE t.status = '{status}'"
        for status in statuses
    )  # one arm per status, so that each uses its partial index
    rows = await conn.fetch(arms + " ORDER BY task_id")
    return [
        TaskRow(**{**dict(row), "request": request_from_json(row["request"]), "last_ranked": tuple(row["last_ranked"])})
        for row in rows
    ]


async def save_effects(conn: asyncpg.Connection, emitter: Emitter, effects: BatchEffects) -> None:
    """Write nodes, matches (with their events' ids), tasks and cancellations; append the events."""
    await save_nodes(conn, list(effects.nodes.values()))
    events = await emitter.emit(conn, effects.emissions) if effects.emissions else []
    await _save_matches(conn, effects, [event.event_id for event in events])
    await _save_tasks(conn, list(effects.tasks.values()))
    if effects.cancelled:
        await conn.execute(
            f"UPDATE {SCHEMA}.tasks SET status = 'cancelled', updated_at = now() WHERE task_id = ANY($1::text[])",
            sorted(effects.cancelled),
        )
    await _close(conn, effects.closed)


async def _close(conn: asyncpg.Connection, closed: dict[str, str]) -> None:
    """Close matches: matched/waiting -> granted | finished, granted -> finished (never back)."""
    if not closed:
        return
    ids = sorted(closed)
    await conn.execute(
        f"UPDATE {SCHEMA}.tasks AS t SET status = c.status, updated_at = now()"
        " FROM unnest($1::text[], $2::text[]) AS c(task_id, status)"
        " WHERE t.task_id = c.task_id AND t.status <> c.status"
        " AND (t.status IN ('matched', 'waiting') OR (t.status = 'granted' AND c.status = 'finished'))",
        ids, [closed[task_id] for task_id in ids],
    )  # fmt: skip


async def save_nodes(conn: asyncpg.Connection, nodes: list[NodeState]) -> None:
    """Upsert the changed nodes and bump the fleet's version (`KeptFleet` instances reload)."""
    if not nodes:
        return
    await conn.execute(f"UPDATE {SCHEMA}.fleet_version SET version = version + 1")
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.fleet AS f (node_id, agent_id, card_type, gpus, alive, changed_at)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bool[], $6::timestamptz[])"
        " ON CONFLICT (node_id) DO UPDATE SET agent_id = EXCLUDED.agent_id, card_type = EXCLUDED.card_type,"
        " gpus = EXCLUDED.gpus, alive = EXCLUDED.alive, changed_at = EXCLUDED.changed_at",
        nodes, ("node_id", "agent_id", "card_type", "gpus", "alive", "changed_at"),
    )  # fmt: skip


async def _save_matches(conn: asyncpg.Connection, effects: BatchEffects, event_ids: list[str]) -> None:
    matches = effects.matches
    if not matches:
        return
    as_json = _JsonMemo()  # matches of one decision share their request, ranking and fleet objects
    columns = [
        [m.match_id for m in matches], [m.task_id for m in matches], [m.trigger for m in matches],
        [as_json(m.request) for m in matches], [as_json(m.ranking) for m in matches], [m.matched for m in matches],
        [m.chosen for m in matches], [m.oversized for m in matches], [m.unmatchable_reason for m in matches],
        [m.reason for m in matches], [as_json(m.fleet) for m in matches],
        [m.catalog_version for m in matches], [m.catalog_hash for m in matches], event_ids,
        [None if m.reason_facts is None else as_json(m.reason_facts) for m in matches],
    ]  # fmt: skip
    await conn.execute(
        f"INSERT INTO {SCHEMA}.matches (match_id, task_id, trigger, request, ranking, matched, chosen, oversized,"
        " unmatchable_reason, reason, fleet, fleet_card_types, catalog_version, catalog_hash, event_id, reason_facts)"
        " SELECT m.match_id, m.task_id, m.trigger, m.request::json, m.ranking::json, m.matched, m.chosen,"
        " m.oversized, m.unmatchable_reason, m.reason, m.fleet::json,"
        " ARRAY(SELECT k FROM json_object_keys(m.fleet::json) AS k ORDER BY k),"
        " m.catalog_version, m.catalog_hash, m.event_id, m.reason_facts::json"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bool[], $7::text[],"
        " $8::bool[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[])"
        " AS m(match_id, task_id, trigger, request, ranking, matched, chosen, oversized, unmatchable_reason,"
        " reason, fleet, catalog_version, catalog_hash, event_id, reason_facts)",
        *columns,
    )


async def _save_tasks(conn: asyncpg.Connection, tasks: list[TaskRow]) -> None:
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.tasks AS t (task_id, project, request, status, last_match_id, last_detail, last_ranked)"
        " SELECT t_id, project, request::jsonb, status, match_id, detail, ranked::jsonb"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])"
        " AS u(t_id, project, request, status, match_id, detail, ranked)"
        " ON CONFLICT (task_id) DO UPDATE SET status = EXCLUDED.status, last_match_id = EXCLUDED.last_match_id,"
        " last_detail = EXCLUDED.last_detail, last_ranked = EXCLUDED.last_ranked, updated_at = now()",
        tasks, ("task_id", "project", lambda t: _json(request_to_json(t.request)), "status", "last_match_id",
                "last_detail", lambda t: _json(list(t.last_ranked))),
    )  # fmt: skip


def _json(value: Any) -> str:
    """JSON text for a `text[]` parameter cast to jsonb in SQL (a list would become a 2-D array)."""
    return json.dumps(value, separators=(",", ":"))


class _JsonMemo:
    """`_json` that serialises each object once (keyed by identity; the objects outlive the memo)."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}

    def __call__(self, value: Any) -> str:
        key = id(value)
        if key not in self._texts:
            self._texts[key] = _json(value)
        return self._texts[key]
