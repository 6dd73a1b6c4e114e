"""How an output count is written in every sentence (projection, audit story, console, both languages)."""

import pytest

from shared.task_view import output_units_text


@pytest.mark.parametrize(("units", "text"), [
    (1_274_375.0, "1,274,375"),  # `:g` wrote 1.27438e+06
    (1_274_375.5, "1,274,375.5"),
    (1000.0, "1,000"),
    (12.0, "12"),
    (0.0, "0"),
    (0.125, "0.125"),
    (-3.5, "-3.5"),
    (2.5e-7, "2.5e-07"),  # below the six decimals
    (float("inf"), "inf"),
])
def test_an_output_count_reads_as_people_write_it(units: float, text: str) -> None:
    assert output_units_text(units) == text
