"""Act like an upstream system: append entries to `cf:ingest` and upload input data to S3.

These are the plain-Redis / plain-S3 writes any producer outside cardflow would do (the contract
is in `services/intake/ingest.py`): one stream entry per submission with flat string fields
`type`, `payload` (JSON) and `actor`. The demo, the end-to-end tests and the pipeline benchmark
all submit through here, so they exercise the same path as a real upstream system.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from services.cli.lang import CliLang
from services.demo.workload import DataAction, DataActionKind
from shared.names import INGEST_STREAM
from shared.storage import ObjectStore
from shared.submission import parse_s3_uri

def submit_fields(submission: Mapping[str, Any]) -> dict[str, str]:
    """The `cf:ingest` fields of a `task.submit` entry (intake records the stream's upstream as its actor)."""
    return {"type": "task.submit", "payload": json.dumps(submission)}


def data_ready_fields(dataset: str, version: str, *, source: str = "") -> dict[str, str]:
    """The `cf:ingest` fields of a `data.ready` entry for a dataset version."""
    payload = {"dataset": dataset, "version": version, "source": source}
    return {"type": "data.ready", "payload": json.dumps(payload)}


def cancel_fields(task_id: str, reason: str = "") -> dict[str, str]:
    """The `cf:ingest` fields of a `task.cancel` entry."""
    return {"type": "task.cancel", "payload": json.dumps({"task_id": task_id, "reason": reason})}


async def append_entries(redis: Redis, entries: Iterable[Mapping[str, str]], *, chunk: int = 500) -> list[str]:
    """XADD the entries to `cf:ingest` in order (pipelined in chunks); returns their entry ids."""
    ids: list[str] = []
    batch = list(entries)
    for start in range(0, len(batch), chunk):
        pipe = redis.pipeline(transaction=False)
        for fields in batch[start : start + chunk]:
            pipe.xadd(INGEST_STREAM, dict(fields))
        ids += [i.decode() if isinstance(i, bytes) else i for i in await pipe.execute()]
    return ids


async def submit(redis: Redis, submissions: Sequence[Mapping[str, Any]]) -> list[str]:
    """Submit raw submissions (valid or not) through `cf:ingest`; returns the entry ids."""
    return await append_entries(redis, [submit_fields(s) for s in submissions])


async def signal_data_ready(redis: Redis, dataset: str, version: str, *, source: str = "") -> str:
    """Announce that a dataset version is ready (a `data.ready` entry)."""
    (entry_id,) = await append_entries(redis, [data_ready_fields(dataset, version, source=source)])
    return entry_id


async def put_input(store: ObjectStore, uri: str, body: bytes = b"demo data\n") -> None:
    """Upload an object named by an `s3://bucket/key` URI (creating the bucket if needed)."""
    location = parse_s3_uri(uri)
    await store.ensure_bucket(location.bucket)
    await store.put(location.bucket, location.key, body)


PERFORMED: dict[CliLang, dict[DataActionKind, str]] = {
    CliLang.EN: {DataActionKind.PUT_OBJECT: "uploaded {target}", DataActionKind.DATA_READY: "sent data.ready for {target}"},
    CliLang.ZH: {DataActionKind.PUT_OBJECT: "已上传 {target}", DataActionKind.DATA_READY: "已为 {target} 发送 data.ready"},
}  # fmt: skip


async def perform(action: DataAction, redis: Redis, store: ObjectStore, lang: CliLang = CliLang.EN) -> str:
    """Carry out one delayed data action; returns a sentence (in `lang`) saying what was done."""
    if action.kind is DataActionKind.PUT_OBJECT:
        await put_input(store, action.target)
    else:
        dataset, version = action.dataset_version
        await signal_data_ready(redis, dataset, version, source="cardflow demo")
    return PERFORMED[lang][action.kind].format(target=action.target)
