"""Reliable delivery: PostgreSQL pool and migrations, transactional outbox and relay, inbox,
FastStream consumer conventions (groups, claimer, dead-letter). See docs/delivery.md.
"""

from __future__ import annotations

from shared.delivery.consumer import reliable_batch_subscriber, reliable_subscriber
from shared.delivery.db import create_pool, quote_schema
from shared.delivery.deadletter import DeadLetter, read_deadletters, replay_deadletter
from shared.delivery.inbox import prune_inbox, record_consumed, record_consumed_many
from shared.delivery.migrations import (
    MigrationChecksumError,
    MigrationError,
    applied_migrations,
    migrate,
    migrate_delivery,
)
from shared.delivery.outbox import append_events, next_subject_seq, next_subject_seqs, prune_outbox
from shared.delivery.relay import OutboxRelay
from shared.delivery.wire import ensure_group, extract_body, wire_fields

__all__ = [
    "DeadLetter",
    "MigrationChecksumError",
    "MigrationError",
    "OutboxRelay",
    "append_events",
    "applied_migrations",
    "create_pool",
    "ensure_group",
    "extract_body",
    "migrate",
    "migrate_delivery",
    "next_subject_seq",
    "next_subject_seqs",
    "prune_inbox",
    "prune_outbox",
    "quote_schema",
    "read_deadletters",
    "record_consumed",
    "record_consumed_many",
    "reliable_batch_subscriber",
    "reliable_subscriber",
    "replay_deadletter",
    "wire_fields",
]
