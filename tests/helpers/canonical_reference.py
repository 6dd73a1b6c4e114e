"""canonical_json as it was written before its C encoder was built once (26f1fbd), kept as the reference
the audit hash chain's bytes are compared against (tests/unit/test_canonical_json_bytes.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def reference_canonical_json(event: BaseModel | dict[str, Any]) -> bytes:
    body = event.model_dump(mode="python") if isinstance(event, BaseModel) else event
    return json.dumps(
        body, default=_default, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()
