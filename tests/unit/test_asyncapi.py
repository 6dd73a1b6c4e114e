"""docs/asyncapi.yaml is the AsyncAPI document `services.asyncapi` generates (FastStream), and it
describes every stream and consumer group of `shared/names.py`.

After an intended change (a new event type, a changed payload), regenerate and review the diff:
    CARDFLOW_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/unit/test_asyncapi.py
(or `.venv/bin/python -m services.asyncapi > docs/asyncapi.yaml`).
"""

from __future__ import annotations

import difflib
import os
import re
from urllib.parse import unquote
from pathlib import Path

import pytest
import yaml

from services.asyncapi import AGENT_INBOX, PRODUCER_STREAM, DeadLetterEntry, asyncapi_yaml
from shared import names
from shared.events.catalog import EVENT_CLASSES
from shared.delivery.deadletter import ORIGINAL_PREFIX, DeadLetterSource, DeadReason, deadletter_fields

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "asyncapi.yaml"


def test_the_published_document_is_current() -> None:
    generated = asyncapi_yaml()
    if os.environ.get("CARDFLOW_UPDATE_SNAPSHOTS") == "1":
        DOCUMENT.write_text(generated, encoding="utf-8")
    committed = DOCUMENT.read_text(encoding="utf-8")
    if generated != committed:
        diff = "\n".join(list(difflib.unified_diff(committed.splitlines(), generated.splitlines(), "docs", "code", lineterm=""))[:60])
        pytest.fail(f"{DOCUMENT} is out of date; regenerate it (see this module's docstring).\n{diff}")


def test_every_stream_and_consumer_group_is_documented() -> None:
    document = yaml.safe_load(DOCUMENT.read_text(encoding="utf-8"))
    channels = document["channels"].values()
    addresses = {channel["address"] for channel in channels}
    groups = {(c["address"], c["bindings"]["redis"].get("groupName")) for c in channels} - {(a, None) for a in addresses}

    routed = {names.routed_stream(group) for group in (names.READINESS_GROUP, names.MATCHER_GROUP, names.ALERTS_GROUP)}
    streams = {names.INGEST_STREAM, names.EVENTS_STREAM, names.REPORTS_STREAM, names.DEADLETTER_STREAM, AGENT_INBOX,
               PRODUCER_STREAM, *routed}  # fmt: skip
    assert addresses == streams
    assert groups == {
        (PRODUCER_STREAM, names.GATE_GROUP),
        (names.INGEST_STREAM, names.INTAKE_GROUP),
        (names.routed_stream(names.READINESS_GROUP), names.READINESS_GROUP),
        (names.routed_stream(names.MATCHER_GROUP), names.MATCHER_GROUP),
        (names.EVENTS_STREAM, names.DISPATCHER_GROUP),
        (names.EVENTS_STREAM, names.LEDGER_GROUP),
        (names.EVENTS_STREAM, names.AUDIT_GROUP),
        (names.routed_stream(names.ALERTS_GROUP), names.ALERTS_GROUP),
        (names.EVENTS_STREAM, names.CONSOLE_GROUP),
        (names.REPORTS_STREAM, names.DISPATCHER_GROUP),
        (AGENT_INBOX, names.AGENT_GROUP),
    }
    operations = {op["action"] for op in document["operations"].values()}
    assert operations == {"send", "receive"}
    event_payload = document["components"]["schemas"]["cf:events:append:Payload"]
    documented = {ref["$ref"].rsplit("/", 1)[1] for ref in event_payload["oneOf"]}
    assert {name.rsplit("__", 1)[-1] for name in documented} == {cls.__name__ for cls in EVENT_CLASSES}


def test_every_reference_resolves_and_same_named_classes_stay_apart() -> None:
    text = DOCUMENT.read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    references = set(re.findall(r"\$ref: '#/([^']+)'", text)) | set(re.findall(r": '#/(components/schemas/[^']+)'", text))

    assert references
    for reference in references:
        node = document
        for part in reference.split("/"):
            node = node[unquote(part)]
    schemas = document["components"]["schemas"]
    report = schemas["cf:reports:append:Payload"]["discriminator"]["mapping"]["report.checkpointed"]
    event = schemas["cf:events:append:Payload"]["discriminator"]["mapping"]["task.checkpointed"]
    assert report != event  # the agent's TaskCheckpointed report and the task.checkpointed event


def test_the_dead_letter_message_has_exactly_the_fields_the_code_writes() -> None:
    source = DeadLetterSource(names.INGEST_STREAM, names.INTAKE_GROUP, "c", "1-0")
    written = deadletter_fields(source, {b"type": b"x"}, DeadReason.INVALID, 1, "boom")

    assert {key for key in written if not (isinstance(key, bytes) and key.startswith(ORIGINAL_PREFIX))} == set(
        DeadLetterEntry.model_fields
    )
