"""The views service against real Redis and PostgreSQL: cf:events in, views.* rows out."""

from __future__ import annotations

from datetime import timedelta

from services.console.projector import SPEC as VIEWS
from services.console.views import find_task_by_idempotency_key, list_tasks, load_fleet, load_task, task_history
from shared.events import make_event, new_event_id
from shared.events.states import TaskState
from shared.events.subjects import lease_subject, node_subject
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import TaskStory



def node_registered(story: TaskStory, node: str, card: str = "A100", gpus: int = 8):
    data = {"node_id": node, "agent_id": f"agent-{node}", "card_type": card, "gpus": gpus, "mode": "sim"}
    return story.emit("dispatcher", "node.registered", data, subject=node_subject(node))


def lease_released(story: TaskStory, node: str = "n1", reason: str = "succeeded"):
    data = {"lease_id": story.lease_id, "task_id": story.task_id, "node_id": node, "card_type": "A100", "gpus": 2,
            "granted_at": story.clock - timedelta(seconds=5), "ended_at": story.clock, "reason": reason}
    return story.emit("dispatcher", "lease.released", data, subject=lease_subject(story.lease_id))


async def test_views_service_projects_tasks_history_and_fleet(fresh_settings: Settings) -> None:
    done, waiting, running = TaskStory(new_event_id()), TaskStory(new_event_id()), TaskStory(new_event_id())
    events = [
        node_registered(done, "n1"),
        done.submitted(idempotency_key="nightly-eval"), waiting.submitted(), running.submitted(),
        done.readiness(True), waiting.readiness(False), running.readiness(True),
        done.matched(), running.matched(), done.queued(), running.queued(),
        done.granted(), running.granted(gpus=(2, 3)), done.started(), running.started(),
        done.succeeded(), lease_released(done),
    ]
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.publish(*events)
        pool = services.pool

        async def all_projected() -> bool:
            return len(await list_tasks(pool)) == 3 and (await load_task(pool, done.task_id)).is_terminal

        assert await services.wait_until(all_projected)
        finished = await load_task(pool, done.task_id)
        assert (finished.state, finished.attempts, finished.card_type) == (TaskState.SUCCEEDED, 1, "A100")
        assert (await load_task(pool, waiting.task_id)).state is TaskState.WAITING_DATA
        assert [v.id for v in await list_tasks(pool, state="running")] == [running.task_id]
        assert (await find_task_by_idempotency_key(pool, "nightly-eval")).id == done.task_id

        history = await task_history(pool, done.task_id)
        assert [h.type for h in history] == [e.type for e in done.by_owner["intake"] + done.by_owner["readiness"]
                                             + done.by_owner["matcher"]] + [
            "task.queued", "lease.granted", "task.started", "task.succeeded"]
        assert history[-1].state is TaskState.SUCCEEDED

        fleet = await load_fleet(pool)
        [node] = fleet.nodes
        assert (node.node_id, node.alive, node.gpus, node.gpus_leased) == ("n1", True, 8, 2)
        assert [lease.task_id for lease in node.leases] == [running.task_id]
        assert [(c.card_type, c.gpus, c.gpus_leased) for c in fleet.card_types] == [("A100", 8, 2)]


async def test_facets_arriving_before_the_submission_and_redeliveries(fresh_settings: Settings) -> None:
    story = TaskStory(new_event_id())
    early = [story.readiness(False, fraction=0.25)]
    submitted = story.submitted()
    async with RunningServices(fresh_settings, VIEWS) as services:
        pool = services.pool
        await services.publish(*early)

        async def partial() -> bool:
            view = await load_task(pool, story.task_id)
            return view is not None and view.state is TaskState.WAITING_DATA

        assert await services.wait_until(partial)
        assert (await load_task(pool, story.task_id)).name is None
        await services.publish(submitted, submitted, early[0])  # the submission, then two redeliveries

        async def named() -> bool:
            view = await load_task(pool, story.task_id)
            return view.name is not None

        assert await services.wait_until(named)
        marker = story.readiness(True)
        await services.publish(marker)

        async def ready() -> bool:
            return (await load_task(pool, story.task_id)).ready is True

        assert await services.wait_until(ready)
        view = await load_task(pool, story.task_id)
        assert (view.events, view.state) == (3, TaskState.SUBMITTED)
        assert len(await task_history(pool, story.task_id)) == 3


