"""/docs (Swagger UI) and /redoc work without internet: every script and style they load is served
by the console itself, from the installed package."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import httpx
import pytest

from services.console.app import create_app
from shared.settings import Settings

# The doc pages need no database: the app is built but its lifespan (which connects) never runs.
SETTINGS = Settings(database_url="postgresql://unused@127.0.0.1:1/unused")  # type: ignore[arg-type]


def resources_of(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]+)['"]""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_doc_pages_load_every_resource_from_the_console(page: str) -> None:
    transport = httpx.ASGITransport(app=create_app(SETTINGS))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        response = await client.get(page)
        assert response.status_code == 200
        resources = resources_of(response.text)
        scripts = [url for url in resources if url.endswith(".js")]

        assert scripts, f"{page} loads no script"
        assert [url for url in resources if urlsplit(url).netloc] == [], "a resource from another host (a CDN)"
        for url in resources:
            served = await client.get(url)
            assert served.status_code == 200, url
            assert len(served.content) > 1000, url  # the real asset, not an empty placeholder
        assert "/openapi.json" in response.text
