"""The Redis Streams wire format of cardflow events, and consumer-group creation.

One stream entry = one event, with flat string fields:

    event_id  the event's ULID (consumers dedupe on it)
    type      dotted event type, e.g. task.submitted (filter without parsing)
    subject   e.g. task/T123
    event     canonical JSON of the whole event (envelope + data) — the only field parsed

Entries published by FastStream itself (`broker.publish(..., stream=...)`) carry a `__data__`
field instead; `extract_body` accepts both so hand-written producers and tests can use either.
"""

from __future__ import annotations

from collections.abc import Mapping

from faststream.redis.parser import BinaryMessageFormatV1
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from shared.events.envelope import Envelope, canonical_json

BODY_FIELD = "event"
FASTSTREAM_BODY_FIELD = b"__data__"


class MissingBodyError(ValueError):
    """The stream entry has no body field; it can never be processed."""


def wire_fields(event: Envelope) -> dict[str, str]:
    """The XADD fields of `event` (what the outbox relay writes)."""
    return entry_fields(event.event_id, event.type, event.subject, canonical_json(event).decode())


def entry_fields(event_id: str, type_: str, subject: str, body: str) -> dict[str, str]:
    return {"event_id": event_id, "type": type_, "subject": subject, BODY_FIELD: body}


def extract_body(fields: Mapping[bytes, bytes], body_field: str = BODY_FIELD) -> bytes:
    """The JSON body of a stream entry: `body_field`, else a FastStream `__data__` envelope."""
    body = fields.get(body_field.encode())
    if body is not None:
        return body
    framed = fields.get(FASTSTREAM_BODY_FIELD)
    if framed is not None:
        return BinaryMessageFormatV1.parse(framed)[0]
    raise MissingBodyError(f"entry has no {body_field!r} field (fields: {sorted(k.decode(errors='replace') for k in fields)})")


async def ensure_group(redis: Redis, stream: str, group: str, start_id: str = "0") -> bool:
    """Create `group` on `stream` (and the stream) if missing; True if created now.

    New groups start at `0` — everything already in the stream — so events published before
    a service's first start are not skipped. Pass `$` to start at new entries only.
    """
    try:
        await redis.xgroup_create(stream, group, id=start_id, mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
        return False
    return True
