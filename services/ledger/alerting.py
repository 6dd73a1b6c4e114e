"""Alerts that reach people: from `cf:events` to the policy's sinks (the ledger process runs it).

A consumer group of its own (`alerts`) on its routed stream `cf:routed:alerts` (the alerting types of
`cf:events` only: `shared.events.routing`), the matcher's shape:

1. once per id, then the inbox (consumer `ledger:alerts`): a redelivered event is the same alert;
2. fold (pure, `shared.alerts.alert_of`): each alerting event becomes an `Alert` (a task's project
   is looked up in `ledger.tasks` when the event does not name it);
3. save: `ledger.alerts` (the console banner and the digest read it), one `ledger.alert_deliveries`
   row per webhook sink that wants its kind, and a warning line per alert for a `log` sink — in
   the inbox's transaction.

`deliver_webhooks` (a loop every second) POSTs each due delivery as JSON: a 2xx answer delivers
it (recorded in the transaction that holds the row, so a ledger stopped between the answer and the
commit POSTs it again: at least once; receivers can drop repeats by `alert_id`, or a digest's `day`);
anything else is retried after `webhook_backoff_s`, doubling each time, and after
`webhook_attempts` tries the delivery is dead-lettered (status `dead`, with the last error, in
the log and in `cardflow alerts`). Several ledger instances share the work (`FOR UPDATE SKIP LOCKED`).
Sinks, kinds and retry knobs come from the policy document in force (`alerts` section).

`send_digest_if_due` (a loop every minute) sends the daily digest once the policy's time of day
has passed (`alerts.digest`, `shared.alert_digest`): the alerts of the last 24 hours, one JSON
POST per webhook sink (only the kinds it wants; delivered like an alert: `digest_deliveries`) and
one warning line for a log sink. `ledger.alert_digests` keeps each local day sent (its primary
key): at most one digest a day, across restarts and instances.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from services.common.event_batches import once_per_id
from services.common.runtime import ServiceContext, SkippedEntry
from services.config.holder import DocumentHolder
from shared.alert_digest import digest_body, digest_counts, digest_due, digest_window
from shared.alerts import ALERTING_TYPES, Alert, AlertKind, alert_of
from shared.config import POLICY, PolicyDocument
from shared.config.governance import AlertsSection, SinkKind
from shared.delivery.inbox import record_consumed_many
from shared.events import Envelope, utcnow
from shared.logging import get_logger

SCHEMA = "ledger"
INBOX_CONSUMER = "ledger:alerts"
DELIVERY_BATCH = 20

log = get_logger(__name__)


class AlertPolicy:
    """The `alerts` section of the policy document in force (hot-reloaded)."""

    def __init__(self, fallback: AlertsSection | None = None) -> None:
        self._holder: DocumentHolder[AlertsSection] = DocumentHolder(
            POLICY, lambda model, _version: model.alerts, fallback or PolicyDocument().alerts)

    async def current(self, conn: asyncpg.Connection | asyncpg.Pool) -> AlertsSection:
        await self._holder.refresh(conn)
        return self._holder.value


async def handle_alert_events(ctx: ServiceContext, policy: AlertPolicy, events: Sequence[Envelope | SkippedEntry]) -> None:
    """Steps 1-3 of the module docstring for one batch."""
    made = [alert for e in once_per_id(events, ALERTING_TYPES) if (alert := alert_of(e)) is not None]
    if not made:
        return  # an event worth no alert (most task.succeeded) needs no inbox row either
    async with ctx.transaction() as conn:
        fresh = await record_consumed_many(conn, SCHEMA, INBOX_CONSUMER, [a.alert_id for a in made])
        alerts = [alert for alert in made if alert.alert_id in fresh]
        if not alerts:
            return
        alerts = await with_projects(conn, alerts)
        await save_alerts(conn, alerts, await policy.current(conn))


async def with_projects(conn: asyncpg.Connection, alerts: list[Alert]) -> list[Alert]:
    """Each task alert with its task's project (from `ledger.tasks`) when the event did not name it."""
    missing = sorted({a.task_id for a in alerts if a.project is None and a.task_id is not None})
    if not missing:
        return alerts
    rows = await conn.fetch(f"SELECT task_id, project FROM {SCHEMA}.tasks WHERE task_id = ANY($1::text[])", missing)
    projects = {row["task_id"]: row["project"] for row in rows}
    return [a if a.project is not None or a.task_id not in projects else replace(a, project=projects[a.task_id])
            for a in alerts]


