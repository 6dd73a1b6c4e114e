"""Templates applied at intake against real PostgreSQL and S3: precedence, pinning, unknown names.

The templates are written through the config store (S3 version + row), then intake's command
(`submit_task`, what the HTTP API and the ingest stream run) reads them in the same database.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from services.common.runtime import Emitter, prepare_schema
from services.config.service import SPEC as CONFIG
from services.config.store import ConfigStore
from services.intake.commands import submit_task
from services.intake.service import SPEC as INTAKE
from shared.config import POLICY, template_document
from shared.delivery import create_pool
from shared.events import parse_event
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.delivery_support import unique

FINETUNE = """description: fine-tuning on one H100 node
defaults:
  project: llm
  priority_class: standard
  gpus: 8
  estimate_gpu_hours: 16
  profile: compute
  env: {NCCL_DEBUG: WARN}
"""


@pytest.fixture
async def pool(fresh_settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    created = await create_pool(fresh_settings.database_dsn or "")
    for spec in (INTAKE, CONFIG):
        await prepare_schema(created, spec)
    yield created
    await created.close()


@pytest.fixture
async def store(pool: asyncpg.Pool, fresh_settings: Settings) -> AsyncIterator[ConfigStore]:
    async with open_object_store(fresh_settings) as objects:
        await objects.ensure_bucket("cardflow-config")
        yield ConfigStore(pool, objects, "config/test", prefix=f"{unique('t')}/")


async def submit(pool: asyncpg.Pool, raw: dict | bytes) -> tuple[object, Any]:
    """Submit like the HTTP API (a bytes body) or the ingest stream (an object) does."""
    outcome = await submit_task(pool, Emitter("intake", "console/t", "user:alice"), raw, "user:alice")
    body = await pool.fetchval("SELECT body FROM intake.outbox ORDER BY position DESC LIMIT 1")
    return outcome, parse_event(body)


async def test_templates_are_applied_pinned_and_stored_resolved(pool: asyncpg.Pool, store: ConfigStore) -> None:
    name = template_document("llm-finetune")
    await store.apply(name, FINETUNE, base=None, actor="user:ops", reason="first")

    first, event = await submit(pool, {"name": "ft run 1", "template": "llm-finetune", "gpus": 4,
                                       "env": {"RUN": "1"}})
    await store.set(name, ["defaults.estimate_gpu_hours=24"], base=1, actor="user:ops", reason="longer runs")
    latest, latest_event = await submit(pool, {"name": "ft run 2", "template": "llm-finetune"})
    pinned, pinned_event = await submit(pool, json.dumps({"name": "ft run 3", "template": "llm-finetune@1"}).encode())
    stored = await pool.fetchrow("SELECT template, submission FROM intake.tasks WHERE task_id = $1", first.task_id)  # type: ignore[attr-defined]

    submission = event.data.submission
    assert (submission.template, submission.gpus, submission.project) == ("llm-finetune@1", 4, "llm")
    assert submission.env == {"NCCL_DEBUG": "WARN", "RUN": "1"}
    assert stored["template"] == "llm-finetune@1" and stored["submission"]["estimate_gpu_hours"] == 16
    assert (latest_event.data.submission.template, latest_event.data.submission.estimate_gpu_hours) == ("llm-finetune@2", 24)
    assert (pinned_event.data.submission.template, pinned_event.data.submission.estimate_gpu_hours) == ("llm-finetune@1", 16)
    assert all(o.created for o in (first, latest, pinned))  # type: ignore[attr-defined]


async def test_a_retry_naming_the_template_alone_still_finds_its_task_after_a_new_template_version(
    pool: asyncpg.Pool, store: ConfigStore
) -> None:
    name = template_document("llm-finetune")
    await store.apply(name, FINETUNE, base=None, actor="user:ops", reason="first")
    request = {"idempotency_key": "upstream-42", "name": "ft", "template": "llm-finetune"}
    first, _ = await submit(pool, request)
    await store.set(name, ["defaults.estimate_gpu_hours=24"], base=1, actor="user:ops", reason="longer runs")

    retry, _ = await submit(pool, json.dumps(request).encode())  # the upstream retries, unchanged
    changed, event = await submit(pool, {**request, "gpus": 2})  # the same key, another body

    assert first.created and not retry.created and retry.task_id == first.task_id  # type: ignore[attr-defined]
    assert changed.problems and event.type == "task.rejected"  # type: ignore[attr-defined]
    assert event.data.reasons[0].field == "idempotency_key" and first.task_id in event.data.reasons[0].problem  # type: ignore[attr-defined]


@pytest.mark.parametrize(("call", "says"), [
    ("llm-finetune@5", "expected a version of template 'llm-finetune' between 1 and 1"),
    ("nope", "expected a known template: there is no template 'nope'"),
])
async def test_an_unknown_template_or_version_is_a_rejection_with_the_reason(
    pool: asyncpg.Pool, store: ConfigStore, call: str, says: str
) -> None:
    await store.apply(template_document("llm-finetune"), FINETUNE, base=None, actor="user:ops", reason="first")

    outcome, event = await submit(pool, {"name": "x", "template": call})

    assert outcome.problems and event.type == "task.rejected"  # type: ignore[attr-defined]
    [reason] = event.data.reasons
    assert (reason.field, reason.value) == ("template", call) and says in reason.problem


async def test_a_merged_submission_is_validated_as_a_whole(pool: asyncpg.Pool, store: ConfigStore) -> None:
    await store.apply(template_document("thin"), "defaults: {project: llm}\n", base=None, actor="user:ops", reason="r")
    outcome, event = await submit(pool, {"name": "x", "template": "thin", "gpus": 0})
    assert event.type == "task.rejected"
    assert {r.field for r in event.data.reasons} == {"gpus", "priority_class", "estimate_gpu_hours", "profile"}
    assert not outcome.created  # type: ignore[attr-defined]


async def test_the_policy_documents_limits_apply_to_the_next_submission(pool: asyncpg.Pool, store: ConfigStore) -> None:
    # issue 15: the site limits (SubmissionLimits) are the policy document's `limits` section
    wide = {"name": "wide", "project": "llm", "priority_class": "standard", "gpus": 8, "estimate_gpu_hours": 8,
            "profile": "compute"}
    chatty = {**wide, "name": "chatty", "gpus": 1, "checkpoint": {"interval_minutes": 2}}
    await store.apply(POLICY, "limits:\n  max_gpus_per_task: 4\n  min_checkpoint_interval_minutes: 5\n", base=None,
                      actor="user:ops", reason="a 4-GPU site")
    refused, _ = await submit(pool, wide)
    too_often, _ = await submit(pool, chatty)
    await store.set(POLICY, ["limits.max_gpus_per_task=16"], base=1, actor="user:ops", reason="a bigger node")
    accepted, event = await submit(pool, {**wide, "name": "wide again"})

    assert [(p.field, "at most 4 GPUs" in p.expected) for p in refused.problems] == [("gpus", True)]  # type: ignore[attr-defined]
    assert [p.field for p in too_often.problems] == ["checkpoint.interval_minutes"]  # type: ignore[attr-defined]
    assert accepted.created and event.data.submission.gpus == 8  # type: ignore[attr-defined]
