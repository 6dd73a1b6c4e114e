"""docs/events.md lists every event, report and command with its class and every payload field."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.events import MESSAGE_TYPES, Envelope

GUIDE = Path(__file__).parents[2] / "docs" / "events.md"


def catalog_rows() -> dict[str, str]:
    """Table rows of the guide keyed by the type in their first cell."""
    rows: dict[str, str] = {}
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) > 2 and cells[1].startswith("`") and cells[1].endswith("`"):
            rows[cells[1].strip("`")] = line
    return rows


@pytest.mark.parametrize("message_type", sorted(MESSAGE_TYPES))
def test_every_type_is_documented_with_its_class_and_fields(message_type: str) -> None:
    cls: type[Envelope] = MESSAGE_TYPES[message_type]
    row = catalog_rows().get(message_type)
    assert row is not None, f"docs/events.md has no catalog row for {message_type}"
    assert f"`{cls.__name__}`" in row
    payload = cls.model_fields["data"].annotation
    for name, field in payload.model_fields.items():
        spelled = f"`{name}`" if field.is_required() else f"`{name}?`"
        assert spelled in row, f"{message_type}: field {spelled} missing from its docs row"


def test_the_guide_documents_no_type_that_does_not_exist() -> None:
    documented = {t for t in catalog_rows() if "." in t and " " not in t and t.split(".")[0].isalpha()}
    assert documented - set(MESSAGE_TYPES) == set()