async def test_node_lost_and_expired_lease_free_the_gpus(fresh_settings: Settings) -> None:
    story = TaskStory(new_event_id())
    lost = make_event(
        "node.lost", subject=node_subject("n7"), subject_seq=2, producer="dispatcher/test", actor="service:dispatcher",
        data={"node_id": "n7", "agent_id": "agent-n7", "detail": "no heartbeat for 30 s", "lease_ids": []},
    )
    async with RunningServices(fresh_settings, VIEWS) as services:
        pool = services.pool
        granted = story.granted(node="n7")
        expired = story.emit("dispatcher", "lease.expired", {"lease_id": story.lease_id, "task_id": story.task_id},
                             subject=lease_subject(story.lease_id))
        await services.publish(node_registered(story, "n7", card="T4", gpus=4), granted)

        async def leased() -> bool:
            fleet = await load_fleet(pool)
            return bool(fleet.nodes) and fleet.nodes[0].gpus_leased == 2

        assert await services.wait_until(leased)
        await services.publish(expired, lost)

        async def freed() -> bool:
            node = (await load_fleet(pool)).nodes[0]
            return not node.alive and node.gpus_leased == 0

        assert await services.wait_until(freed)
        fleet = await load_fleet(pool)
        assert fleet.nodes[0].detail == "no heartbeat for 30 s" and fleet.card_types == ()


async def test_idempotency_key_finds_the_accepted_task_over_rejected_attempts(fresh_settings: Settings) -> None:
    rejected, accepted = TaskStory(new_event_id()), TaskStory(new_event_id())
    attempt = rejected.emit("intake", "task.rejected", {
        "task_id": rejected.task_id, "idempotency_key": "fix-me", "reasons": [{"field": "gpus", "value": 0, "problem": "expected >= 1"}],
    })
    async with RunningServices(fresh_settings, VIEWS) as services:
        pool = services.pool
        assert await load_task(pool, rejected.task_id) is None  # even before the views tables exist: None, no error
        await services.publish(attempt)

        async def seen(key_owner: TaskStory) -> bool:
            view = await find_task_by_idempotency_key(pool, "fix-me")
            return view is not None and view.id == key_owner.task_id

        assert await services.wait_until(lambda: seen(rejected))
        await services.publish(accepted.submitted(idempotency_key="fix-me"))
        assert await services.wait_until(lambda: seen(accepted))


async def test_types_the_views_do_not_project_are_skipped_unparsed(fresh_settings: Settings) -> None:
    story = TaskStory(new_event_id())
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.redis.xadd("cf:events", {"event_id": new_event_id(), "type": "quota.granted", "subject": "quota/q",
                                                "event": "{not even json"})
        renewed = story.emit("dispatcher", "lease.renewed", {
            "lease_id": "L1", "task_id": story.task_id, "until": story.clock + timedelta(seconds=30)},
            subject=lease_subject("L1"))
        await services.publish(renewed, story.submitted())

        async def projected() -> bool:
            return await load_task(services.pool, story.task_id) is not None

        assert await services.wait_until(projected)
        assert (await load_task(services.pool, story.task_id)).events == 1

        async def all_acked() -> bool:
            return (await services.redis.xpending("cf:events", "console"))["pending"] == 0

        assert await services.wait_until(all_acked)
        assert await services.redis.xlen("cf:deadletter") == 0


