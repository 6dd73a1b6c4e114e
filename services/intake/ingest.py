"""Entries of `cf:ingest` as upstream systems write them with any plain Redis client, parsed.

One entry = flat string fields (docs/ingest.md is the contract for upstream teams):

    type     task.submit | task.cancel | data.ready
    payload  JSON: a task submission (docs/submission.md) | {task_id, reason?} |
             {dataset, version, location?, source?} or {uri, source?}

WHO asks is never a field the writer chooses: it is the stream. An entry on `cf:ingest:<name>`
(a configured upstream, writable only by its Redis user) is recorded as actor `upstream:<name>`;
one on the shared `cf:ingest` as `upstream:<Settings.ingest_default_upstream>`. An `actor` field,
which older clients sent, is ignored.

`IngestSource(stream, upstream).parse` is intake's parser for one stream's delivery consumer
(`parse_entry=True`). An entry it cannot read (no or unknown `type`, `payload` missing or not
JSON, a cancel or data.ready payload of the wrong shape) raises `IngestEntryError`, whose message
says which field is wrong and how; the consumer dead-letters such entries at once. A `task.submit`
payload that is JSON but not a valid task is NOT a parse error: intake turns it into a rejected
task with every problem listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from shared.delivery.entry_steps import Entry
from shared.events.values import Detail, EntityId
from shared.names import INGEST_STREAM, ingest_stream
from shared.submission import DatasetRef, S3Uri, describe, problems_from
from shared.submission.limits import MAX_SUBMISSION_BYTES
from shared.submission.raw import raw_problems

DEFAULT_UPSTREAM = "ingest"
"""The upstream name of entries on the shared `cf:ingest` unless `Settings.ingest_default_upstream` says another."""


class IngestKind(StrEnum):
    """What an entry asks for (its `type` field)."""

    SUBMIT = "task.submit"  # create a task from a submission
    CANCEL = "task.cancel"  # cancel a task (intake asks the dispatcher)
    DATA_READY = "data.ready"  # a dataset version (or an s3:// object) is ready


class IngestEntryError(ValueError):
    """An entry that can never be processed; the message names the field and what is wrong."""

    def __init__(self, entry_id: str, problem: str) -> None:
        super().__init__(f"cf:ingest entry {entry_id}: {problem}")


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class CancelPayload(BaseModel):
    """Payload of `task.cancel`."""

    model_config = _FROZEN

    task_id: EntityId
    reason: Detail | None = None


def _version_as_text(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class DataReadyPayload(BaseModel):
    """Payload of `data.ready`: a dataset version `{dataset, version}`, or one object `{uri}`."""

    model_config = _FROZEN

    dataset: str | None = Field(None, min_length=1, max_length=200)
    version: Annotated[str | None, BeforeValidator(_version_as_text)] = Field(None, min_length=1, max_length=100)
    uri: S3Uri | None = None
    location: str | None = Field(None, min_length=1, max_length=1024)
    source: Detail = ""

    @model_validator(mode="after")
    def _one_form(self) -> DataReadyPayload:
        if self.uri is not None and (self.dataset is not None or self.version is not None):
            raise ValueError("either {dataset, version} or {uri}, not both")
        if self.uri is None and (self.dataset is None or self.version is None):
            raise ValueError("{dataset, version} with both fields, or {uri}")
        return self

    def input_ref(self) -> str | DatasetRef:
        """What became ready, as a task input names it."""
        if self.uri is not None:
            return self.uri
        return DatasetRef(dataset=self.dataset or "", version=self.version or "")


@dataclass(frozen=True, slots=True)
class IngestEntry:
    """A readable `cf:ingest` entry. `payload` is the decoded JSON for `task.submit` (validated
    later, so that every problem can be reported), else a `CancelPayload` / `DataReadyPayload`."""

    entry_id: str
    kind: IngestKind
    payload: Any
    fields: Mapping[bytes, bytes]
    origin: IngestSource

    @property
    def actor(self) -> str:
        return self.origin.actor

    @property
    def stream(self) -> str:
        return self.origin.stream

    # What the delivery consumer binds into the log context of a message.
    @property
    def event_id(self) -> str:
        """Intake's inbox id: entry ids are unique per stream only, so the stream is part of it."""
        return f"{self.origin.label}:{self.entry_id}"

    @property
    def type(self) -> str:
        return self.kind.value

    @property
    def subject(self) -> str:
        return f"ingest/{self.entry_id}"

    @property
    def correlation_id(self) -> None:
        return None

    @property
    def source(self) -> str:
        """How intake records where a task came from."""
        return self.event_id


