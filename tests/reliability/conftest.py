"""The reliability suite: hostile input, forged messages, outages and least privilege.

Each test here reproduces one observation of issue 15 against real servers (the session's
embedded Redis, PostgreSQL and S3) and checks the behaviour that replaced it. They run in
`make test`; the longer chaos runs live in `bench/chaos.py`.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import fresh_settings, redis  # noqa: F401  (fixtures shared with integration tests)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/reliability/" in str(item.fspath):
            item.add_marker(pytest.mark.reliability)
