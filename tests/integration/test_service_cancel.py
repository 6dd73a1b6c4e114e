"""A service task cancelled anywhere (a killed in-process service, a test's teardown) leaves none of
its own tasks running: CI once saw an outbox relay outlive its service on a closed pool and retry
forever, starving every later test of the session."""

from __future__ import annotations

import asyncio

from services.common.runtime import run_service
from services.common.task_ending import where_it_waits
from services.matcher.service import SPEC as MATCHER
from shared.settings import Settings
from tests.helpers.redis_users import service_settings
from tests.helpers.running_services import poll_until


def tasks_of(service: str) -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task.get_name().startswith(f"{service}:") and not task.done()]


async def cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel and wait for the end; a leaked task holding a pool connection makes `pool.close()` wait forever."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=120)
    if not done:
        stacks = stacks_of_unfinished_tasks()
        task.cancel()
        raise AssertionError(
            f"the service did not end within 120 s of its cancel; still running: {tasks_of(MATCHER.name)}\n"
            f"where each unfinished task waits:\n{stacks}"
        )


def stacks_of_unfinished_tasks() -> str:
    """Where every unfinished task but the test's own waits: where a service that does not stop is stuck."""
    current = asyncio.current_task()
    return "\n".join(f"{task.get_name()}: {where_it_waits(task)}" for task in asyncio.all_tasks() if task is not current and not task.done())


async def test_a_service_cancelled_while_its_broker_starts_leaves_no_relay_behind(fresh_settings: Settings) -> None:
    settings = service_settings(fresh_settings, MATCHER.name)
    service = asyncio.create_task(run_service(MATCHER, settings, asyncio.Event()))
    # the relay is the first task a service starts; the broker's start (network I/O) follows it
    while not tasks_of(MATCHER.name) and not service.done():
        await asyncio.sleep(0)
    await cancel_and_wait(service)
    assert tasks_of(MATCHER.name) == []


async def test_a_running_service_cancelled_leaves_no_task_behind(fresh_settings: Settings) -> None:
    settings = service_settings(fresh_settings, MATCHER.name)
    service = asyncio.create_task(run_service(MATCHER, settings, asyncio.Event()))
    assert await poll_until(lambda: _async(len(tasks_of(MATCHER.name)) >= 2), timeout=30), "the loops never started"
    await cancel_and_wait(service)
    assert tasks_of(MATCHER.name) == []


async def _async(value: object) -> object:
    return value
