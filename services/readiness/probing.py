"""S3 probes: one HEAD per distinct key, a bounded number at a time.

"Not found" is an answer (`Probe.NOT_FOUND`); anything else that goes wrong (connection refused,
access denied, throttling, a timeout) is `Probe.ERROR`: transient, retried by the next check,
and never turned into a verdict on the input.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from services.readiness.checks import Probe
from shared.logging import get_logger
from shared.submission import parse_s3_uri

log = get_logger(__name__)


class HeadsObjects(Protocol):
    """What probing needs from an object store (`shared.storage.ObjectStore` has it)."""

    async def head(self, bucket: str, key: str) -> object | None: ...


@dataclass(frozen=True, slots=True)
class ProbeResult:
    probe: Probe
    error: str | None = None


async def probe_keys(
    store: HeadsObjects, keys: Iterable[str], *, concurrency: int = 32, timeout: float = 10.0
) -> dict[str, ProbeResult]:
    """HEAD each `s3://bucket/key` once; the result per key."""
    limit = asyncio.Semaphore(concurrency)

    async def probe(key: str) -> tuple[str, ProbeResult]:
        async with limit:
            return key, await probe_key(store, key, timeout)

    return dict(await asyncio.gather(*(probe(key) for key in set(keys))))


async def probe_key(store: HeadsObjects, key: str, timeout: float) -> ProbeResult:
    location = parse_s3_uri(key)
    try:
        async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can lose a cancel (shared.event_wait)
            found = await store.head(location.bucket, location.key)
    except Exception as error:  # noqa: BLE001 - any failure is transient by design (module docstring)
        text = f"{type(error).__name__}: {error}"[:500]
        log.warning("S3 probe failed; will retry", key=key, error=text)
        return ProbeResult(Probe.ERROR, text)
    return ProbeResult(Probe.FOUND if found is not None else Probe.NOT_FOUND)
