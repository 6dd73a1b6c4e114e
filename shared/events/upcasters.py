"""Every upcaster of an old event schema version still readable from the archive.

Keep each one forever: the audit archive holds events of every version ever written. Name the
function after what changed; the docstring says when and why.
"""

from __future__ import annotations

from typing import Any

from shared.events.upcasting import upcaster


@upcaster("lease.renewed", from_version=1)
def lease_renewed_expires_at_became_until(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: the new expiry was called `expires_at` (as in `lease.granted`); v2 calls it `until`.

    A renewal coalesces several heartbeats and states how long the lease is good for, so v2 named
    the field after that; v1 payloads had no `heartbeats` count either (it was always one).
    """
    data = dict(data)
    if "expires_at" in data:
        data["until"] = data.pop("expires_at")
    data.setdefault("heartbeats", 1)
    return data
