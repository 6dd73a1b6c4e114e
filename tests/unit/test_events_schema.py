"""The JSON Schema of every event is frozen in a snapshot: a contract never changes unnoticed.

Agent reports and commands are frozen the same way in `agent_messages.schema.json`.
After an intended change, regenerate and review the diff:
    CARDFLOW_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/unit/test_events_schema.py
"""

from __future__ import annotations

import difflib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pydantic import TypeAdapter

from shared.events import EVENT_ADAPTER, AgentCommand, AgentReport, LeaseGranted, TaskSubmitted, canonical_json, make_event

SNAPSHOT = Path(__file__).parents[1] / "snapshots" / "events.schema.json"
AGENT_SNAPSHOT = Path(__file__).parents[1] / "snapshots" / "agent_messages.schema.json"
UPDATE_VARIABLE = "CARDFLOW_UPDATE_SNAPSHOTS"


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def assert_matches_snapshot(schema: dict[str, Any], snapshot: Path) -> None:
    """Compare `schema` with the file; rewrite the file instead when the update variable is 1."""
    actual = render(schema)
    if os.environ.get(UPDATE_VARIABLE) == "1":
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(actual, encoding="utf-8")
        return
    how = f"If the change is intended, regenerate it with {UPDATE_VARIABLE}=1 and commit the file."
    if not snapshot.exists():
        pytest.fail(f"snapshot {snapshot} is missing. {how}")
    expected = snapshot.read_text(encoding="utf-8")
    if actual != expected:
        diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "snapshot", "code", lineterm="")
        shown = "\n".join(list(diff)[:80])
        pytest.fail(f"the JSON Schema differs from {snapshot}. {how}\n{shown}")


def test_event_schema_matches_the_snapshot() -> None:
    assert_matches_snapshot(EVENT_ADAPTER.json_schema(), SNAPSHOT)


def test_agent_report_and_command_schemas_match_the_snapshot() -> None:
    schemas = {
        "reports": TypeAdapter(AgentReport).json_schema(),
        "commands": TypeAdapter(AgentCommand).json_schema(),
    }
    assert_matches_snapshot(schemas, AGENT_SNAPSHOT)


def sample_events() -> list[Any]:
    common = {"producer": "dispatcher/a", "actor": "service:dispatcher", "subject_seq": 1}
    grant = make_event(
        LeaseGranted, subject="lease/L1", **common,
        data={"lease_id": "L1", "task_id": "T1", "agent_id": "a1", "node_id": "n1", "card_type": "H100",
              "gpu_indices": [0, 1], "fencing_token": 3, "ttl_s": 30, "expires_at": datetime(2025, 1, 1, tzinfo=UTC)},
    )
    submitted = make_event(
        TaskSubmitted, subject="task/T1", **common,
        data={"task_id": "T1", "idempotency_key": "k",
              "submission": {"name": "n", "project": "p", "priority_class": "core", "gpus": 1,
                             "estimate_gpu_hours": 1, "profile": "memory",
                             "inputs": ["s3://bucket-a/x", {"dataset": "d", "version": "1"}]}},
    )
    return [grant, submitted]


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: e.type)
def test_the_snapshot_describes_the_wire_format(event: Any) -> None:
    schema = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    wire = json.loads(canonical_json(event))
    jsonschema.validate(wire, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wire | {"unexpected": 1}, schema)
