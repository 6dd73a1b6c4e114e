"""Write steps overlapped (`context` module docstring): the next step decides while the previous one writes and
commits; commits keep the order the steps decided in; a step that does not commit aborts the ones decided on
top of it, whose effects never become visible, and the working set is reloaded from the tables.

Commits are held and made to fail by real PostgreSQL: a rival transaction holds `dispatcher.tasks` in SHARE
mode (a step's save waits for it), and a trigger refuses any task whose id starts with FAIL (the save fails).
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.runtime import prepare_schema
from services.dispatcher.commit_order import StepAborted
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.context import Dispatcher
from services.dispatcher.dispatch_loop import run_cycle
from services.dispatcher.event_handler import events_step, handle_events
from services.dispatcher.service import SPEC
from services.dispatcher.store import load_everything, save_changes
from shared.delivery.db import create_pool
from shared.events import utcnow
from shared.events.states import TaskState
from shared.leasing.work import BookChanges
from shared.settings import Settings
from tests.unit.dispatcher.builders import a_node_record, a_ready_task

pytestmark = pytest.mark.integration

REFUSE_FAIL_TASKS = """
CREATE FUNCTION dispatcher.refuse_fail_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.task_id LIKE 'FAIL%' THEN RAISE EXCEPTION 'refused %', NEW.task_id; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_fail_tasks BEFORE INSERT OR UPDATE ON dispatcher.tasks
    FOR EACH ROW EXECUTE FUNCTION dispatcher.refuse_fail_tasks();
