"""Browser tests: Playwright drives Debian's Chromium against a running system with real data.

`world` (module): the whole system with `tests.helpers.console_world`'s workload and the console
served on a free port. `page` (function): a fresh 1280 x 900 browser page (English unless the
test switches), signed in as `planner` (operator) through the login form; `anonymous_page` is
one that is not signed in. Chromium is the system binary (`CARDFLOW_CHROMIUM`, else `chromium` on PATH;
`make test` installs it with `make browser`); Playwright never downloads a browser.
Every test here is marked `browser`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from shared.embedded import Endpoints
from tests.helpers.console_world import ConsoleWorld, console_world
from tests.integration.conftest import fresh_database_settings

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
VIEWPORT = {"width": 1280, "height": 900}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


def chromium_path() -> str:
    path = os.environ.get("CARDFLOW_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no Chromium: `make browser` installs Debian's chromium and fonts-noto-cjk (or set CARDFLOW_CHROMIUM)")
    return path


@pytest.fixture(scope="module")
async def world(backends: Endpoints, data_dir_factory: Callable[[], Path]) -> AsyncIterator[ConsoleWorld]:
    async with fresh_database_settings(backends) as settings, console_world(settings, data_dir_factory()) as running:
        yield running


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@pytest.fixture
async def anonymous_page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport=VIEWPORT, locale="en-US")
    opened = await context.new_page()
    yield opened
    await context.close()


async def sign_in(page: Page, world: ConsoleWorld, name: str) -> None:
    """Through the login form, like a person: paste the token, press Enter."""
    await page.goto(world.base_url + "/login?lang=en")
    await page.get_by_label("API token").fill(world.tokens[name])
    await page.get_by_label("API token").press("Enter")
    await page.wait_for_url(f"{world.base_url}/board")


@pytest.fixture
async def page(anonymous_page: Page, world: ConsoleWorld) -> Page:
    await sign_in(anonymous_page, world, "planner")
    return anonymous_page
