"""`services.common.bulk`: column arrays from attribute names, dotted paths and functions."""

from __future__ import annotations

from types import SimpleNamespace

from services.common.bulk import column_arrays, execute_bulk


def test_column_arrays_take_attributes_paths_and_functions() -> None:
    rows = [SimpleNamespace(id="a", data=SimpleNamespace(n=1)), SimpleNamespace(id="b", data=SimpleNamespace(n=2))]
    assert column_arrays(rows, ("id", "data.n", lambda r: r.id * 2)) == [["a", "b"], [1, 2], ["aa", "bb"]]


async def test_execute_bulk_skips_the_statement_without_rows() -> None:
    class Recorder:
        calls: list[tuple[object, ...]] = []

        async def execute(self, *args: object) -> None:
            self.calls.append(args)

    conn = Recorder()
    assert await execute_bulk(conn, "SQL", [], ("id",)) is False  # type: ignore[arg-type]
    assert await execute_bulk(conn, "SQL", [SimpleNamespace(id="x")], ("id",)) is True  # type: ignore[arg-type]
    assert conn.calls == [("SQL", ["x"])]