async def save_alerts(conn: asyncpg.Connection, alerts: list[Alert], section: AlertsSection) -> None:
    """Store the alerts, queue a delivery per webhook sink that wants each, and log them for a log sink."""
    await conn.executemany(
        f"INSERT INTO {SCHEMA}.alerts (alert_id, kind, sentence, occurred_at, event_type, task_id, account_id, project,"
        " console) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (alert_id) DO NOTHING",
        [(a.alert_id, a.kind.value, a.sentence, a.occurred_at, a.event_type, a.task_id, a.account_id, a.project,
          any(s.kind is SinkKind.CONSOLE and s.wants(a.kind) for s in section.sinks)) for a in alerts],
    )  # fmt: skip
    deliveries = [(a.alert_id, sink.url) for a in alerts for sink in section.sinks
                  if sink.kind is SinkKind.WEBHOOK and sink.wants(a.kind)]
    if deliveries:
        await conn.executemany(
            f"INSERT INTO {SCHEMA}.alert_deliveries (alert_id, url, max_attempts, backoff_s, timeout_s)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            [(alert_id, url, section.webhook_attempts, section.webhook_backoff_s, section.webhook_timeout_s)
             for alert_id, url in deliveries],
        )
    for alert in alerts:
        if any(sink.kind is SinkKind.LOG and sink.wants(alert.kind) for sink in section.sinks):
            log.warning("alert", kind=alert.kind.value, sentence=alert.sentence, task_id=alert.task_id,
                        account_id=alert.account_id, project=alert.project, alert_id=alert.alert_id)


def next_attempt(attempts: int, backoff_s: float, now: datetime) -> datetime:
    """When to try again after `attempts` failed tries: the back-off, doubled each time (pure)."""
    return now + timedelta(seconds=backoff_s * 2 ** max(0, attempts - 1))


async def deliver_webhooks(ctx: ServiceContext) -> int:
    """POST the due webhook deliveries of alerts and digests (see the module docstring); how many were tried."""
    async with ctx.transaction() as conn:
        due = await conn.fetch(
            f"SELECT d.alert_id, d.url, d.attempts, d.max_attempts, d.backoff_s, d.timeout_s, a.kind, a.sentence,"
            f" a.occurred_at, a.event_type, a.task_id, a.account_id, a.project"
            f" FROM {SCHEMA}.alert_deliveries d JOIN {SCHEMA}.alerts a USING (alert_id)"
            f" WHERE d.status = 'pending' AND d.next_attempt_at <= now()"
            f" ORDER BY d.next_attempt_at LIMIT {DELIVERY_BATCH} FOR UPDATE OF d SKIP LOCKED",
        )
        for row in due:
            body = {key: row[key] for key in ("alert_id", "kind", "sentence", "event_type", "task_id", "account_id", "project")}
            body |= {"occurred_at": row["occurred_at"].isoformat(), "source": "cardflow"}
            await _record_attempt(conn, "alert_deliveries", "alert_id", row, await post_json(row["url"], body, row["timeout_s"]))
        digests = await conn.fetch(
            f"SELECT day, url, body, attempts, max_attempts, backoff_s, timeout_s FROM {SCHEMA}.digest_deliveries"
            f" WHERE status = 'pending' AND next_attempt_at <= now()"
            f" ORDER BY next_attempt_at LIMIT {DELIVERY_BATCH} FOR UPDATE SKIP LOCKED",
        )
        for row in digests:
            body = row["body"] if isinstance(row["body"], dict) else json.loads(row["body"])
            await _record_attempt(conn, "digest_deliveries", "day", row, await post_json(row["url"], body, row["timeout_s"]))
    return len(due) + len(digests)