async def test_only_node_events_take_inbox_rows_and_a_redelivered_registration_does_not_revive_a_lost_node(
    fresh_settings: Settings,
) -> None:
    story = TaskStory(new_event_id())
    registered = node_registered(story, "n9", card="T4", gpus=4)
    lost = make_event(
        "node.lost", subject=node_subject("n9"), subject_seq=2, producer="dispatcher/test", actor="service:dispatcher",
        data={"node_id": "n9", "agent_id": "agent-n9", "detail": "no heartbeat for 30 s", "lease_ids": []},
    )
    task_events = [story.submitted(), story.readiness(True), story.matched(), story.queued(), story.granted(node="n9")]
    async with RunningServices(fresh_settings, VIEWS) as services:
        pool = services.pool
        await services.publish(registered, *task_events, lost)

        async def projected() -> bool:
            view = await load_task(pool, story.task_id)
            fleet = await load_fleet(pool)
            return view is not None and view.lease_id is not None and bool(fleet.nodes) and not fleet.nodes[0].alive

        assert await services.wait_until(projected)
        inbox = {row["event_id"] for row in await pool.fetch("SELECT event_id FROM views.inbox")}
        assert inbox == {registered.event_id, lost.event_id}
        await services.publish(registered, *task_events)  # redeliveries
        marker = story.started(node="n9")
        await services.publish(marker)

        async def started() -> bool:
            return (await load_task(pool, story.task_id)).state is TaskState.RUNNING

        assert await services.wait_until(started)
        assert not (await load_fleet(pool)).nodes[0].alive
        view = await load_task(pool, story.task_id)
        assert view.events == len(task_events) + 1
        assert len(await task_history(pool, story.task_id)) == len(task_events) + 1


async def test_a_lease_end_takes_no_inbox_row_and_its_redelivery_keeps_the_first_end(fresh_settings: Settings) -> None:
    story = TaskStory(new_event_id())
    registered = node_registered(story, "n7")
    granted = story.granted(node="n7")
    released = lease_released(story, node="n7", reason="succeeded")
    async with RunningServices(fresh_settings, VIEWS) as services:
        pool = services.pool
        await services.publish(registered, granted, released)
        query = "SELECT ended_at, end_reason FROM views.leases WHERE lease_id = $1"

        async def ended() -> bool:
            row = await pool.fetchrow(query, story.lease_id)
            return row is not None and row["ended_at"] is not None

        assert await services.wait_until(ended)
        first = dict(await pool.fetchrow(query, story.lease_id))
        inbox = {row["event_id"] for row in await pool.fetch("SELECT event_id FROM views.inbox")}
        assert inbox == {registered.event_id}  # the node's registration only: the lease's rows are upserts
        expired = make_event(
            "lease.expired", subject=lease_subject(story.lease_id), subject_seq=3, producer="dispatcher/test",
            actor="service:dispatcher", data={"lease_id": story.lease_id, "task_id": story.task_id},
        )
        await services.publish(released, expired, registered)  # a redelivery, and a later end of the same lease
        marker = node_registered(TaskStory(new_event_id()), "n8")
        await services.publish(marker)

        async def marker_seen() -> bool:
            return any(node.node_id == "n8" for node in (await load_fleet(pool)).nodes)

        assert await services.wait_until(marker_seen)
        assert dict(await pool.fetchrow(query, story.lease_id)) == first  # the first end recorded stays
        assert len(await pool.fetch("SELECT event_id FROM views.inbox")) == 2  # n7's and n8's registrations


async def test_a_view_written_by_another_process_is_read_again_not_taken_from_the_cache(
    fresh_settings: Settings,
) -> None:
    story = TaskStory(new_event_id())
    async with RunningServices(fresh_settings, VIEWS) as services:
        pool = services.pool
        await services.publish(story.submitted(), story.readiness(False))

        async def waiting() -> bool:
            view = await load_task(pool, story.task_id)
            return view is not None and view.events == 2

        assert await services.wait_until(waiting)  # the service now holds this view in its cache
        await pool.execute(  # another writer (a second views instance, a repair) changes the stored view
            "UPDATE views.tasks SET view = jsonb_set(view::jsonb, '{name}', '\"renamed-elsewhere\"')::json WHERE id = $1",
            story.task_id,
        )
        await services.publish(story.matched())

        async def matched() -> bool:
            return (await load_task(pool, story.task_id)).events == 3

        assert await services.wait_until(matched)
        view = await load_task(pool, story.task_id)
        assert (view.name, view.card_type) == ("renamed-elsewhere", "A100")


