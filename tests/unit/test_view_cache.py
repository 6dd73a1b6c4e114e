"""The views service's cache of task views: bounded, least recently used forgotten first."""

from __future__ import annotations

from services.console.store import ViewCache
from shared.task_view import TaskView


def test_the_cache_keeps_the_latest_version_and_forgets_the_least_recently_used_beyond_its_capacity() -> None:
    cache = ViewCache(capacity=2)
    first, second, third = TaskView(id="t1"), TaskView(id="t2"), TaskView(id="t3")
    cache.put("t1", "100", first)
    cache.put("t2", "101", second)
    cache.put("t1", "102", first)  # t1 written again: now the most recently used, at its new version
    cache.put("t3", "103", third)  # over capacity: t2 goes
    assert cache.cached(["t1", "t2", "t3", "t4"]) == {"t1": ("102", first), "t3": ("103", third)}


def test_a_cache_of_no_capacity_keeps_nothing() -> None:
    cache = ViewCache(capacity=0)
    cache.put("t1", "100", TaskView(id="t1"))
    assert cache.cached(["t1"]) == {}