async def post_json(url: str, body: dict[str, Any], timeout_s: float) -> str | None:
    """POST `body` as JSON; None when a 2xx answered, else what went wrong (one line)."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            answer = await client.post(url, content=json.dumps(body), headers={"content-type": "application/json"})
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"[:500]
    return None if answer.is_success else f"HTTP {answer.status_code}: {answer.text[:200]}"


async def _record_attempt(conn: asyncpg.Connection, table: str, key: str, row: asyncpg.Record, error: str | None) -> None:
    """One try of a delivery row (`key`, url) of `table`: delivered, or retried after the back-off, or dead."""
    attempts = row["attempts"] + 1
    now = utcnow()
    if error is None:
        await conn.execute(f"UPDATE {SCHEMA}.{table} SET status = 'delivered', attempts = $3, delivered_at = $4,"
                           f" last_error = NULL WHERE {key} = $1 AND url = $2", row[key], row["url"], attempts, now)
        return
    dead = attempts >= row["max_attempts"]
    await conn.execute(
        f"UPDATE {SCHEMA}.{table} SET status = $3, attempts = $4, last_error = $5, next_attempt_at = $6"
        f" WHERE {key} = $1 AND url = $2",
        row[key], row["url"], "dead" if dead else "pending", attempts, error, next_attempt(attempts, row["backoff_s"], now),
    )  # fmt: skip
    if dead:
        log.error("alert delivery dead-lettered", url=row["url"], **{key: str(row[key])}, attempts=attempts, error=error)


async def send_digest_if_due(ctx: ServiceContext, policy: AlertPolicy, now: datetime | None = None) -> date | None:
    """The daily digest (`shared.alert_digest`): when due, record the day in `alert_digests` (at most
    once: its primary key), queue one delivery per webhook sink with the alerts it wants, and log it
    for a log sink. The day sent, or None."""
    now = now or utcnow()
    async with ctx.transaction() as conn:
        section = await policy.current(conn)
        day = digest_due(now, section.digest, await conn.fetchval(f"SELECT max(day) FROM {SCHEMA}.alert_digests"))
        if day is None:
            return None
        since, until = digest_window(now)
        alerts = [a for a in await load_alerts(conn, since, limit=10_000) if datetime.fromisoformat(a["occurred_at"]) < until]
        counts = digest_counts(alerts)
        sent = await conn.fetchval(
            f"INSERT INTO {SCHEMA}.alert_digests (day, timezone, sent_at, since, until, alerts, counts)"
            f" VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT (day) DO NOTHING RETURNING day",
            day, section.digest.timezone, now, since, until, len(alerts), json.dumps(counts),
        )  # fmt: skip
        if sent is None:  # another ledger instance sent it meanwhile
            return None
        for sink in section.sinks:
            wanted = [a for a in alerts if sink.wants(AlertKind(a["kind"]))]
            if sink.kind is SinkKind.WEBHOOK:
                await conn.execute(
                    f"INSERT INTO {SCHEMA}.digest_deliveries (day, url, body, max_attempts, backoff_s, timeout_s)"
                    " VALUES ($1, $2, $3::jsonb, $4, $5, $6) ON CONFLICT DO NOTHING",
                    day, sink.url, json.dumps(digest_body(day, section.digest, since, until, wanted)),
                    section.webhook_attempts, section.webhook_backoff_s, section.webhook_timeout_s,
                )  # fmt: skip
            elif sink.kind is SinkKind.LOG:
                log.warning("alert digest", day=day.isoformat(), timezone=section.digest.timezone, since=since.isoformat(),
                            total=len(wanted), counts=digest_counts(wanted),
                            sentences=[a["sentence"] for a in wanted[:50]])  # fmt: skip
    log.info("alert digest sent", day=day.isoformat(), alerts=len(alerts))
    return day


async def load_alerts(conn: asyncpg.Connection | asyncpg.Pool, since: datetime, *, console_only: bool = False,
                      limit: int = 1000) -> list[dict[str, Any]]:
    """Alerts raised since `since`, newest first, each with its webhook deliveries (the digest)."""
    rows = await conn.fetch(
        f"SELECT a.alert_id, a.kind, a.sentence, a.occurred_at, a.event_type, a.task_id, a.account_id, a.project,"
        f" coalesce(json_agg(json_build_object('url', d.url, 'status', d.status, 'attempts', d.attempts,"
        f"   'last_error', d.last_error, 'delivered_at', d.delivered_at)) FILTER (WHERE d.url IS NOT NULL), '[]')"
        f"   AS deliveries"
        f" FROM {SCHEMA}.alerts a LEFT JOIN {SCHEMA}.alert_deliveries d USING (alert_id)"
        f" WHERE a.occurred_at >= $1 AND (NOT $2 OR a.console)"
        f" GROUP BY a.alert_id ORDER BY a.occurred_at DESC, a.alert_id LIMIT $3",
        since, console_only, limit,
    )  # fmt: skip
    return [{**dict(row), "occurred_at": row["occurred_at"].isoformat(), "deliveries": _json_list(row["deliveries"])}
            for row in rows]


def _json_list(value: str | list[Any]) -> list[Any]:
    """A json column: text from a plain pool, already decoded where the pool has a json codec (the console's)."""
    return value if isinstance(value, list) else json.loads(value)


async def load_last_digest(conn: asyncpg.Connection | asyncpg.Pool) -> dict[str, Any] | None:
    """The last daily digest sent: its day, when, how many alerts, and each webhook delivery; None before the first."""
    row = await conn.fetchrow(
        f"SELECT g.day, g.timezone, g.sent_at, g.alerts,"
        f" coalesce(json_agg(json_build_object('url', d.url, 'status', d.status, 'attempts', d.attempts,"
        f"   'last_error', d.last_error, 'delivered_at', d.delivered_at)) FILTER (WHERE d.url IS NOT NULL), '[]')"
        f"   AS deliveries"
        f" FROM {SCHEMA}.alert_digests g LEFT JOIN {SCHEMA}.digest_deliveries d USING (day)"
        f" GROUP BY g.day ORDER BY g.day DESC LIMIT 1",
    )  # fmt: skip
    if row is None:
        return None
    return {"day": row["day"].isoformat(), "timezone": row["timezone"], "sent_at": row["sent_at"].isoformat(),
            "alerts": row["alerts"], "deliveries": _json_list(row["deliveries"])}
