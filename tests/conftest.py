"""Shared test fixtures: real Redis, PostgreSQL and S3 for the whole session.

`backends` (session): an `Endpoints` for every backend. Backends configured in the environment
(`CARDFLOW_REDIS_URL`, `CARDFLOW_DATABASE_URL`, `CARDFLOW_S3_ENDPOINT` + keys) are used as they are;
the others are started as embedded servers under a temporary data dir, once per session, and
stopped at its end. Tests share these servers: use unique names (stream keys, schemas, buckets)
per test, e.g. with `new_event_id()` or `tmp_path.name` in them.

`backends_env` (function): the same, exported as `CARDFLOW_*` variables for code that reads
`get_settings()`; the settings cache is cleared before and after.

`data_dir_factory` (session): `make()` returns a fresh empty directory for an instance's data.
Data dirs live outside pytest's `tmp_path` on purpose: pytest resets its base directory to mode
0700 whenever any pytest session starts, which locks out PostgreSQL's unprivileged user (when the
tests run as root) in the middle of a run.

Tests that use `backends` or `backends_env` are marked `integration` automatically.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from shared.embedded import Backends, Endpoints
from shared.logging import configure_logging
from shared.settings import Settings, get_settings

# Services run in-process here: without this they log with structlog's defaults, whose rich
# tracebacks (every frame's locals) take seconds each and starve the event loop under retries.
configure_logging("INFO", json=True)

# pytest-xdist's workers (`make test` runs the suite in parallel) have COLUMNS=80 in their environment
# (seen with xdist 3.8), serial runs none. A rich Console fixes its width from COLUMNS when it is made,
# and the CLI makes its consoles at import, so in a worker every CLI test would print 80 columns although
# it asks for its own width (`CliRunner.invoke(env={"COLUMNS": ...})`, read at print time by a console
# made without it).
os.environ.pop("COLUMNS", None)

# Hypothesis fails an example that runs longer than its deadline (200 ms by default): a timed assertion, which a
# loaded machine trips (scale21 saw a quota property take 268 ms at load 8 with two suites running). Properties
# here are about decisions, never time (benchmarks measure time), so no deadline anywhere; a test's own
# `@settings(...)` still sets its examples and health checks.
hypothesis_settings.register_profile("cardflow", deadline=None)
hypothesis_settings.load_profile("cardflow")

BACKEND_FIXTURES = frozenset({"backends", "backends_env"})


@pytest.fixture(scope="session")
def data_dir_factory() -> Iterator[Callable[[], Path]]:
    root = Path(tempfile.mkdtemp(prefix="cardflow-tests-"))
    root.chmod(0o711)  # others may traverse (PostgreSQL's own user), not list
    counter = iter(range(1_000_000))

    def make() -> Path:
        path = root / f"data{next(counter)}"
        path.mkdir()
        return path

    yield make
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def backends(data_dir_factory: Callable[[], Path]) -> Iterator[Endpoints]:
    with Backends(Settings(), data_dir_factory(), durable=False) as endpoints:
        yield endpoints


@pytest.fixture
def backends_env(backends: Endpoints, monkeypatch: pytest.MonkeyPatch) -> Iterator[Endpoints]:
    for key, value in backends.as_env().items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield backends
    get_settings.cache_clear()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BACKEND_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


# A run whose tests keep hitting pytest-timeout is broken as a whole (CI once spent its 90 minutes on
# one hang after another and printed no reason): after this many timed-out tests the session stops,
# so the summary with the tracebacks is printed while there is time.
TIMEOUTS_BEFORE_STOPPING = 3
_timed_out: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and "Timeout (>" in report.longreprtext[-2000:]:
        _timed_out.append(report.nodeid)
        if len(_timed_out) >= TIMEOUTS_BEFORE_STOPPING:
            item.session.shouldstop = f"{len(_timed_out)} tests hit the per-test timeout: {', '.join(_timed_out)}"
    return report
