"""Segments (pure): deterministic bytes, a manifest anyone can check, and every kind of tampering named."""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import replace
from datetime import timedelta

from services.audit.chain import EMPTY_HEAD, chain_from, link
from services.audit.segments import ArchivedRow, SegmentPolicy, SegmentRecord, build_segment, check_segment
from tests.unit.audit.builders import T0


def rows(n: int) -> list[ArchivedRow]:
    bodies = [json.dumps({"n": i}, separators=(",", ":")) for i in range(n)]
    return [ArchivedRow(r.seq, f"E{r.seq:03d}", r.body, r.prev_hash, r.hash, T0 + timedelta(seconds=r.seq))
            for r in chain_from(EMPTY_HEAD, bodies)]  # fmt: skip


def record_of(segment) -> SegmentRecord:
    m = segment.manifest
    return SegmentRecord(
        m["segment_no"], m["first_seq"], m["last_seq"], m["events"], m["prev_hash"], m["last_hash"], m["first_at"],
        m["last_at"], segment.object_key, "v1", segment.sha256, len(segment.data), segment.manifest_key, "v1",
    )  # fmt: skip


def test_a_segment_is_deterministic_and_checkable_from_its_manifest_alone() -> None:
    archived = rows(5)
    segment = build_segment("abc", 1, archived)
    assert segment.data == build_segment("abc", 1, archived).data  # a re-roll after a crash gives equal bytes
    assert segment.object_key == "segments/abc/00000001.jsonl.gz"
    lines = gzip.decompress(segment.data).decode().splitlines()
    prev = segment.manifest["prev_hash"]
    for line in lines:
        prev = link(prev, line)
    assert prev == segment.manifest["last_hash"] == archived[-1].hash
    assert segment.manifest["object_sha256"] == hashlib.sha256(segment.data).hexdigest()
    assert check_segment(record_of(segment), segment.data, segment.manifest_bytes, archived) == []


def test_a_changed_line_is_named_by_its_sequence_and_event() -> None:
    archived = rows(5)
    segment = build_segment("abc", 1, archived)
    lines = gzip.decompress(segment.data).decode().split("\n")
    lines[3] = lines[3].replace("3", "4")
    problems = check_segment(record_of(segment), gzip.compress("\n".join(lines).encode()), segment.manifest_bytes, archived)
    assert "changed: sha256" in problems[0].detail
    assert [(p.seq, p.event_id) for p in problems if p.seq] == [(4, "E004")]


def test_missing_objects_a_lying_manifest_and_garbage_are_reported() -> None:
    archived = rows(3)
    segment = build_segment("abc", 1, archived)
    record = record_of(segment)
    assert "missing" in check_segment(record, None, segment.manifest_bytes, archived)[0].detail
    assert "manifest" in check_segment(record, segment.data, None, archived)[0].detail
    lying = json.dumps({**json.loads(segment.manifest_bytes), "last_seq": 99}).encode()
    assert "last_seq 99" in check_segment(record, segment.data, lying, archived)[0].detail
    garbage = check_segment(record, b"not gzip", segment.manifest_bytes, archived)
    assert "cannot be decompressed" in garbage[-1].detail
    short = check_segment(replace(record, events=4), segment.data, segment.manifest_bytes, archived)
    assert any("holds 3 events" in p.detail for p in short)


def test_a_segment_is_due_by_count_or_by_age() -> None:
    policy = SegmentPolicy(max_events=10, max_age=timedelta(minutes=5))
    assert policy.is_due(10, T0, T0)
    assert not policy.is_due(9, T0, T0 + timedelta(minutes=4))
    assert policy.is_due(1, T0, T0 + timedelta(minutes=5))
    assert not policy.is_due(0, None, T0 + timedelta(days=1))
