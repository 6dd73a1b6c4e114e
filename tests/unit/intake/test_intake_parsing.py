"""Reading `cf:ingest` entries and screening submissions (pure, no servers)."""

from __future__ import annotations

import itertools
import json

import pytest

from services.intake.ingest import (
    CancelPayload,
    DataReadyPayload,
    IngestEntryError,
    IngestKind,
    IngestSource,
    ingest_sources,
    parse_ingest_entry,
)
from services.intake.screening import Accepted, Rejected, Repeated, SubmitRequest, screen
from shared.config import FoundTemplate, TemplateCall, TemplateDocument
from shared.config.submission_templates import unknown_template
from shared.delivery.entry_steps import Entry
from shared.submission import DatasetRef, Problem


def entry(**fields: str | bytes) -> Entry:
    return Entry("5-0", {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in fields.items()})


def valid(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "t", "project": "p", "priority_class": "core", "gpus": 1, "estimate_gpu_hours": 1, "profile": "memory",
    }  # fmt: skip
    return body | overrides


def test_a_submit_entry_keeps_its_payload_for_later_validation() -> None:
    parsed = parse_ingest_entry(entry(type="task.submit", payload='{"gpus": "many"}'))
    assert (parsed.kind, parsed.payload, parsed.actor, parsed.source) == (
        IngestKind.SUBMIT, {"gpus": "many"}, "upstream:ingest", "ingest:5-0",
    )  # fmt: skip


@pytest.mark.parametrize("claimed", ["user:admin", "service:dispatcher", "upstream:other", " ", "x" * 500])
def test_an_entry_cannot_choose_its_actor_the_stream_does(claimed: str) -> None:
    named, shared = IngestSource.named("etl"), IngestSource.shared("legacy")
    on_named = named.parse(entry(type="task.submit", payload="{}", actor=claimed))
    on_shared = shared.parse(entry(type="task.cancel", payload='{"task_id": "T1"}', actor=claimed))
    assert (on_named.actor, on_named.stream, on_named.event_id, on_named.source) == (
        "upstream:etl", "cf:ingest:etl", "ingest:etl:5-0", "ingest:etl:5-0",
    )  # fmt: skip
    assert (on_shared.actor, on_shared.stream, on_shared.event_id) == ("upstream:legacy", "cf:ingest", "ingest:5-0")


def test_intake_reads_the_shared_stream_and_each_configured_upstreams_own() -> None:
    sources = ingest_sources(["etl", "pipeline-x", "etl"], "ingest")
    assert [(s.stream, s.actor) for s in sources] == [
        ("cf:ingest", "upstream:ingest"), ("cf:ingest:etl", "upstream:etl"), ("cf:ingest:pipeline-x", "upstream:pipeline-x"),
    ]  # fmt: skip


def test_cancel_and_data_ready_payloads_are_typed() -> None:
    cancel = parse_ingest_entry(entry(type="task.cancel", payload='{"task_id": "T1"}'))
    ready = parse_ingest_entry(entry(type="data.ready", payload='{"dataset": "d", "version": 3}'))
    obj = parse_ingest_entry(entry(type="data.ready", payload='{"uri": "s3://bkt/a/b.bin"}'))
    assert cancel.payload == CancelPayload(task_id="T1") and cancel.actor == "upstream:ingest"
    assert isinstance(ready.payload, DataReadyPayload)
    assert ready.payload.input_ref() == DatasetRef(dataset="d", version="3")
    assert obj.payload.input_ref() == "s3://bkt/a/b.bin"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"payload": "{}"}, "5-0: field 'type' is missing"),
        ({"type": "task.delete", "payload": "{}"}, "field 'type' is 'task.delete'; expected one of task.submit"),
        ({"type": "task.submit"}, "field 'payload' is missing"),
        ({"type": "task.submit", "payload": "{nope"}, "field 'payload' is not valid JSON"),
        ({"type": "task.submit", "payload": b"\xff\xfe"}, "field 'payload' is not UTF-8 text"),
        ({"type": "task.cancel", "payload": '{"task_id": ""}'}, "task_id: got \"\"; expected non-empty text"),
        ({"type": "task.cancel", "payload": '{"id": "T1"}'}, "id: got \"T1\"; expected no such field"),
        ({"type": "data.ready", "payload": '{"dataset": "d", "version": 1, "uri": "s3://bkt/k"}'}, "not both"),
        ({"type": "data.ready", "payload": '{"uri": "http://x/y"}'}, "uri: got \"http://x/y\"; expected an s3://"),
    ],
)
def test_unreadable_entries_say_which_field_is_wrong(fields: dict[str, str | bytes], says: str) -> None:
    with pytest.raises(IngestEntryError) as error:
        parse_ingest_entry(entry(**fields))
    assert says in str(error.value)


def no_templates(call: TemplateCall) -> FoundTemplate | Problem:
    return unknown_template(call, 0)


def test_screening_finds_rejections_and_repeats_within_a_batch() -> None:
    ids = (f"ID{n}" for n in itertools.count())
    requests = [
        SubmitRequest(valid(idempotency_key="k"), "a", "http"),
        SubmitRequest(valid(gpus=0, name="bad", project=7), "a", "http"),
        SubmitRequest(valid(idempotency_key="k"), "a", "http"),
        SubmitRequest(["not", "an", "object"], "a", "http"),
        SubmitRequest(valid(), "a", "http"),
        SubmitRequest(valid(idempotency_key="k", name="other"), "a", "http"),
    ]
    first, bad, repeat, not_object, keyless, conflict = screen(requests, lambda: next(ids), no_templates)

    assert isinstance(first, Accepted) and first.event_key == "k"
    assert isinstance(bad, Rejected) and (bad.name, bad.project) == ("bad", None)
    assert {p.field for p in bad.problems} == {"gpus", "project"}
    assert isinstance(repeat, Repeated) and repeat.first is first
    assert isinstance(not_object, Rejected) and not_object.problems[0].field == "(whole input)"
    assert json.dumps(not_object.problems[0].value) == '["not", "an", "object"]'
    assert isinstance(keyless, Accepted) and keyless.event_key == f"auto:{keyless.task_id}"
    assert isinstance(conflict, Rejected) and conflict.conflict_with == first.task_id
    assert [p.field for p in conflict.problems] == ["idempotency_key"]
    assert len({first.task_id, bad.task_id, not_object.task_id, keyless.task_id, conflict.task_id}) == 5


def test_screening_applies_a_template_and_rejects_an_unknown_one_naming_the_field() -> None:
    ids = (f"ID{n}" for n in itertools.count())
    defaults = TemplateDocument.model_validate({"defaults": {"project": "llm", "gpus": 8, "priority_class": "standard",
                                                             "estimate_gpu_hours": 3, "profile": "compute"}})

    def lookup(call: TemplateCall) -> FoundTemplate | Problem:
        return FoundTemplate("ft", 4, defaults) if call.name == "ft" else unknown_template(call, 0)

    requests = [SubmitRequest({"name": "run", "template": "ft", "gpus": 2}, "a", "http"),
                SubmitRequest({"name": "run", "template": "nope@1"}, "a", "http")]
    applied, unknown = screen(requests, lambda: next(ids), lookup)

    assert isinstance(applied, Accepted)
    assert (applied.submission.template, applied.submission.gpus, applied.submission.project) == ("ft@4", 2, "llm")
    assert isinstance(unknown, Rejected) and [p.field for p in unknown.problems] == ["template"]
