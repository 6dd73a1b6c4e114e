"""How the dispatcher's changed records become SQL: only what changed is sent.

A record the table does not hold yet is upserted whole (`upsert`: one `INSERT .. SELECT FROM unnest(..)
ON CONFLICT DO UPDATE` per table). The records the table holds — their stored versions are known —
are updated in ONE `UPDATE .. FROM unnest(..)` of the columns that differ from the stored version in
at least one of them, plus the table's `always` columns (`columns_to_update`): a cycle's grants, which
all change the same few of a task's 31 columns, send those few, not the four `jsonb` and everything
else again. One statement per table whatever the mix (a column some records did not change gets their
stored value back), so a step makes no more round trips than when it wrote whole rows.

The leader is the only writer of these tables and its working set holds what it wrote, so the
working set's version of a record is the stored one — except the columns a fold changes in memory
only (a quiet renewal, `BookChanges.quiet_leases`; the slack a new leader gives every lease's TTL):
those are a table's `always` columns, written with every update of a row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Any

import asyncpg

Column = tuple[str, str, Callable[[Any], Any]]  # name (= the record's attribute), SQL type, value of a record

_WIRE = {"jsonb": "text", "int[]": "text", "text[]": "text"}  # arrays of these travel as text, cast back in SQL


@dataclass(frozen=True)
class Table:
    """A table of records: its schema-qualified name, key, columns and how its rows may change."""

    name: str
    key: str
    columns: tuple[Column, ...]
    fixed: frozenset[str] = frozenset()  # never change once inserted (an upsert leaves them as stored)
    always: frozenset[str] = frozenset()  # written with every update: memory may hold them unsaved

    @cached_property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.columns)

    @cached_property
    def values_of(self) -> Callable[[Any], tuple[Any, ...]]:
        """A record's value of every column, in order, by one C call (`attrgetter`), not a `getattr` each."""
        get = attrgetter(*self.column_names)
        return get if len(self.column_names) > 1 else lambda record: (get(record),)


class StoredRowMissingError(RuntimeError):
    """An update found fewer rows than records: the working set believed a record stored that is not."""


def changed_columns(table: Table, stored: Any, record: Any) -> frozenset[str]:
    """The columns of `record` to write over `stored`: those that differ, and the table's `always` ones."""
    always = table.always
    return frozenset(
        name for name, old, new in zip(table.column_names, table.values_of(stored), table.values_of(record))
        if name in always or (old is not new and old != new)
    )  # fmt: skip


def columns_to_update(table: Table, records: Iterable[Any], stored: Mapping[str, Any]) -> frozenset[str]:
    """The columns to write over the `stored` versions of `records` (all stored): every column one of
    them changed, and the `always` ones; empty when none changed anything (the key is not counted)."""
    changed: set[str] = set()
    for record in records:
        changed |= changed_columns(table, stored[getattr(record, table.key)], record)
    return frozenset(changed - {table.key})


async def save_records(conn: asyncpg.Connection, table: Table, records: Iterable[Any],
                       stored: Mapping[str, Any] | None) -> None:
    """Write `records`: new ones (not in `stored`) upserted whole, stored ones updated in what changed.
    `stored` None: nothing is known of the table's rows, every record is upserted whole."""
    known = stored if stored is not None else {}
    fresh, kept = [], []
    for record in records:
        (kept if getattr(record, table.key) in known else fresh).append(record)
    await upsert(conn, table, fresh)
    if kept and (changed := columns_to_update(table, kept, known)):
        await update_changed(conn, table, changed, kept)


async def upsert(conn: asyncpg.Connection, table: Table, rows: list[Any]) -> None:
    """One INSERT .. ON CONFLICT DO UPDATE of every column but the fixed ones, for all `rows`."""
    if rows:
        await conn.execute(_upsert_sql(table), *[[value(row) for row in rows] for _, _, value in table.columns])


async def update_changed(conn: asyncpg.Connection, table: Table, changed: frozenset[str], rows: list[Any]) -> None:
    """One UPDATE of the `changed` columns of `rows`, all stored (StoredRowMissingError otherwise)."""
    columns = [column for column in table.columns if column[0] == table.key or column[0] in changed]
    status = await conn.execute(_update_sql(table, changed), *[[value(row) for row in rows] for _, _, value in columns])
    if int(status.split()[-1]) != len(rows):
        raise StoredRowMissingError(f"{table.name}: {len(rows)} records to update, {status.split()[-1]} rows found")


_SQL_CACHE: dict[tuple[str, frozenset[str] | None], str] = {}


def _upsert_sql(table: Table) -> str:
    cache_key = (table.name, None)
    if cache_key not in _SQL_CACHE:
        names = ", ".join(name for name, _, _ in table.columns)
        params = ", ".join(f"${n}::{_WIRE.get(kind, kind)}[]" for n, (_, kind, _) in enumerate(table.columns, 1))
        select = ", ".join(f"{name}::{kind}" if kind in _WIRE else name for name, kind, _ in table.columns)
        sets = ", ".join(f"{name} = excluded.{name}" for name, _, _ in table.columns
                         if name not in table.fixed and name != table.key)
        _SQL_CACHE[cache_key] = (f"INSERT INTO {table.name} ({names}) SELECT {select} FROM unnest({params}) AS x({names})"
                                 f" ON CONFLICT ({table.key}) DO UPDATE SET {sets}")
    return _SQL_CACHE[cache_key]


def _update_sql(table: Table, changed: frozenset[str]) -> str:
    cache_key = (table.name, changed)
    if cache_key not in _SQL_CACHE:
        columns = [(name, kind) for name, kind, _ in table.columns if name == table.key or name in changed]
        names = ", ".join(name for name, _ in columns)
        params = ", ".join(f"${n}::{_WIRE.get(kind, kind)}[]" for n, (_, kind) in enumerate(columns, 1))
        sets = ", ".join(f"{name} = x.{name}::{kind}" if kind in _WIRE else f"{name} = x.{name}"
                         for name, kind in columns if name != table.key)
        _SQL_CACHE[cache_key] = (f"UPDATE {table.name} AS t SET {sets} FROM unnest({params}) AS x({names})"
                                 f" WHERE t.{table.key} = x.{table.key}")
    return _SQL_CACHE[cache_key]