@dataclass(frozen=True, slots=True)
class IngestSource:
    """One stream intake reads and the upstream its entries are recorded under."""

    stream: str
    upstream: str

    @classmethod
    def shared(cls, upstream: str = DEFAULT_UPSTREAM) -> IngestSource:
        """The shared `cf:ingest`, its entries recorded as `upstream:<upstream>`."""
        return cls(INGEST_STREAM, upstream)

    @classmethod
    def named(cls, upstream: str) -> IngestSource:
        """A configured upstream's own stream `cf:ingest:<upstream>`."""
        return cls(ingest_stream(upstream), upstream)

    @property
    def actor(self) -> str:
        return f"upstream:{self.upstream}"

    @property
    def label(self) -> str:
        """`ingest` for the shared stream (the inbox ids it always had), `ingest:<name>` for a named one."""
        return "ingest" if self.stream == INGEST_STREAM else f"ingest:{self.upstream}"

    def parse(self, entry: Entry) -> IngestEntry:
        """The `IngestEntry` of a raw entry of this stream; `IngestEntryError` when it cannot be processed."""
        fields = {_text(entry.entry_id, key, "field name"): value for key, value in entry.fields.items()}
        kind = _kind(entry.entry_id, fields)
        body = _payload_json(entry.entry_id, fields)
        payload = body if kind is IngestKind.SUBMIT else _typed_payload(entry.entry_id, kind, body)
        return IngestEntry(entry.entry_id, kind, payload, dict(entry.fields), self)


def ingest_sources(upstreams: Sequence[str], default_upstream: str = DEFAULT_UPSTREAM) -> list[IngestSource]:
    """Every stream intake reads: the shared `cf:ingest`, then each configured upstream's own."""
    return [IngestSource.shared(default_upstream), *(IngestSource.named(name) for name in dict.fromkeys(upstreams))]


def parse_ingest_entry(entry: Entry) -> IngestEntry:
    """An entry of the shared `cf:ingest` under the default upstream name (tests, tools)."""
    return IngestSource.shared().parse(entry)


def _kind(entry_id: str, fields: Mapping[str, bytes]) -> IngestKind:
    known = ", ".join(kind.value for kind in IngestKind)
    raw = fields.get("type")
    if raw is None:
        raise IngestEntryError(entry_id, f"field 'type' is missing; expected one of {known} (fields: {sorted(fields)})")
    text = _text(entry_id, raw, "field 'type'")
    try:
        return IngestKind(text)
    except ValueError:
        raise IngestEntryError(entry_id, f"field 'type' is {text!r}; expected one of {known}") from None


def _payload_json(entry_id: str, fields: Mapping[str, bytes]) -> Any:
    raw = fields.get("payload")
    if raw is None:
        raise IngestEntryError(entry_id, f"field 'payload' is missing; expected JSON (fields: {sorted(fields)})")
    if len(raw) > MAX_SUBMISSION_BYTES:
        raise IngestEntryError(entry_id, f"field 'payload' is {len(raw)} bytes; expected at most {MAX_SUBMISSION_BYTES}")
    text = _text(entry_id, raw, "field 'payload'")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        reason = "nested too deeply to read" if isinstance(error, RecursionError) else str(error)
        excerpt = text if len(text) <= 80 else text[:77] + "..."
        raise IngestEntryError(entry_id, f"field 'payload' is not valid JSON ({reason}): {excerpt!r}") from None


def _typed_payload(entry_id: str, kind: IngestKind, body: Any) -> CancelPayload | DataReadyPayload:
    model = CancelPayload if kind is IngestKind.CANCEL else DataReadyPayload
    hostile = raw_problems(body)
    if hostile:
        raise IngestEntryError(entry_id, f"field 'payload' of a {kind.value} entry is not valid:\n{describe(hostile)}")
    try:
        return model.model_validate(body)
    except ValidationError as error:
        problems = describe(problems_from(error, known_fields=model.model_fields))
        raise IngestEntryError(entry_id, f"field 'payload' of a {kind.value} entry is not valid:\n{problems}") from None


def _text(entry_id: str, raw: bytes | str, where: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode()
    except UnicodeDecodeError as error:
        raise IngestEntryError(entry_id, f"{where} is not UTF-8 text ({error})") from None
