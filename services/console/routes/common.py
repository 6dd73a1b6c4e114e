"""What the console's routers share: the pool, the reader's language, the clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import HTTPException, Query

from services.console.api import Pool
from services.console.labels import Language

__all__ = ["NOT_FOUND", "Lang", "Pool", "now_utc", "unprocessable"]


NOT_FOUND = {404: {"description": "no such item (a name or id in the request is unknown)"}}
"""`responses=` of a route that answers 404 for an unknown name given in its query or body."""


def now_utc() -> datetime:
    return datetime.now(UTC)


def unprocessable(loc: tuple[str, ...], message: str) -> HTTPException:
    """A 422 in FastAPI's validation shape (`detail: [{loc, msg, type}]`), as the OpenAPI documents every 422."""
    return HTTPException(422, [{"loc": list(loc), "msg": message, "type": "value_error"}])


Lang = Annotated[Language, Query(description="language of the reason sentences: en or zh")]
