"""Events built before their `subject_seq` is known (`outbox.UnnumberedEvent`): numbering one later
gives exactly the canonical JSON that building it with that number gives."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from services.common.runtime import Emitter
from shared.delivery.outbox import UnnumberedEvent
from shared.events import make_event, parse_event
from shared.events.envelope import canonical_json
from shared.leasing.report_fold import apply_reports
from shared.leasing.work import LeaseRules
from tests.unit.dispatcher.builders import NOW, a_running_lease_book, finished, heartbeat, submitted

EMITTER = Emitter("dispatcher", "dispatcher/test-1", "service:dispatcher")


def emissions_of_a_run() -> list:
    """What the report fold emits for a heartbeat (`task.started`, `lease.renewed`) and a finish
    (`task.succeeded` carrying the lease's end) — payloads with times, enums, nested objects and None."""
    book = a_running_lease_book()
    book = replace(book, leases={"L1": replace(book.leases["L1"], granted_at=NOW - timedelta(hours=1))})
    reports = [heartbeat("a1", "n1", [("L1", "T1", 7)], utilisation=[55.0]), finished("a1", "L1", "T1", 7)]
    return list(apply_reports(book, reports, NOW, LeaseRules()).changes.emissions)


@pytest.mark.parametrize("subject_seq", [1, 9, 10, 123_456_789])
def test_numbering_a_built_event_is_building_it_with_the_number(subject_seq: int) -> None:
    emissions = emissions_of_a_run()
    assert {e.event_type.__name__ for e in emissions} >= {"TaskStarted", "LeaseRenewed", "TaskSucceeded"}
    assert any(e.data.get("released") for e in emissions if e.event_type.__name__ == "TaskSucceeded")
    for unnumbered in EMITTER.build(emissions):
        event = unnumbered.event.model_copy(update={"subject_seq": subject_seq})
        body = unnumbered.body(subject_seq)
        assert body == canonical_json(event).decode()
        assert parse_event(body.encode()) == event


def test_an_event_built_with_another_number_is_refused() -> None:
    event = submitted("T1")
    with pytest.raises(ValueError, match="not an unnumbered envelope"):
        UnnumberedEvent.of(make_event(type(event), subject=event.subject, subject_seq=2, producer="intake/x",
                                      actor="user:a", data=event.data), "cf:events")
