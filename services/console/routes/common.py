"""What the console's routers share: the pool, the reader's language, the clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Query

from services.console.api import Pool
from services.console.labels import Language

__all__ = ["Lang", "Pool", "now_utc"]


def now_utc() -> datetime:
    return datetime.now(UTC)


Lang = Annotated[Language, Query(description="language of the reason sentences: en or zh")]
