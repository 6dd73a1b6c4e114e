"""A pool on a fresh database with readiness's schema in place, for tests that call its code directly."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.common.runtime import prepare_schema
from services.readiness.service import SPEC as READINESS
from shared.delivery import create_pool
from shared.settings import Settings


@pytest.fixture
async def readiness_pool(fresh_settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    created = await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=3)
    await prepare_schema(created, READINESS)
    yield created
    await created.close()
