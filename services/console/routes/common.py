"""What the console's routers share: the pool, the reader's language, the clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import asyncpg
from fastapi import Depends, Query, Request

from services.console.labels import Language


def pool_of(request: Request) -> asyncpg.Pool:
    return request.app.state.pool


def now_utc() -> datetime:
    return datetime.now(UTC)


Pool = Annotated[asyncpg.Pool, Depends(pool_of)]
Lang = Annotated[Language, Query(description="language of the reason sentences: en or zh")]
