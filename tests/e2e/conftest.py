"""End-to-end tests: every service against the real embedded servers, simulated agents as processes.

`system` starts the whole system (`tests.helpers.system.running_system`) on a fresh database and
Redis db (`fresh_settings`); each test starts the agents it needs. Every test here is marked `e2e`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from shared.settings import Settings
from tests.helpers.system import RunningSystem, running_system
from tests.integration.conftest import fresh_settings  # noqa: F401  (the fixture, shared with integration tests)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
async def system(fresh_settings: Settings, data_dir_factory: Callable[[], Path]) -> AsyncIterator[RunningSystem]:  # noqa: F811
    async with running_system(fresh_settings, data_dir_factory()) as running:
        yield running