"""


@pytest.fixture
async def dsn(fresh_settings: Settings) -> AsyncIterator[str]:
    yield fresh_settings.database_dsn or ""


async def a_leader_with_a_fleet(pool: asyncpg.Pool, nodes: int = 2, gpus: int = 2, in_flight: int = 2) -> Dispatcher:
    """A fresh `dispatcher` schema (with the FAIL trigger) and a leader over `nodes` alive nodes, overlapping
    up to `in_flight` steps."""
    await pool.execute("DROP SCHEMA IF EXISTS dispatcher CASCADE")
    await prepare_schema(pool, SPEC)
    await pool.execute(REFUSE_FAIL_TASKS)
    dc = Dispatcher(pool, "dispatcher", "dispatcher/test", "service:dispatcher",
                    DispatcherConfig(steps_in_flight=in_flight), epoch=0)
    now = utcnow()
    records = {f"n{i}": a_node_record(f"n{i}", f"a{i}", gpus=gpus, registered_at=now, last_seen=now)
               for i in range(nodes)}
    async with dc.write_step() as step:
        changes = BookChanges(nodes=records)
        step.write(changes, lambda conn, stored: save_changes(conn, dc.schema, dc.emitter, changes, stored))
    return dc


@asynccontextmanager
async def writes_to_tasks_held(pool: asyncpg.Pool) -> AsyncIterator[None]:
    """A rival transaction holds `dispatcher.tasks` in SHARE mode: reads go on, every write waits until the exit."""
    async with pool.acquire() as rival, rival.transaction():
        await rival.execute("LOCK TABLE dispatcher.tasks IN SHARE MODE")
        yield


async def until_a_write_waits(pool: asyncpg.Pool, steps: list[asyncio.Future[object]] | None = None) -> None:
    """Poll until some backend waits for a lock on `dispatcher.tasks` (a step's save, held), or `steps` are done."""
    while not await pool.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'dispatcher.tasks'::regclass"):
        if steps is not None and all(step.done() for step in steps):
            return
        await asyncio.sleep(0.01)


async def until_decided(dc: Dispatcher, pending: int) -> None:
    """Poll until `pending` steps have decided and not yet committed (a liveness guard, not a timing claim:
    with steps serialised through their commit this never happens)."""
    async with asyncio.timeout(60):
        while len(dc.commits) < pending:
            await asyncio.sleep(0.01)


async def task_ids(pool: asyncpg.Pool) -> set[str]:
    return {r["task_id"] for r in await pool.fetch("SELECT task_id FROM dispatcher.tasks")}


async def test_with_one_step_in_flight_a_step_commits_before_the_next_decides(dsn: str) -> None:
    async with await create_pool(dsn, min_size=1, max_size=5) as pool:
        dc = await a_leader_with_a_fleet(pool, in_flight=1)
        async with writes_to_tasks_held(pool):
            first = asyncio.ensure_future(handle_events(dc, a_ready_task("T1")))
            await until_a_write_waits(pool)
            second = asyncio.ensure_future(handle_events(dc, a_ready_task("T2")))
            await asyncio.sleep(0.2)  # room to go wrong, not a timing claim: it must not decide meanwhile
            assert dc.write_lock.locked() and len(dc.commits) == 1 and dc.state is not None
            assert "T2" not in dc.state.tasks
        await asyncio.gather(first, second)
        assert await task_ids(pool) == {"T1", "T2"}


async def test_the_next_step_decides_while_the_previous_commit_is_held(dsn: str) -> None:
    async with await create_pool(dsn, min_size=1, max_size=5) as pool:
        dc = await a_leader_with_a_fleet(pool)
        await handle_events(dc, a_ready_task("T1"))
        async with writes_to_tasks_held(pool):
            cycle = asyncio.ensure_future(run_cycle(dc))
            await until_a_write_waits(pool)  # the cycle decided (T1 granted in memory); its save waits
            arrival = asyncio.ensure_future(handle_events(dc, a_ready_task("T2")))
            await until_decided(dc, 2)  # the next step decided on top of the held one
            assert not cycle.done() and not arrival.done()
            assert dc.state is not None and dc.state.tasks["T1"].state == TaskState.LEASED
            assert "T2" in dc.state.queue
            assert await pool.fetchval("SELECT count(*) FROM dispatcher.leases") == 0  # nothing committed yet
        report, _ = await asyncio.gather(cycle, arrival)
        assert report.effects is not None and report.effects.leases == 1
        assert await task_ids(pool) == {"T1", "T2"}
        assert await pool.fetchval("SELECT state FROM dispatcher.tasks WHERE task_id = 'T1'") == "leased"
        assert dc.reloads == 1  # nothing failed: never reloaded


async def a_failing_step_and_one_on_top(pool: asyncpg.Pool, dc: Dispatcher,
                                        on_top: Callable[[], Awaitable[object]]) -> list[object]:
    """FAIL1's batch decides and its save waits; `on_top` decides over it; then FAIL1's save fails. Both outcomes."""
    async with writes_to_tasks_held(pool):
        failing = asyncio.ensure_future(handle_events(dc, a_ready_task("FAIL1")))
        await until_a_write_waits(pool)
        second = asyncio.ensure_future(on_top())
        await until_decided(dc, 2)
        assert dc.state is not None and {"FAIL1", "T2"} <= dc.state.tasks.keys()
    return await asyncio.gather(failing, second, return_exceptions=True)


async def test_a_step_that_fails_aborts_the_step_decided_on_top_of_it_and_memory_is_reloaded(dsn: str) -> None:
    async with await create_pool(dsn, min_size=1, max_size=5) as pool:
        dc = await a_leader_with_a_fleet(pool)
        outcomes = await a_failing_step_and_one_on_top(pool, dc, lambda: events_step(dc, a_ready_task("T2")))  # once
        assert isinstance(outcomes[0], asyncpg.RaiseError) and isinstance(outcomes[1], StepAborted)
        assert dc.state is None and len(dc.commits) == 0
        assert await task_ids(pool) == set()
        assert await pool.fetchval("SELECT count(*) FROM dispatcher.inbox") == 0
        assert await pool.fetchval("SELECT count(*) FROM dispatcher.outbox") == 0

        await handle_events(dc, a_ready_task("T2"))  # the aborted batch, redelivered
        assert dc.reloads == 2 and dc.state is not None
        assert await task_ids(pool) == {"T2"} and set(dc.state.tasks) == {"T2"}


async def test_a_batch_whose_step_was_aborted_is_decided_again_at_once_over_reloaded_memory(dsn: str) -> None:
    # Not left pending for the claimer (`min_idle_ms`, 30 s): handle_events decides the batch again.
    async with await create_pool(dsn, min_size=1, max_size=5) as pool:
        dc = await a_leader_with_a_fleet(pool)
        outcomes = await a_failing_step_and_one_on_top(pool, dc, lambda: handle_events(dc, a_ready_task("T2")))
        assert isinstance(outcomes[0], asyncpg.RaiseError) and outcomes[1] is None
        assert dc.reloads == 2 and dc.state is not None and set(dc.state.tasks) == {"T2"}
        assert await task_ids(pool) == {"T2"}  # committed by the second decision, not by the aborted one


# -- the property: random steps, random failures ---------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    task_id: str

    def run(self, dc: Dispatcher) -> Awaitable[object]:
        return handle_events(dc, a_ready_task(self.task_id))


@dataclass(frozen=True)
class Cycle:
    def run(self, dc: Dispatcher) -> Awaitable[object]:
        return run_cycle(dc)


def step_lists() -> st.SearchStrategy[list[Arrival | Cycle]]:
    kinds = st.lists(st.sampled_from(["ok", "fail", "cycle"]), min_size=2, max_size=12)
    return kinds.map(lambda ks: [Cycle() if k == "cycle" else Arrival(f"{'FAIL' if k == 'fail' else 'T'}{i}")
                                 for i, k in enumerate(ks)])


async def run_steps(dsn: str, steps: list[Arrival | Cycle], held: bool, in_flight: int) -> None:
    async with await create_pool(dsn, min_size=1, max_size=6) as pool:
        dc = await a_leader_with_a_fleet(pool, nodes=2, gpus=2, in_flight=in_flight)
        if held:  # the first step's save waits, the others pile up behind it
            async with writes_to_tasks_held(pool):
                running = [asyncio.ensure_future(step.run(dc)) for step in steps]
                await until_a_write_waits(pool, running)
        else:
            running = [asyncio.ensure_future(step.run(dc)) for step in steps]
        outcomes = await asyncio.gather(*running, return_exceptions=True)
        await check(pool, dc, steps, outcomes)


async def check(pool: asyncpg.Pool, dc: Dispatcher, steps: list[Arrival | Cycle], outcomes: list[object]) -> None:
    failed = [not (o is None or hasattr(o, "queued")) for o in outcomes]  # handle_events: None; run_cycle: a report
    for index, outcome in enumerate(outcomes):
        # only the failures PostgreSQL was told to make, and aborts after one of them: no double booking
        assert outcome is None or hasattr(outcome, "queued") or isinstance(outcome, asyncpg.RaiseError | StepAborted), outcome
        if isinstance(outcome, StepAborted):
            assert any(failed[:index]), "aborted without an earlier step failing"
        if isinstance(outcome, asyncpg.RaiseError):
            assert isinstance(steps[index], Arrival) or any(failed[:index])  # a cycle granting a FAIL task decided on top
    stored = await task_ids(pool)
    for step, bad in zip(steps, failed, strict=True):
        if isinstance(step, Arrival):
            assert (step.task_id in stored) == (not bad), step  # effects visible exactly when it committed
    # no GPU in two active leases, and every active lease's task is leased
    gpus = await pool.fetch("SELECT node_id, gpu_index FROM dispatcher.lease_gpus WHERE active")
    assert len(gpus) == len({(g["node_id"], g["gpu_index"]) for g in gpus})
    assert not await pool.fetchval("SELECT count(*) FROM dispatcher.leases l JOIN dispatcher.tasks t USING (task_id)"
                                   " WHERE l.state = 'active' AND t.state <> 'leased'")
    # the outbox in commit order: per subject, numbers 1, 2, 3 ... in publication order
    numbers: dict[str, list[int]] = defaultdict(list)
    for row in await pool.fetch("SELECT subject, body FROM dispatcher.outbox ORDER BY position"):
        numbers[row["subject"]].append(json.loads(row["body"])["subject_seq"])
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in numbers.values()), dict(numbers)
    # memory is the tables (after a reload if the last step failed)
    async with dc.write_step() as step:
        in_memory = dict(step.state.tasks), set(step.state.leases)
        reloaded = await load_everything(step.conn, dc.schema, dc.config.renewal_event_every_s)
    assert in_memory == (dict(reloaded.tasks), set(reloaded.leases))
    assert len(dc.commits) == 0


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(steps=step_lists(), held=st.booleans(), in_flight=st.sampled_from([1, 2, 3]))
def test_random_steps_and_failures_commit_in_order_and_never_show_an_aborted_step(
        dsn: str, steps: list[Arrival | Cycle], held: bool, in_flight: int) -> None:
    asyncio.run(run_steps(dsn, steps, held, in_flight))
