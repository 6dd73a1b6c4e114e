"""What an auditor asks the archive: the state at a moment, a task's story, who changed what.

- `replay_at(pool, until)` folds the archived events that occurred up to `until` (all, when None)
  and `state_json` shows the result: task states, leases in force, quota balances, spend per
  project and card type, the fleet;
- `why(pool, task_id)` is the story of a task (`services.audit.story`);
- `change_log(pool, ...)` lists the events people (or upstream systems) caused that change how
  the system behaves: configuration, templates, quotas, approvals, cancellations, tokens, agents'
  Redis users, rounds.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import asyncpg

from services.audit.reading import archived_events, events_about, task_events
from services.audit.story import Story, story_json, tell
from shared.events import parse_event
from shared.events.subjects import data_subject
from shared.replay import ReplayState, replay_event

CHANGE_TYPES = (
    "config.changed", "template.changed", "quota.granted", "quota.adjusted", "task.approved",
    "task.cancel_requested", "task.flag_cleared", "token.created", "token.revoked", "agent.enrolled",
    "agent.unenrolled", "round.closed", "round.note_amended",
)  # fmt: skip
"""Event types `audit log` lists by default: changes someone made, each with its actor."""
LOG_LIMIT = 500


class UnknownTaskError(LookupError):
    """The archive holds no event about the task."""


async def replay_at(pool: asyncpg.Pool, until: datetime | None = None) -> ReplayState:
    state = ReplayState()
    async for item in archived_events(pool, until=until):
        replay_event(state, item.event)
    return state


def state_json(state: ReplayState, *, tasks_limit: int = 1000) -> dict[str, Any]:
    """The replayed state as JSON-ready values (what `audit replay --json` prints)."""
    tasks = sorted(state.tasks.values(), key=lambda v: (v.last_event_at is None, v.last_event_at), reverse=True)
    quotas = [{"account_id": q.account_id, "project": q.project, "card_type": q.card_type,
               "gpu_hours": float(q.gpu_hours), "used_gpu_hours": float(used := state.quota_used_gpu_hours(q)),
               "remaining_gpu_hours": float(max(q.gpu_hours - used, 0)), "valid_from": q.valid_from.isoformat(),
               "valid_to": q.valid_to.isoformat()} for q in state.quotas.values()]  # fmt: skip
    return {
        "as_of": state.as_of.isoformat() if state.as_of else None, "events": state.events,
        "task_states": dict(Counter(view.state.value for view in state.tasks.values())),
        "tasks": [{"id": v.id, "name": v.name, "project": v.project, "state": v.state.value, "reason": v.reason,
                   "detail": v.reason_detail, "card_type": v.card_type} for v in tasks[:tasks_limit]],
        "active_leases": [{"lease_id": lease.lease_id, "task_id": lease.task_id, "node_id": lease.node_id,
                           "card_type": lease.card_type, "gpu_indices": list(lease.gpu_indices),
                           "granted_at": lease.granted_at.isoformat() if lease.granted_at else None}
                          for lease in state.leases.values() if lease.is_active],
        "quotas": quotas,
        "spend_by_project": _totals(state.usage_by_project()), "spend_by_card": _totals(state.usage_by_card()),
        "nodes": [{"node_id": n.node_id, "card_type": n.card_type, "gpus": n.gpus, "alive": n.alive}
                  for n in state.nodes.values()],
    }  # fmt: skip


def _totals(totals: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [{"key": key, "gpu_hours": float(t.gpu_seconds / 3600), "cost": float(t.cost)} for key, t in totals.items()]
    return sorted(rows, key=lambda row: -row["cost"])


async def why(pool: asyncpg.Pool, task_id: str) -> dict[str, Any]:
    """The story of a task as JSON (`story_json`)."""
    return story_json(await tell_story(pool, task_id))


async def tell_story(pool: asyncpg.Pool, task_id: str) -> Story:
    """The story of a task: its events, its leases', and the data-ready signals of its inputs."""
    archived = await task_events(pool, task_id)
    if not archived:
        raise UnknownTaskError(f"the archive holds no event about task {task_id!r}; check the id (`cardflow tasks`)")
    inputs = [str(ref) for item in archived if item.event.type == "task.submitted" for ref in item.event.data.submission.inputs]
    signals = await events_about(pool, [data_subject(ref) for ref in inputs]) if inputs else []
    return tell(task_id, sorted([*archived, *signals], key=lambda item: item.seq))


