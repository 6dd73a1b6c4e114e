"""Migrations against a real PostgreSQL: applied once and in order, recorded, safe when
several runners start together, refused when an applied file changed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from shared.delivery import MigrationChecksumError, MigrationError, applied_migrations, migrate, migrate_delivery
from tests.helpers.delivery_support import pool, schema  # noqa: F401  (fixtures)


def write_migrations(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, sql in files.items():
        (directory / name).write_text(sql)
    return directory


COUNTING_SET = {
    "001_create.sql": "CREATE TABLE runs (id serial PRIMARY KEY, note text NOT NULL);",
    "002_seed.sql": "INSERT INTO runs (note) VALUES ('seeded by 002');",
    "010_more.sql": "ALTER TABLE runs ADD COLUMN extra integer; INSERT INTO runs (note) VALUES ('010');",
}


async def test_applies_in_version_order_once_and_records_each_file(
    pool: asyncpg.Pool, schema: str, tmp_path: Path
) -> None:
    directory = write_migrations(tmp_path / "m", COUNTING_SET)

    first = await migrate(pool, schema, directory)
    second = await migrate(pool, schema, directory)

    assert [m.version for m in first] == [1, 2, 10]
    assert second == []
    notes = await pool.fetch(f"SELECT note FROM {schema}.runs ORDER BY id")
    assert [r["note"] for r in notes] == ["seeded by 002", "010"]
    history = await applied_migrations(pool, schema)
    assert [(h.component, h.version, h.name) for h in history] == [
        ("service", 1, "create"), ("service", 2, "seed"), ("service", 10, "more"),
    ]  # fmt: skip
    assert all(len(h.checksum) == 64 for h in history)


async def test_new_files_are_applied_on_the_next_start(pool: asyncpg.Pool, schema: str, tmp_path: Path) -> None:
    directory = write_migrations(tmp_path / "m", {"001_create.sql": COUNTING_SET["001_create.sql"]})
    await migrate(pool, schema, directory)
    write_migrations(directory, {"002_seed.sql": COUNTING_SET["002_seed.sql"]})

    applied = await migrate(pool, schema, directory)

    assert [m.version for m in applied] == [2]
    assert await pool.fetchval(f"SELECT count(*) FROM {schema}.runs") == 1


async def test_concurrent_runners_apply_each_file_exactly_once(
    pool: asyncpg.Pool, schema: str, tmp_path: Path
) -> None:
    directory = write_migrations(tmp_path / "m", COUNTING_SET)

    results = await asyncio.gather(*(migrate(pool, schema, directory) for _ in range(6)))

    assert sorted(len(r) for r in results) == [0, 0, 0, 0, 0, 3]
    assert await pool.fetchval(f"SELECT count(*) FROM {schema}.runs") == 2
    assert len(await applied_migrations(pool, schema)) == 3


async def test_changed_checksum_of_an_applied_file_refuses_to_start(
    pool: asyncpg.Pool, schema: str, tmp_path: Path
) -> None:
    directory = write_migrations(tmp_path / "m", COUNTING_SET)
    await migrate(pool, schema, directory)
    (directory / "002_seed.sql").write_text("INSERT INTO runs (note) VALUES ('edited');")
    write_migrations(directory, {"011_later.sql": "INSERT INTO runs (note) VALUES ('011');"})

    with pytest.raises(MigrationChecksumError, match="002_seed"):
        await migrate(pool, schema, directory)

    assert await pool.fetchval(f"SELECT count(*) FROM {schema}.runs WHERE note = '011'") == 0


async def test_a_failing_file_rolls_back_the_whole_run(pool: asyncpg.Pool, schema: str, tmp_path: Path) -> None:
    directory = write_migrations(
        tmp_path / "m", {"001_ok.sql": "CREATE TABLE ok (id int);", "002_bad.sql": "CREATE TABLE broken (id nope);"}
    )

    with pytest.raises(MigrationError, match="002_bad"):
        await migrate(pool, schema, directory)

    assert await pool.fetchval("SELECT to_regclass($1)", f"{schema}.ok") is None


async def test_delivery_tables_install_in_any_schema_next_to_a_service_set(
    pool: asyncpg.Pool, schema: str, tmp_path: Path
) -> None:
    other = f"{schema}_b"
    try:
        await migrate(pool, schema, write_migrations(tmp_path / "m", COUNTING_SET))
        await migrate_delivery(pool, schema)
        await migrate_delivery(pool, other)

        for name in (schema, other):
            for table in ("outbox", "inbox", "subject_seq"):
                assert await pool.fetchval("SELECT to_regclass($1)", f"{name}.{table}") is not None
        components = {(h.component, h.version) for h in await applied_migrations(pool, schema)}
        assert components == {("service", 1), ("service", 2), ("service", 10), ("delivery", 1)}
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {other} CASCADE")
