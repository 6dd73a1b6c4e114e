"""The reliability suite: hostile input, forged messages, outages and least privilege.

Each test here reproduces one observation of issue 15 against real servers (the session's
embedded Redis, PostgreSQL and S3) and checks the behaviour that replaced it. They run in
`make test`; the longer chaos runs live in `bench/chaos.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared.embedded import Backends
from shared.settings import Settings
from tests.integration.conftest import fresh_settings, redis  # noqa: F401  (fixtures shared with integration tests)


@pytest.fixture(scope="module")
def own_backends(data_dir_factory: Callable[[], Path]) -> Iterator[Backends]:
    """Embedded servers of the module's own, for tests that kill or freeze one: the session's servers
    are shared by every test of the worker (never kill or stop those)."""
    backends = Backends(Settings(), data_dir_factory(), durable=False)
    backends.start()
    yield backends
    backends.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/reliability/" in str(item.fspath):
            item.add_marker(pytest.mark.reliability)
