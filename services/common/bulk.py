"""Batch writes with one statement per table: each column of the rows goes in as one array
parameter (`$n::type[]`), which the SQL spreads back into rows with `unnest`.

    await execute_bulk(conn, "INSERT ... SELECT * FROM unnest($1::text[], $2::int[])", nodes, ("node_id", "gpus"))

A column is an attribute name (dotted paths allowed: `"data.lease_id"`) or a function of the row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import asyncpg

Column = str | Callable[[Any], Any]


def column_arrays(rows: Sequence[Any], columns: Sequence[Column]) -> list[list[Any]]:
    """One list per column, in order, with the value of every row."""
    getters = [attrgetter(column) if isinstance(column, str) else column for column in columns]
    return [[get(row) for row in rows] for get in getters]


async def execute_bulk(conn: asyncpg.Connection, sql: str, rows: Sequence[Any], columns: Sequence[Column]) -> bool:
    """Run `sql` with the `columns` of `rows` as $1..$n; nothing (False) when there are no rows."""
    if not rows:
        return False
    await conn.execute(sql, *column_arrays(rows, columns))
    return True
