"""Every Redis stream, consumer group and key name cardflow uses, in one place.

Nothing else in the code base spells a stream or key literally; import from here.
"""

from __future__ import annotations

# ---- streams -------------------------------------------------------------
INGEST_STREAM = "cf:ingest"
"""Upstream systems append `task.submit`, `task.cancel`, `data.ready` entries here (plain Redis
clients); intake records them with the configured default actor (`Settings.ingest_default_upstream`).
A named upstream writes its own stream instead (`ingest_stream`)."""

EVENTS_STREAM = "cf:events"
"""The global, ordered log of every state transition. Only the gate appends here: it forwards each
service's own stream (`producer_stream`) after checking that the service owns every event type."""

REPORTS_STREAM = "cf:reports"
"""Agents append registrations, heartbeats, progress, checkpoints and completions here."""

DEADLETTER_STREAM = "cf:deadletter"
"""Entries that could not be processed after N deliveries, with the error and the original."""


def ingest_stream(upstream: str) -> str:
    """The stream of one configured upstream system (`cf:ingest:<name>`, `Settings.ingest_upstreams`):
    only its Redis user may append there, and intake records each entry with actor `upstream:<name>`."""
    return f"{INGEST_STREAM}:{upstream}"


def producer_stream(schema: str) -> str:
    """The stream one service's outbox relay appends its events to (`cf:events:<schema>`); only that
    service's Redis user may write it, and the gate forwards it to `cf:events`."""
    return f"{EVENTS_STREAM}:{schema}"


def routed_stream(group: str) -> str:
    """The stream one consumer group reads instead of `cf:events` (`cf:routed:<group>`): the gate appends
    there, in the same MULTI as to `cf:events`, the events of the types the group folds
    (`shared.events.routing.ROUTES`)."""
    return f"{ROUTED_PREFIX}{group}"


ROUTED_PREFIX = "cf:routed:"


def is_routed_stream(stream: str) -> bool:
    return stream.startswith(ROUTED_PREFIX)


def agent_inbox(agent_id: str) -> str:
    """The stream an agent reads its grants, preemptions and revocations from."""
    return f"cf:agent:{agent_id}"


# ---- consumer groups (one per consuming service) ---------------------------
INTAKE_GROUP = "intake"
READINESS_GROUP = "readiness"
MATCHER_GROUP = "matcher"
DISPATCHER_GROUP = "dispatcher"
LEDGER_GROUP = "ledger"
CONSOLE_GROUP = "console"
AUDIT_GROUP = "audit"
ALERTS_GROUP = "alerts"  # the ledger's alerter (services.ledger.alerting)
"""The ledger's archiver: every cf:events entry into audit.events (apart from its accounting group)."""
AGENT_GROUP = "agent"
GATE_GROUP = "gate"
"""The gate's group on every `producer_stream`."""

# ---- object storage ----------------------------------------------------------
CONFIG_BUCKET = "cardflow-config"
"""Versioned bucket: policy.yaml, cards.yaml, templates/*.yaml."""

REPORTS_BUCKET = "cardflow-reports"
"""Versioned bucket: daily task-list exports, readiness-board snapshots, round reports."""

ARCHIVE_BUCKET = "cardflow-archive"
"""Versioned bucket: the audit archive's event segments and their manifests."""

# ---- PostgreSQL schemas (one per owning service) ------------------------------
SCHEMAS = ("intake", "readiness", "matcher", "dispatcher", "ledger", "views", "audit", "identity", "config")