async def change_log(
    pool: asyncpg.Pool, *, actor: str | None = None, event_type: str | None = None, since: datetime | None = None,
    limit: int = LOG_LIMIT,
) -> list[dict[str, Any]]:
    """Changes, newest first. `actor`: `user:alice` or just `alice` (any kind); `event_type`: a
    type (`quota.granted`) or a prefix ending in a dot (`quota.`), which may name types beyond the
    default list (e.g. `task.` for every task event)."""
    types, prefix = (CHANGE_TYPES, None) if not event_type else (None, event_type) if event_type.endswith(".") else ((event_type,), None)
    actors = [actor] if actor and ":" in actor else [f"{kind}:{actor}" for kind in ("user", "upstream", "service", "system", "agent")] if actor else None
    rows = await pool.fetch(
        "SELECT seq, event_id, type, subject, actor, occurred_at, body FROM audit.events"
        " WHERE ($1::text[] IS NULL OR type = ANY($1)) AND ($2::text IS NULL OR type LIKE $2 || '%')"
        " AND ($3::text[] IS NULL OR actor = ANY($3)) AND ($4::timestamptz IS NULL OR occurred_at >= $4)"
        " ORDER BY seq DESC LIMIT $5",
        list(types) if types else None, prefix, actors, since, limit,
    )  # fmt: skip
    return [_change_row(row) for row in rows]


def _change_row(row: asyncpg.Record) -> dict[str, Any]:
    event = parse_event(row["body"])
    data = event.data.model_dump(mode="json")
    return {"seq": row["seq"], "event_id": row["event_id"], "at": row["occurred_at"].isoformat(), "actor": row["actor"],
            "type": row["type"], "subject": row["subject"], "what": describe_change(row["type"], data),
            "reason": data.get("reason") if isinstance(data.get("reason"), str) else None}  # fmt: skip


def describe_change(event_type: str, data: dict[str, Any]) -> str:
    """One sentence for a change event (pure); unknown types list their scalar fields."""
    if event_type in ("config.changed", "template.changed"):
        name = data.get("file") or data.get("name")
        return f"{name}: version {data.get('old_version') or '(none)'} -> {data.get('new_version')}"
    if event_type == "quota.granted":
        card = f" on {data['card_type']}" if data.get("card_type") else ""
        return f"{data['project']}: {data['gpu_hours']:g} GPU-h{card}, {data['valid_from']} to {data['valid_to']}"
    if event_type == "quota.adjusted":
        until = f", valid to {data['valid_to']}" if data.get("valid_to") else ""
        return f"{data['project']} ({data['account_id']}): {data['delta_gpu_hours']:+g} GPU-h{until}"
    if event_type in ("task.approved", "task.cancel_requested", "task.cancelled"):
        return f"task {data['task_id']}"
    if event_type == "task.flag_cleared":
        return f"task {data['task_id']}: flagged success cleared, its output now counted"
    if event_type in ("agent.enrolled", "agent.unenrolled"):
        verb = "may now log in" if event_type == "agent.enrolled" else "deleted: its password is refused"
        return f"agent {data['agent_id']}: Redis user {data['redis_user']} {verb}"
    if event_type == "round.closed":
        return f"round {data['round_id']} ({data['starts_at']} to {data['ends_at']}): {data['note']}"
    if event_type == "round.note_amended":
        return f"round {data['round_id']} note v{data['version']}: {data['note']}"
    scalars = [f"{key}={value}" for key, value in data.items() if isinstance(value, str | int | float | bool)]
    return ", ".join(scalars[:6])
