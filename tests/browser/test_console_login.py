"""The sign-in link `cardflow up` prints (`/login?token=...`, like Jupyter's): it signs the browser in
and leaves no token in the address bar; an invalid token in it only shows the form."""

from __future__ import annotations

from urllib.parse import quote

from playwright.async_api import Page

from tests.helpers.console_world import ConsoleWorld


async def test_the_login_link_signs_in_and_drops_the_token_from_the_address(anonymous_page: Page, world: ConsoleWorld) -> None:
    page = anonymous_page
    await page.goto(world.base_url + "/login?token=cfk_not-valid")
    assert page.url == world.base_url + "/login?token=cfk_not-valid"  # the form, nothing kept
    assert not [c for c in await page.context.cookies() if c["name"] == "cardflow_session"]

    await page.goto(world.base_url + f"/login?token={quote(world.tokens['root'])}")
    assert page.url == world.base_url + "/board"
    [session] = [c for c in await page.context.cookies() if c["name"] == "cardflow_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"


async def test_an_invalid_session_cookie_signs_no_one_in_and_is_dropped(anonymous_page: Page, world: ConsoleWorld) -> None:
    page = anonymous_page
    host = world.base_url.split("://", 1)[1].split(":", 1)[0]
    await page.context.add_cookies([{"name": "cardflow_session", "value": "cfk_revoked-or-expired", "domain": host, "path": "/"}])

    await page.goto(world.base_url + "/login?lang=en")
    header = page.locator("header .tools")
    assert await header.get_by_role("link", name="Sign in").count() == 1
    assert await header.get_by_role("button", name="Sign out").count() == 0
    assert await header.locator(".who").count() == 0
    assert not [c for c in await page.context.cookies() if c["name"] == "cardflow_session"]  # the stale token is forgotten
