"""The config store against real PostgreSQL and S3: versions, refusals, races, rollback, crashes.

One bucket for the module (a bucket costs the embedded SeaweedFS a collection of volumes); each
test has its own database (`fresh_settings`), so document names never collide in PostgreSQL.
The bucket is shared by the tests' databases, which is harmless: rows name exact S3 versions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from services.common.runtime import prepare_schema
from services.config.seeding import seed_documents
from services.config.service import SPEC
from services.config.store import ConfigStore, NothingToChangeError, StaleBaseError, UnknownVersionError
from services.dispatcher.config import DispatcherConfig
from shared.config import CARDS, POLICY, DocumentInvalid, template_document, validate_document
from shared.delivery.db import create_pool
from shared.events import parse_event
from shared.events.config import ConfigAction
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.delivery_support import unique

BUCKET = unique("cf-config").replace("_", "-")
OPERATOR = "user:ops-alice"


@pytest.fixture
async def store(fresh_settings: Settings) -> AsyncIterator[ConfigStore]:
    pool = await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=8)
    try:
        await prepare_schema(pool, SPEC)
        async with open_object_store(fresh_settings) as objects:
            await objects.ensure_bucket(BUCKET)
            yield ConfigStore(pool, objects, "config/test", bucket=BUCKET, prefix=f"{unique('t')}/")
    finally:
        await pool.close()


async def seeded(store: ConfigStore) -> None:
    await seed_documents(store, actor="service:config", config=DispatcherConfig(preempt_after_s=42))


async def outbox_events(pool: asyncpg.Pool) -> list[Any]:
    rows = await pool.fetch("SELECT body FROM config.outbox ORDER BY position")
    return [parse_event(row["body"].encode()) for row in rows]


async def test_seeding_writes_version_1_of_policy_and_cards_once(store: ConfigStore) -> None:
    await seeded(store)
    await seeded(store)

    policy = await store.version(POLICY)
    cards = await store.version(CARDS)
    events = await outbox_events(store.pool)

    assert (policy.version, cards.version) == (1, 1)
    assert validate_document(POLICY, policy.content or "").model.preemption.after_s == 42
    assert "preempt_after_s=42" in policy.reason and policy.actor == "service:config"
    assert "A100-80G" in (cards.content or "") and "# cardflow card catalog" in (cards.content or "")
    assert [(e.type, e.data.name, e.data.new_version, e.data.action) for e in events] == [
        ("config.changed", "policy", 1, ConfigAction.SEEDED), ("config.changed", "cards", 1, ConfigAction.SEEDED),
    ]


async def test_a_bad_document_is_refused_with_every_problem_and_the_old_one_stays(store: ConfigStore) -> None:
    await seeded(store)
    versions_before = await store.objects.list_versions(BUCKET, store.key_of(POLICY))
    bad = "queue: {order: lifo}\nheadroom: {default: 1.5}\npreemtion: {enabled: false}\n"

    with pytest.raises(DocumentInvalid) as refused:
        await store.apply(POLICY, bad, base=1, actor=OPERATOR, reason="try")

    fields = [problem.field for problem in refused.value.problems]
    assert fields == ["queue.order", "headroom.default", "preemtion"]
    assert "did you mean 'preemption'" in str(refused.value)
    assert (await store.head(POLICY)).version == 1  # type: ignore[union-attr]
    assert await store.objects.list_versions(BUCKET, store.key_of(POLICY)) == versions_before
    assert len(await outbox_events(store.pool)) == 2  # the two seeds only


async def test_set_changes_only_the_named_keys_keeps_comments_and_announces_the_diff(store: ConfigStore) -> None:
    await seeded(store)

    change = await store.set(POLICY, ["headroom.per_card_type.H100=0.25", "preemption.after_s=30"], base=1,
                             actor=OPERATOR, reason="burst capacity for the launch week")

    text = change.record.content or ""
    model = validate_document(POLICY, text).model
    event = (await outbox_events(store.pool))[-1]
    assert change.record.version == 2 and change.record.action is ConfigAction.SET
    assert model.headroom.per_card_type == {"H100": 0.25} and model.preemption.after_s == 30
    assert "# grace: a core task preempts only after waiting this many seconds" in text
    assert "+    H100: 0.25" in change.diff and "-  after_s: 42.0" in change.diff
    assert (event.type, event.actor, event.data.old_version, event.data.new_version) == ("config.changed", OPERATOR, 1, 2)
    assert event.data.reason == "burst capacity for the launch week" and event.data.diff == change.diff
    assert event.data.s3_version_id == change.record.s3_version_id


async def test_the_bucket_holds_every_version_and_show_reads_it_back_checked(store: ConfigStore) -> None:
    await seeded(store)
    await store.set(POLICY, ["queue.aging_per_hour=2"], base=1, actor=OPERATOR, reason="age faster")

    record, text = await store.read_from_bucket(POLICY, 1)
    latest = await store.objects.get(BUCKET, store.key_of(POLICY), version_id=(await store.head(POLICY)).s3_version_id)  # type: ignore[union-attr]

    assert record.version == 1 and text == (await store.version(POLICY, 1)).content
    assert b"aging_per_hour: 2" in latest.body
    assert latest.metadata["cardflow-version"] == "2" and latest.metadata["cardflow-actor"] == OPERATOR


async def test_a_change_on_a_stale_base_is_refused_and_nothing_is_written(store: ConfigStore) -> None:
    await seeded(store)
    await store.set(POLICY, ["queue.aging_per_hour=2"], base=1, actor="user:bob", reason="first")

    with pytest.raises(StaleBaseError, match=r"based on version 1, but version 2 by user:bob"):
        await store.set(POLICY, ["queue.aging_per_hour=3"], base=1, actor=OPERATOR, reason="second")

    assert [r.version for r in await store.history(POLICY)] == [1, 2]


async def test_two_applies_on_the_same_base_exactly_one_wins_and_the_loser_leaves_nothing(store: ConfigStore) -> None:
    await seeded(store)
    base = (await store.version(POLICY)).content or ""
    texts = [base.replace("aging_per_hour: 1.0", f"aging_per_hour: {n}") for n in range(2, 8)]

    async def attempt(n: int) -> str:
        try:
            await store.apply(POLICY, texts[n], base=1, actor=f"user:op{n}", reason=f"attempt {n}")
        except StaleBaseError:
            return "stale"
        return "won"

    outcomes = await asyncio.gather(*(attempt(n) for n in range(len(texts))))

    history = await store.history(POLICY)
    assert outcomes.count("won") == 1
    assert [r.version for r in history] == [1, 2]
    assert history[1].actor == f"user:op{outcomes.index('won')}"
    assert await store.dangling(POLICY) == []  # every loser deleted its own S3 version


async def test_the_race_at_the_commit_point_has_one_winner_even_when_both_passed_the_check(store: ConfigStore) -> None:
    """Both changes read the same head and PUT before either commits: the primary key decides."""
    await seeded(store)
    base = (await store.version(POLICY)).content or ""
    both_put = asyncio.Barrier(2)
    real_put = store.put_object

    async def put_then_wait(*args: Any, **kwargs: Any) -> Any:
        put = await real_put(*args, **kwargs)
        await both_put.wait()
        return put

    store.put_object = put_then_wait  # type: ignore[method-assign]
    results = await asyncio.gather(
        store.apply(POLICY, base.replace("max_heavy_per_node: 2", "max_heavy_per_node: 3"), base=1, actor="user:a", reason="a"),
        store.apply(POLICY, base.replace("max_heavy_per_node: 2", "max_heavy_per_node: 4"), base=1, actor="user:b", reason="b"),
        return_exceptions=True,
    )

    assert sorted(type(r).__name__ for r in results) == ["Change", "StaleBaseError"]
    assert [r.version for r in await store.history(POLICY)] == [1, 2]
    assert await store.dangling(POLICY) == []
    assert len([e for e in await outbox_events(store.pool) if e.data.name == "policy"]) == 2


async def test_rollback_writes_the_old_content_as_a_new_version_and_history_lists_all_three(store: ConfigStore) -> None:
    await seeded(store)
    await store.set(POLICY, ["headroom.default=0.3"], base=1, actor="user:bob", reason="more headroom")

    change = await store.rollback(POLICY, 1, base=2, actor=OPERATOR, reason="headroom starved standard work")

    history = await store.history(POLICY)
    assert [(r.version, r.action, r.actor) for r in history] == [
        (1, ConfigAction.SEEDED, "service:config"), (2, ConfigAction.SET, "user:bob"), (3, ConfigAction.ROLLED_BACK, OPERATOR),
    ]
    assert [r.reason for r in history][1:] == ["more headroom", "headroom starved standard work"]
    assert change.record.rolled_back_to == 1 and history[2].sha256 == history[0].sha256
    assert (await store.version(POLICY, 3)).content == (await store.version(POLICY, 1)).content
    assert "-  default: 0.3" in await store.diff(POLICY, 2, 3)
    with pytest.raises(NothingToChangeError):
        await store.rollback(POLICY, 1, base=3, actor=OPERATOR, reason="again")


async def test_a_crash_between_the_put_and_the_commit_leaves_a_harmless_visible_s3_version(store: ConfigStore) -> None:
    await seeded(store)
    head = await store.version(POLICY)
    text = (head.content or "").replace("max_heavy_per_node: 2", "max_heavy_per_node: 5")
    orphan = await store.put_object(validate_document(POLICY, text), 2, OPERATOR)  # ... and the process died here

    assert [v.version_id for v in await store.dangling(POLICY)] == [orphan.version_id]
    assert (await store.head(POLICY)).version == 1  # type: ignore[union-attr]
    record, body = await store.read_from_bucket(POLICY)  # by the row's S3 version, not the bucket's latest
    assert record.version == 1 and "max_heavy_per_node: 2" in body

    change = await store.apply(POLICY, text, base=1, actor=OPERATOR, reason="retry after the crash")
    assert change.record.version == 2 and change.record.s3_version_id != orphan.version_id
    assert [v.version_id for v in await store.dangling(POLICY)] == [orphan.version_id]


async def test_templates_are_documents_with_their_own_versions_and_event(store: ConfigStore) -> None:
    name = template_document("llm-finetune")
    text = "description: fine-tuning\ndefaults:\n  project: llm\n  gpus: 8\n  priority_class: standard\n"

    await store.apply(name, text, base=None, actor=OPERATOR, reason="first template")
    await store.set(name, ["defaults.gpus=4"], base=1, actor=OPERATOR, reason="smaller")

    listed = await store.documents()
    events = [e for e in await outbox_events(store.pool) if e.type == "template.changed"]
    assert [(r.name, r.version) for r in listed] == [("templates/llm-finetune", 2)]
    assert [(e.subject, e.data.new_version) for e in events] == [("template/llm-finetune", 1), ("template/llm-finetune", 2)]
    with pytest.raises(DocumentInvalid, match="defaults.gpus"):
        await store.set(name, ["defaults.gpus=0"], base=2, actor=OPERATOR, reason="zero")
    with pytest.raises(UnknownVersionError, match="versions are 1 to 2"):
        await store.version(name, 9)

