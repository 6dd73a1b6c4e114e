"""The event envelope every cardflow event shares, and canonical JSON for the audit hash chain.

An event is a frozen pydantic model: envelope fields plus a typed `data` payload. Concrete event
classes (one module per owning service, listed in `shared.events.catalog`) subclass `Envelope`,
pin `type` to a `Literal`, and give `data` its payload model; `shared.events.Event` is the
discriminated union of all of them.
"""

from __future__ import annotations

import json
import json.encoder
from datetime import UTC, datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from shared.events.ulids import new_ulid


def new_event_id() -> str:
    """A new ULID as its 26-character Crockford base32 string (sortable by creation time; monotonic
    within this process: `shared.events.ulids`)."""
    return new_ulid()


def utcnow() -> datetime:
    return datetime.now(UTC)


class Payload(BaseModel):
    """Base of every event payload: frozen, unknown fields forbidden, no NaN or infinity."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Envelope(BaseModel):
    """Fields common to every event (ARCHITECTURE section 3)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    event_id: str = Field(default_factory=new_event_id, min_length=26, max_length=26)
    type: str
    subject: str = Field(min_length=1, description="entity the event is about, e.g. task/T123, lease/L9, quota/proj-a")
    subject_seq: int = Field(ge=1, description="per-subject, gap-free sequence from the owning service")
    occurred_at: AwareDatetime = Field(default_factory=utcnow)
    producer: str = Field(min_length=1, description="service and instance, e.g. intake/local-1")
    actor: str = Field(min_length=1, description="who caused it: user:alice, upstream:pipeline-x, service:dispatcher")
    correlation_id: str | None = None
    causation_id: str | None = None
    schema_version: int = 1
    data: Any

    @field_validator("occurred_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_CANONICAL = json.JSONEncoder(
    default=_default, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
)
_C_ENCODE = (  # the C encoder `_CANONICAL.encode` builds on every call, built once (None without CPython's _json)
    json.encoder.c_make_encoder(None, _default, json.encoder.encode_basestring, None, ":", ",", True, False, False)
    if json.encoder.c_make_encoder is not None
    else None
)
"""Arguments: markers (None: no cycle check; a model dump has no cycles), default, string encoder (not
ASCII-only), indent, key and item separators, sort_keys, skipkeys, allow_nan — `_CANONICAL`'s settings."""


def canonical_json(event: BaseModel | dict[str, Any]) -> bytes:
    """Deterministic UTF-8 JSON: sorted keys, no whitespace, times in UTC with a `Z` suffix.

    The same event always yields the same bytes, which the audit hash chain relies on. NaN and
    infinity are refused (ValueError): they are not JSON. The bytes are those of `json.dumps` with
    `_CANONICAL`'s settings (tests/unit/test_canonical_json_bytes.py); its C encoder is built once
    here rather than per call (`bench/event_encoding.py`).
    """
    body = event.model_dump(mode="python") if isinstance(event, BaseModel) else event
    if _C_ENCODE is None:
        return _CANONICAL.encode(body).encode()
    return "".join(_C_ENCODE(body, 0)).encode()
