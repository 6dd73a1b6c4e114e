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