async def test_a_stored_view_is_plain_json_text_kept_uncompressed(fresh_settings: Settings) -> None:
    """A view over PostgreSQL's ~2 KB compression threshold is stored as written: json (no jsonb
    conversion) and uncompressed, the cheaper write for a row rewritten about five times per task
    (migration 004); reads, `->>` included, see the same view."""
    story = TaskStory(new_event_id())
    labels = {f"label-{n:02d}": "x" * 60 for n in range(40)}  # a view of ~4 KB, far over the threshold
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.publish(story.submitted(labels=labels), story.readiness(True))

        async def projected() -> bool:
            view = await load_task(services.pool, story.task_id)
            return view is not None and view.events == 2

        assert await services.wait_until(projected)
        [row] = await services.fetch(
            "SELECT pg_typeof(view)::text AS type, pg_column_compression(view) AS compression,"
            " octet_length(view::text) AS length, view->>'id' AS id FROM views.tasks WHERE id = $1",
            story.task_id,
        )
        assert (row["type"], row["compression"], row["id"]) == ("json", None, story.task_id) and row["length"] > 3000
        assert (await load_task(services.pool, story.task_id)).submission["labels"] == labels


async def test_history_rows_store_their_facts_as_json_text_and_have_no_index_beside_the_key(
    fresh_settings: Settings,
) -> None:
    """views.events, about eight rows per task: `facts` as written (json, no jsonb conversion) and only
    the primary key to keep up per row (migration 005); a task's history still reads in event order."""
    story = TaskStory(new_event_id())
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.publish(story.submitted(), story.readiness(True), story.matched())

        async def projected() -> bool:
            return len(await task_history(services.pool, story.task_id)) == 3

        assert await services.wait_until(projected)
        types = await services.fetch("SELECT DISTINCT pg_typeof(facts)::text AS type FROM views.events WHERE task_id = $1",
                                     story.task_id)  # fmt: skip
        indexes = await services.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'views' AND tablename = 'events' ORDER BY 1"
        )
        history = await task_history(services.pool, story.task_id)
        assert [row["type"] for row in types] == ["json"]
        assert [row["indexname"] for row in indexes] == ["events_pkey"]
        assert [h.type for h in history] == ["task.submitted", "task.readiness_changed", "task.matched"]
        assert [h.facts for h in history] == [{}, {}, {}]  # stored, each its reason's template's fields: none here


async def test_a_lease_end_carried_by_the_run_end_ends_the_lease_row(fresh_settings: Settings) -> None:
    story = TaskStory(new_event_id())
    events = [node_registered(story, "n1"), story.submitted(), story.granted(node="n1"),
              story.succeeded(started_on="n1", releasing=True)]  # fmt: skip
    async with RunningServices(fresh_settings, VIEWS) as services:
        pool = services.pool
        await services.publish(*events)
        query = "SELECT ended_at, end_reason FROM views.leases WHERE lease_id = $1"

        async def ended() -> bool:
            row = await pool.fetchrow(query, story.lease_id)
            return row is not None and row["ended_at"] is not None

        assert await services.wait_until(ended)
        facts = story.release_facts("succeeded")
        assert dict(await pool.fetchrow(query, story.lease_id)) == {"ended_at": facts["ended_at"], "end_reason": "succeeded"}
        assert (await load_task(pool, story.task_id)).state is TaskState.SUCCEEDED
        history = [entry.type for entry in await task_history(pool, story.task_id)]
        assert history[-1] == "task.succeeded" and "lease.released" not in history
