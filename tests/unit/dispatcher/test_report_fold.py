"""What agents' reports mean (`shared.leasing.report_fold.apply_reports`): tables, no PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from shared.events import TaskFailed, TaskStarted, TaskSucceeded
from shared.events.reasons import ReleaseReason, RevokeReason
from shared.events.states import TaskState
from shared.leasing import screening
from shared.leasing.fencing import Refusal, Rejection
from shared.leasing.records import LeaseBook, LeaseState
from shared.leasing.report_fold import ReportEffects, apply_reports
from shared.leasing.work import LeaseRules
from tests.unit.dispatcher.builders import (
    NOW,
    a_book,
    a_lease_record,
    a_node_record,
    a_running_lease_book,
    a_task_record,
    checkpointed,
    finished,
    heartbeat,
    progress,
    registered,
)

RULES = LeaseRules(lease_ttl_s=30.0, renewal_event_every_s=5.0, revoke_grace_s=30.0)
HELD = [("L1", "T1", 7)]
ENDED = dict(state=LeaseState.ENDED, ended_at=NOW - timedelta(seconds=5), end_reason=ReleaseReason.EXPIRED)


@dataclass(frozen=True)
class Outcome:
    """What a fold did, in words a table can hold."""

    emitted: list[str]  # types of the events and commands, in order (commands first); a carried release as
    # "lease.released (carried)" just before its carrier
    rejected: list[str]  # rejection reasons, in order
    task: str | None  # T1's state afterwards
    lease: str | None  # L1's release reason afterwards ("active" while it runs)


def outcome(book: LeaseBook, effects: ReportEffects) -> Outcome:
    changes = effects.changes
    task = changes.tasks.get("T1") or book.tasks.get("T1")
    lease = changes.leases.get("L1") or changes.quiet_leases.get("L1") or book.leases.get("L1")
    return Outcome(
        emitted=[told for e in changes.emissions for told in _told(e)],
        rejected=[r.refusal.reason.value for r in effects.rejected],
        task=task.state.value if task else None,
        lease=(lease.end_reason.value if lease.end_reason else lease.state.value) if lease else None,
    )


def _told(emission: Any) -> list[str]:
    carried = ["lease.released (carried)"] if isinstance(emission.data, dict) and emission.data.get("released") else []
    return [*carried, emission.event_type.model_fields["type"].default]


def fold(book: LeaseBook, *reports: Any) -> ReportEffects:
    return apply_reports(book, reports, NOW, RULES)


CASES: list[tuple[str, LeaseBook, list[Any], Outcome]] = [
    ("the holder reports success", a_running_lease_book(), [finished("a1", "L1", "T1", 7, exit_code=0)],
     Outcome(["lease.released (carried)", "task.succeeded"], [], "succeeded", "succeeded")),
    ("a failure of the task itself", a_running_lease_book(state=TaskState.RUNNING),
     [finished("a1", "L1", "T1", 7, exit_code=3, error="Traceback ...")],
     Outcome(["lease.released (carried)", "task.failed"], [], "failed", "failed")),
    ("a stale token changes nothing", a_running_lease_book(), [finished("a1", "L1", "T1", 6, exit_code=0)],
     Outcome([], ["stale_token"], "leased", "active")),
    ("another agent's report changes nothing", a_running_lease_book(), [finished("a2", "L1", "T1", 7, exit_code=0)],
     Outcome([], ["wrong_agent"], "leased", "active")),
    ("a report about another task", a_running_lease_book(), [finished("a1", "L1", "T9", 7, exit_code=0)],
     Outcome([], ["wrong_task"], "leased", "active")),
    ("a lease that was never granted", a_running_lease_book(), [finished("a1", "L9", "T1", 7, exit_code=0)],
     Outcome([], ["unknown_lease"], "leased", "active")),
    ("a clean finish reported after the lease expired (its report was late): the task succeeded, no rerun",
     a_book(a_node_record(), a_task_record(state=TaskState.QUEUED), a_lease_record(**ENDED)),
     [finished("a1", "L1", "T1", 7, exit_code=0)], Outcome(["task.succeeded"], [], "succeeded", "expired")),
    ("a failure reported after the lease expired is refused (the requeued task runs again)",
     a_book(a_node_record(), a_task_record(state=TaskState.QUEUED), a_lease_record(**ENDED)),
     [finished("a1", "L1", "T1", 7, exit_code=1)], Outcome([], ["lease_ended"], "queued", "expired")),
    ("a late clean finish of a revoked lease is refused",
     a_book(a_node_record(), a_task_record(state=TaskState.QUEUED),
            a_lease_record(**ENDED | {"end_reason": ReleaseReason.REVOKED})),
     [finished("a1", "L1", "T1", 7, exit_code=0)], Outcome([], ["lease_ended"], "queued", "revoked")),
    ("a late clean finish with a stale token is refused",
     a_book(a_node_record(), a_task_record(state=TaskState.QUEUED), a_lease_record(**ENDED)),
     [finished("a1", "L1", "T1", 6, exit_code=0)], Outcome([], ["stale_token"], "queued", "expired")),
    ("a late clean finish of a task being cancelled is refused",
     a_book(a_node_record(), a_task_record(state=TaskState.QUEUED, cancel_requested=True), a_lease_record(**ENDED)),
     [finished("a1", "L1", "T1", 7, exit_code=0)], Outcome([], ["lease_ended"], "queued", "expired")),
    ("a late clean finish of one part of a multi-node run is refused",
     a_book(a_node_record(), a_task_record(state=TaskState.QUEUED), a_lease_record(parts=2, **ENDED)),
     [finished("a1", "L1", "T1", 7, exit_code=0)], Outcome([], ["lease_ended"], "queued", "expired")),
    ("a duplicate finish (another report id) in the same batch", a_running_lease_book(),
     [finished("a1", "L1", "T1", 7, exit_code=0), finished("a1", "L1", "T1", 7, exit_code=0)],
     Outcome(["lease.released (carried)", "task.succeeded"], ["lease_ended"], "succeeded", "succeeded")),
    ("checkpoint, then the agent restarts without the lease: requeued from the checkpoint", a_running_lease_book(),
     [checkpointed("a1", "L1", "T1", 7, "s3://ckpt/T1/1"), registered("a1", "n1", started_at=NOW)],
     Outcome(["task.started", "task.checkpointed", "lease.released", "task.requeued"], [], "queued", "revoked")),
    ("a preempted run that checkpointed and yielded",
     a_book(a_node_record(), a_task_record(state=TaskState.RUNNING), a_lease_record(preempting=True, preempted_for="C1")),
     [finished("a1", "L1", "T1", 7, exit_code=0, error="preempted: core task C1 needs the GPUs")],
     Outcome(["lease.released", "task.requeued"], [], "queued", "preempted")),
    ("an agent that refused the grant: requeued, not failed", a_running_lease_book(),
     [finished("a1", "L1", "T1", 7, exit_code=None, error="not started (gpus_busy): GPU 0 runs lease L0")],
     Outcome(["lease.released", "task.requeued"], [], "queued", "failed")),
    ("a cancelled task's run stopped", a_book(a_node_record(), a_task_record(cancel_requested=True),
                                              a_lease_record(revoke_reason=RevokeReason.CANCELLED)),
     [finished("a1", "L1", "T1", 7, exit_code=143)], Outcome(["lease.released", "task.cancelled"], [], "cancelled",
                                                             "cancelled")),
    ("a lease of an older run only frees its GPUs", a_running_lease_book(run=2),
     [finished("a1", "L1", "T1", 7, exit_code=0)], Outcome(["lease.released"], [], "leased", "succeeded")),
    ("a heartbeat renews the lease, and the run has started", a_running_lease_book(), [heartbeat("a1", "n1", HELD)],
     Outcome(["lease.renewed", "task.started"], [], "running", "active")),
    ("a heartbeat from a node never registered", a_running_lease_book(), [heartbeat("a1", "n7", HELD)],
     Outcome([], ["unknown_node"], "leased", "active")),
    ("a heartbeat from another agent on the node", a_running_lease_book(), [heartbeat("a2", "n1", [])],
     Outcome([], ["unknown_node"], "leased", "active")),
    ("a zombie run is told to stop, once",
     a_book(a_node_record(), a_task_record(state=TaskState.QUEUED), a_lease_record(**ENDED)),
     [heartbeat("a1", "n1", HELD), heartbeat("a1", "n1", HELD)],
     Outcome(["command.revoke"], ["lease_ended", "lease_ended"], "queued", "expired")),
    ("a lost node that heartbeats is back", a_book(a_node_record(alive=False)), [heartbeat("a1", "n1", [])],
     Outcome(["node.registered"], [], None, None)),
    ("progress means the run started", a_running_lease_book(), [progress("a1", "L1", "T1", 7, 0.5)],
     Outcome(["task.started"], [], "running", "active")),
]


@pytest.mark.parametrize(("book", "reports", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_what_a_batch_of_reports_does(book: LeaseBook, reports: list[Any], expected: Outcome) -> None:
    assert outcome(book, fold(book, *reports)) == expected


def test_a_run_whose_first_report_is_its_end_carries_its_start_on_the_success() -> None:
    leased = fold(a_running_lease_book(), finished("a1", "L1", "T1", 7, exit_code=0))
    [succeeded] = [e for e in leased.changes.emissions if e.event_type is TaskSucceeded]
    assert succeeded.data["started"] == {"node_id": "n1", "resumed_from": None}
    running = fold(a_running_lease_book(state=TaskState.RUNNING), finished("a1", "L1", "T1", 7, exit_code=0))
    [succeeded] = [e for e in running.changes.emissions if e.event_type is TaskSucceeded]
    assert "started" not in succeeded.data  # its `task.started` was written when its first report came


def test_a_run_that_fails_at_its_first_report_carries_its_start_on_the_failure() -> None:
    leased = fold(a_running_lease_book(), finished("a1", "L1", "T1", 7, exit_code=3, error="boom"))
    [failed] = [e for e in leased.changes.emissions if e.event_type is TaskFailed]
    assert failed.data["started"] == {"node_id": "n1", "resumed_from": None}
    assert not [e for e in leased.changes.emissions if e.event_type is TaskStarted]
    running = fold(a_running_lease_book(state=TaskState.RUNNING), finished("a1", "L1", "T1", 7, exit_code=3))
    [failed] = [e for e in running.changes.emissions if e.event_type is TaskFailed]
    assert "started" not in failed.data  # its `task.started` was written when its first report came


def test_a_late_clean_finish_supersedes_the_rerun_already_granted() -> None:
    # L1 expired while its report was on its way; T1 was requeued and granted again (L2, run 2).
    book = a_book(a_node_record(gpus=2), a_task_record(state=TaskState.RUNNING, run=2), a_lease_record(**ENDED),
                  a_lease_record("L2", run=2, token=9, gpus=(1,)))
    effects = fold(book, finished("a1", "L1", "T1", 7, exit_code=0, output_units=12.0))
    emitted = [(e.event_type.model_fields["type"].default, e.data.get("lease_id")) for e in effects.changes.emissions]
    assert emitted == [("command.revoke", "L2"), ("task.succeeded", "L1"), ("lease.revoked", "L2")]
    assert effects.changes.emissions[1].data["output_units"] == 12.0
    assert effects.changes.tasks["T1"].state is TaskState.SUCCEEDED
    assert effects.changes.leases["L2"].revoke_reason is RevokeReason.SUPERSEDED and effects.changes.leases["L2"].active
    # the superseded run's own end then only frees its GPUs
    after = a_book(a_node_record(gpus=2), effects.changes.tasks["T1"], effects.changes.leases["L2"])
    end = fold(after, finished("a1", "L2", "T1", 9, exit_code=143, error="revoked: superseded"))
    assert [e.event_type.model_fields["type"].default for e in end.changes.emissions] == ["lease.released"]


@pytest.mark.parametrize(("finished_s_ago", "renewed_s_ago", "charged_until_s_ago"), [
    (20, 30, 20),   # the run ended 20 s ago (its report was held up): charged until then, not until now
    (20, 10, 10),   # never before the dispatcher last heard the lease was held
    (-5, 30, 0),    # an agent clock ahead of the dispatcher's: no later than now
])  # fmt: skip
def test_a_finished_lease_is_charged_until_the_run_ended(finished_s_ago: int, renewed_s_ago: int,
                                                          charged_until_s_ago: int) -> None:
    s = timedelta(seconds=1)
    book = a_book(a_node_record(), a_task_record(), a_lease_record(last_renewed_at=NOW - renewed_s_ago * s))
    report = finished("a1", "L1", "T1", 7, exit_code=0).model_copy(update={"occurred_at": NOW - finished_s_ago * s})
    effects = fold(book, report)
    assert released_at(effects) == effects.changes.leases["L1"].ended_at == NOW - charged_until_s_ago * s


def releases(effects: ReportEffects) -> list[dict[str, Any]]:
    """The facts of every lease end the fold emitted: `lease.released` events and the releases run ends carry."""
    found = []
    for e in effects.changes.emissions:
        if e.event_type.model_fields["type"].default == "lease.released":
            found.append(e.data)
        elif isinstance(e.data, dict) and e.data.get("released"):
            found.append(e.data["released"])
    return found


def released_at(effects: ReportEffects) -> Any:
    [released] = releases(effects)
    return released["ended_at"]


@pytest.mark.parametrize(("heartbeat_arrived_s_ago", "finished_s_ago", "charged_until_s_ago"), [
    (25, 20, 20),   # the heartbeat reached cf:reports before the run ended, but is applied only now
    (15, 20, 15),   # it reached the stream after the end the agent claims: held at least until then
    (None, 20, 0),  # no arrival known (called without one): heard as it is applied, as before
])  # fmt: skip
def test_a_heartbeat_applied_late_charges_from_when_it_reached_the_stream(
        heartbeat_arrived_s_ago: int | None, finished_s_ago: int, charged_until_s_ago: int) -> None:
    # The dispatcher behind on cf:reports (e.g. after a Redis outage) applies the run's last heartbeat
    # and its finish in one batch: the heartbeat renews the lease *now*, but it proves the lease held
    # only until it reached the stream.
    s = timedelta(seconds=1)
    book = a_book(a_node_record(), a_task_record(), a_lease_record(last_renewed_at=NOW - 40 * s))
    beat = heartbeat("a1", "n1", HELD)
    end = finished("a1", "L1", "T1", 7, exit_code=0).model_copy(update={"occurred_at": NOW - finished_s_ago * s})
    arrived = {} if heartbeat_arrived_s_ago is None else {beat.event_id: NOW - heartbeat_arrived_s_ago * s,
                                                          end.event_id: NOW - 12 * s}
    effects = apply_reports(book, [beat, end], NOW, RULES, arrived)
    assert released_at(effects) == effects.changes.leases["L1"].ended_at == NOW - charged_until_s_ago * s
    # the ledger accounts a renewal up to its heard_at: never past the end, so it charges exactly the lease
    [renewed] = [e for e in effects.changes.emissions if e.event_type.model_fields["type"].default == "lease.renewed"]
    assert renewed.data["heard_at"] == (NOW if heartbeat_arrived_s_ago is None else NOW - heartbeat_arrived_s_ago * s)
    assert renewed.data["heard_at"] <= released_at(effects)


def test_what_a_late_heartbeat_proves_is_kept_across_batches_and_never_moves_back() -> None:
    s = timedelta(seconds=1)
    book = a_book(a_node_record(), a_task_record(), a_lease_record(last_renewed_at=NOW - 40 * s))
    first, second = heartbeat("a1", "n1", HELD), heartbeat("a1", "n1", HELD)
    effects = apply_reports(book, [first, second], NOW, RULES,
                            {first.event_id: NOW - 30 * s, second.event_id: NOW - 35 * s})  # fmt: skip
    lease = effects.changes.leases["L1"]
    assert (lease.last_renewed_at, lease.last_heard_at) == (NOW, NOW - 30 * s)
    later = a_book(a_node_record(), a_task_record(), lease)
    end = finished("a1", "L1", "T1", 7, exit_code=0).model_copy(update={"occurred_at": NOW - 32 * s})
    assert released_at(apply_reports(later, [end], NOW + 5 * s, RULES)) == NOW - 30 * s


def test_an_agent_stamping_old_times_is_still_charged_until_its_heartbeat_reached_the_stream() -> None:
    # The lower bound is Redis's clock, not the agent's: a heartbeat that claims to be old but reached
    # the stream 2 s ago proves the lease held 2 s ago, whatever its `occurred_at` and the finish's say.
    s = timedelta(seconds=1)
    book = a_book(a_node_record(), a_task_record(), a_lease_record(granted_at=NOW - 3600 * s))
    beat = heartbeat("a1", "n1", HELD).model_copy(update={"occurred_at": NOW - 3590 * s})
    end = finished("a1", "L1", "T1", 7, exit_code=0).model_copy(update={"occurred_at": NOW - 3580 * s})
    effects = apply_reports(book, [beat, end], NOW, RULES, {beat.event_id: NOW - 2 * s, end.event_id: NOW - 1 * s})
    assert released_at(effects) == NOW - 2 * s


def test_a_checkpoint_becomes_the_resume_point_of_the_requeued_task() -> None:
    effects = fold(a_running_lease_book(), checkpointed("a1", "L1", "T1", 7, "s3://ckpt/T1/1"),
                   registered("a1", "n1", started_at=NOW))
    requeued = [e for e in effects.changes.emissions if e.event_type.model_fields["type"].default == "task.requeued"]
    assert [(e.data["reason"], e.data["resume_from"]) for e in requeued] == [("agent_failed", "s3://ckpt/T1/1")]
    assert effects.changes.tasks["T1"].resume_from == "s3://ckpt/T1/1" and effects.capacity_changed


def test_a_lease_release_names_when_its_run_last_checkpointed() -> None:
    # The ledger counts a lost run's GPU time from this checkpoint (a round's preemption losses).
    effects = fold(a_running_lease_book(), checkpointed("a1", "L1", "T1", 7, "s3://ckpt/T1/1"),
                   registered("a1", "n1", started_at=NOW))
    assert [facts["last_checkpoint_at"] for facts in releases(effects)] == [NOW]
    unchecked = fold(a_running_lease_book(), registered("a1", "n1", started_at=NOW))
    assert [facts["last_checkpoint_at"] for facts in releases(unchecked)] == [None]


def test_a_checkpoint_of_an_older_run_does_not_move_the_resume_point() -> None:
    effects = fold(a_running_lease_book(run=2, resume_from="s3://ckpt/T1/new"),
                   checkpointed("a1", "L1", "T1", 7, "s3://ckpt/T1/old"))
    assert effects.changes.tasks.get("T1") is None or effects.changes.tasks["T1"].resume_from == "s3://ckpt/T1/new"
    assert effects.changes.leases["L1"].last_checkpoint == "s3://ckpt/T1/old"


def test_registration_keeps_listed_leases_leaves_grants_in_flight_and_ends_the_rest() -> None:
    book = a_book(
        a_node_record(gpus=4), a_task_record("T1"), a_task_record("T2"), a_task_record("T3"),
        a_lease_record("L1", "T1", gpus=(0,), token=7),  # listed: kept and renewed
        a_lease_record("L2", "T2", gpus=(1,), token=8, granted_at=NOW - timedelta(seconds=1)),  # after the restart
        a_lease_record("L3", "T3", gpus=(2,), token=9),  # lost with the old agent process
    )
    effects = fold(book, registered("a1", "n1", gpus=4, held=HELD, started_at=NOW - timedelta(seconds=10)))
    leases = {i: lease.state for i, lease in effects.changes.leases.items()}
    assert leases == {"L1": LeaseState.ACTIVE, "L3": LeaseState.ENDED}
    assert effects.changes.tasks["T3"].state is TaskState.QUEUED and "T2" not in effects.changes.tasks
    assert effects.rejected == ()


def test_registration_announces_a_node_only_when_it_is_new_or_changed() -> None:
    same = fold(a_book(a_node_record()), registered("a1", "n1", gpus=2))
    other_agent = fold(a_book(a_node_record()), registered("a2", "n1", gpus=2))
    assert same.changes.emissions == () and not same.capacity_changed
    assert [e.data["agent_id"] for e in other_agent.changes.emissions] == ["a2"] and other_agent.capacity_changed


def test_renewals_are_coalesced_into_one_event_per_window() -> None:
    book = a_running_lease_book()
    first = fold(book, heartbeat("a1", "n1", HELD))
    lease = first.changes.leases["L1"]
    assert lease.renewal_reported_at == NOW and lease.expires_at == NOW + timedelta(seconds=30)
    later = replace(book, leases={"L1": lease}, tasks=book.tasks | first.changes.tasks)
    second = apply_reports(later, [heartbeat("a1", "n1", HELD)], NOW + timedelta(seconds=2), RULES)
    assert second.changes.emissions == () and second.changes.leases == {}
    quiet = second.changes.quiet_leases["L1"]
    assert quiet.renewals_unreported == 1 and quiet.expires_at == NOW + timedelta(seconds=32)


def test_one_part_of_a_multi_node_task_failing_revokes_the_others() -> None:
    book = a_book(a_node_record("n1"), a_node_record("n2", "a2"), a_task_record(gpus=2),
                  a_lease_record("L1", parts=2), a_lease_record("L2", agent_id="a2", node_id="n2", token=8, parts=2))
    effects = fold(book, finished("a1", "L1", "T1", 7, exit_code=1))
    kinds = [(e.event_type.model_fields["type"].default, e.stream) for e in effects.changes.emissions]
    assert kinds[0] == ("command.revoke", "cf:agent:a2")
    assert effects.changes.leases["L2"].revoke_reason is RevokeReason.SUPERSEDED
    assert effects.changes.tasks["T1"].state is TaskState.FAILED


def test_utilisation_is_kept_per_gpu() -> None:
    effects = fold(a_running_lease_book(), heartbeat("a1", "n1", HELD, utilisation=[90.0, 10.0]))
    assert [(r.gpu_index, r.util_pct) for r in effects.utilisation] == [(0, 90.0), (1, 10.0)]


def test_a_further_screen_refuses_a_claim_that_passed_fencing(monkeypatch: pytest.MonkeyPatch) -> None:
    def too_early(claim: Any, report: Any, lease: Any, node: Any, now: Any, rules: Any) -> Refusal | None:
        return Refusal(Rejection.STALE_TOKEN, "implausibly early") if report.type == "report.finished" else None

    monkeypatch.setattr(screening, "SCREENS", (too_early,))
    effects = fold(a_running_lease_book(), finished("a1", "L1", "T1", 7, exit_code=0))
    assert [r.refusal.detail for r in effects.rejected] == ["implausibly early"] and not effects.changes
