"""The chaos run's figures and the page they become (docs/RELIABILITY.md): `Figures` is everything
`bench/chaos.py` measured; `markdown` writes them with the standing notes on what earlier runs diagnosed
and what the reliability tests cover that this script does not measure."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from shared.names import EVENTS_STREAM, producer_stream


@dataclass
class Figures:
    """Everything the run measured (written to docs/RELIABILITY.md)."""

    tasks_submitted: int = 0
    tasks_finished: int = 0
    tasks_failed: int = 0
    tasks_lost: int = 0
    tasks_run_twice: int = 0
    run_twice_details: list[str] = field(default_factory=list)
    delivered_twice: dict[str, int] = field(default_factory=dict)
    double_leased_gpus: int = 0
    requeues_by_reason: dict[str, int] = field(default_factory=dict)
    hostile_submitted: int = 0
    hostile_http_bodies: int = 0
    hostile_rejected: int = 0
    rejections_by_field: dict[str, int] = field(default_factory=dict)
    http_answers: dict[str, int] = field(default_factory=dict)
    kills: dict[str, int] = field(default_factory=dict)
    recovery_s: dict[str, float] = field(default_factory=dict)
    forged_by_intruder_believed: bool | None = None
    forged_as_dispatcher_believed: bool | None = None
    agent_read_another_inbox: bool | None = None
    forgery_answers: dict[str, str] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    settle_s: float = 0.0
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)



def markdown(figures: Figures, options: argparse.Namespace, time_scale: float) -> str:
    """docs/RELIABILITY.md: the run's figures, then the notes on what it diagnosed and what tests cover."""
    f = figures
    rows = [
        ("valid tasks submitted", f.tasks_submitted), ("finished (succeeded)", f.tasks_finished),
        ("failed", f.tasks_failed), ("lost (never ended)", f.tasks_lost), ("run twice", f.tasks_run_twice),
        ("GPUs double-leased (overlapping holds)", f.double_leased_gpus),
    ]  # fmt: skip
    lines = [
        "# Reliability figures",
        "",
        "Measured by `bench/chaos.py` (rerun: `make chaos`, about 5 minutes; `nice -n 15` on a shared machine).",
        f"Run: {options.tasks} valid tasks, chaos for {options.chaos_s:.0f} s (a `kill -9` every {options.kill_every_s:g} s",
        "on each service, agent and the console in turn, shuffled), Redis, PostgreSQL and S3 each `kill -9`ed once, three simulated",
        f"GPU hosts (2 x H100x8, L40Sx8) at time scale {time_scale:g}, lease TTL 6 s. Seed {options.seed}.",
        "",
        "| tasks | count |", "|---|---|", *[f"| {name} | {value} |" for name, value in rows],
        "",
        f"Every valid task ended {f.settle_s:.0f} s after the first wave was submitted." if f.tasks_lost == 0 else
        f"{f.tasks_lost} tasks had not ended {f.settle_s:.0f} s after the first wave.",
        "",
        "\"Run twice\" counts a task whose work was done more than once: two leases whose runs the agents reported"
        " finished cleanly (exit 0, not stopped on request; accepted or not), two distinct `task.succeeded`, or a lease"
        " granted after the task succeeded (`bench/chaos_tally.py`). Each one:",
        "",
        *([f"- {line}" for line in f.run_twice_details] or ["- none"]),
        "",
        "Events delivered twice (the same event id published again by an outbox relay that died between its XADD and"
        " marking the row sent; every consumer de-duplicates by event id, so these are copies, not second runs): "
        + (", ".join(f"`{k}` {v}" for k, v in sorted(f.delivered_twice.items())) or "none") + ".",
        "",
        *RUN_TWICE_DIAGNOSIS,
        "",
        *REPORT_PATH_NOTES,
        "",
        *ROUTED_DELIVERY_NOTES,
        "",
        *OPENAPI_FUZZ_NOTES,
        "",
        *PLAUSIBILITY_NOTES,
        "",
        "Requeues (a lease that ended before its task; the task resumes from its checkpoint): "
        + (", ".join(f"{k} {v}" for k, v in sorted(f.requeues_by_reason.items())) or "none"),
        "",
        "## Kills and recovery",
        "",
        "| killed | times |", "|---|---|", *[f"| {k} | {v} |" for k, v in sorted(f.kills.items())],
        "",
        "| embedded server (`kill -9`) | answered again after |", "|---|---|",
        *[f"| {k} | {v} s |" for k, v in f.recovery_s.items()],
        "",
        f"Peak resident memory of every process together (servers, services, console, agents, this script): {f.peak_rss_mb} MB.",
        "",
        "## Hostile input",
        "",
        f"{f.hostile_submitted} hostile submissions through `cf:ingest` and {f.hostile_http_bodies} hostile bodies through",
        f"HTTP; `task.rejected` events: {f.hostile_rejected} (every one names its field; a 413 or 415 creates none).",
        "Problems by field: "
        + ", ".join(f"`{k}` {v}" for k, v in sorted(f.rejections_by_field.items())) + ".",
        "",
        "HTTP `POST /v1/tasks` with the same bodies, three HTTP-only ones and one `text/plain`: answers "
        + ", ".join(f"{k}: {v}" for k, v in sorted(f.http_answers.items())) + " (no 500, no dropped connection).",
        "",
        "Dead letters by reason: " + (", ".join(f"{k} {v}" for k, v in sorted(f.dead_letters_by_reason.items())) or "none")
        + " (`invalid` includes the copies intake writes for rejected submissions).",
        "",
        "## Forgeries (observed)",
        "",
        "Every process runs as its own Redis user (`shared/redis_acl.py`) and PostgreSQL role (`shared/pg_roles.py`), as under `cardflow up`.",
        "",
        "- a `task.succeeded` for a running (10-minute) task, XADDed with the matcher's credentials straight onto"
        f" `cf:events` (producer `intruder/1`), was believed by the views: **{_yes_no(f.forged_by_intruder_believed)}**"
        f" (Redis: {f.forgery_answers.get(EVENTS_STREAM + ' as intruder/1', 'not tried')}; only the gate may write `cf:events`)",
        "- the same onto the matcher's own stream `cf:events:matcher`, claiming producer `dispatcher/forged`:"
        f" believed: **{_yes_no(f.forged_as_dispatcher_believed)}**"
        f" (Redis: {f.forgery_answers.get(producer_stream('matcher') + ' as dispatcher/forged', 'not tried')}; the gate"
        " refuses and dead-letters it: `task.succeeded is owned by dispatcher; matcher may not write it`)",
        f"- an agent's Redis credentials could read another agent's inbox: **{_yes_no(f.agent_read_another_inbox)}** (NOPERM)",
        "",
    ]
    return "\n".join(lines)


RUN_TWICE_DIAGNOSIS = (
    "### What \"run twice\" was (diagnosed 2026-12-01)",
    "",
    "An earlier run of this script counted 1 task run twice in one of three runs. Both of its possible causes were"
    " real, and only one was a second run:",
    "",
    "- **A counting artefact.** The script counted `task.succeeded` events, not distinct event ids. Delivery is at"
    " least once: a relay killed (or whose Redis or PostgreSQL is killed) after its XADD and before it marks the rows"
    " sent publishes them again with the same ids. Such a copy counted as a second success (and a copied"
    " `lease.granted` as a double-leased GPU). Consumers de-duplicate by id, so nothing ran twice. Fixed in the count.",
    "- **A real double execution, which that count could not see.** `bench/chaos.py --server-kills 2` reproduced it:"
    " PostgreSQL killed, the leader lost its lock and stopped; 16 s later its successor's first expiry sweep expired a"
    " lease whose agent had reported a clean finish (the report sat pending in `cf:reports`, unread through the"
    " gap); the task was requeued and ran again, and the late finish was refused as `lease_ended`. With only one"
    " `task.succeeded` the old count missed it; the count now reads the agents' finish reports too. Fixed in the"
    " dispatcher: a known outage of the report path (a takeover, Redis or PostgreSQL unreachable) holds expiries back"
    " and gives the leases it covered a TTL plus the claim delay afterwards (`shared/leasing/outage.py`), and a"
    " clean finish refused only because its lease expired ends the task instead of a rerun"
    " (`shared/leasing/late_report.py`); tests: `tests/reliability/test_report_path_outage.py`,"
    " `tests/unit/dispatcher/test_outage.py`, `tests/unit/test_chaos_tally.py`.",
)


REPORT_PATH_NOTES = (
    "### Outages of the report path and report storms (tested, not measured by this script)",
    "",
    '- A run that finishes while Redis is down (killed for 30 s, ten lease TTLs) is neither expired nor run '
    "again, and is charged until its end as the agent saw it — also when the run's last heartbeat is applied "
    'after the end (it counts from when it reached `cf:reports`, by its entry id, not from when the dispatcher '
    'read it; '
    '`tests/integration/dispatcher/test_dispatcher_leases.py::test_a_run_whose_reports_are_read_late_is_charged_until_it_ended_not_until_they_were_read`; '
    'before, such a heartbeat billed the run up to the moment it was applied, which flaked the outage test '
    'about once in six runs; and a heartbeat the agent could not write is dropped rather than written after '
    "the outage, when it would arrive after the run's end: `tests/unit/agent/test_agent_reporter.py`): "
    '`tests/reliability/test_report_path_outage.py` (live: whole system, durable Redis killed with `kill -9` '
    'and restarted by the embedded-server watch). A clean finish that arrives after its lease expired (an '
    'outage the dispatcher could not see) ends the task with that run, not a rerun (same file).',
    "- A service started while its Redis stalls (frozen with SIGSTOP for 7 s, longer than redis-py's 5 s "
    "socket timeout) waits for it and then works: each step of a subscriber's start (creating its consumer "
    "group, FastStream's own start) is tried again after a growing pause while Redis does not answer "
    "(`shared/delivery/faststream_glue.py`, `until_redis_answers`). Before, the start's "
    '`redis.exceptions.TimeoutError` ended the service (a dispatcher died this way in a parallel `make test` '
    'at load 9): `tests/reliability/test_redis_stall_at_start.py` (intake; every service checked by hand).',
    "- A misbehaving agent sending 3,000 valid checkpoint reports for one lease as fast as Redis takes them: at most"
    " `1 + burst + elapsed / gap` of them are applied (policy section `reports`), the rest are refused `rate_limited`"
    " (counted, one `rejected_reports` row per lease and batch) or coalesced; an honest agent at time scale 600 runs"
    " an unrelated task to the end meanwhile: `tests/reliability/test_report_storm.py`. This script does not yet"
    " measure the dispatcher's lag during such a storm."
    " While the dispatcher is behind on `cf:reports` (its oldest unread report waits longer than half a lease TTL: a storm on a loaded machine) the backlog counts as a report-path outage: no lease expires for silence, since its heartbeat may be in the backlog, and once caught up each covered lease gets a TTL plus the claim delay (`shared/leasing/outage.py`; a clean-clone `make test` on a loaded machine once expired the storm agent's lease behind its own unread heartbeats).",
    "- A valid token proves which run a report is about, not that the run did what it says. The issue's "
    "\"succeeded, output 1e9 after 20 s of a 2-hour task\" is now judged: see [Success plausibility and output "
    "bounds](#success-plausibility-and-output-bounds); `tests/reliability/test_implausible_success.py` "
    "replays it on the whole system.",
    "- Every entry a hypothesis fuzz pass puts on `cf:ingest` (the issue's hostile inputs first) becomes one"
    " `task.submitted` or one `task.rejected` naming its fields, with a live intake:"
    " `tests/reliability/test_fuzz_live_ingest.py`.",
)


ROUTED_DELIVERY_NOTES = (
    '### Type-routed delivery (tested, not measured by this script)',
    '',
    "Readiness, the matcher and the ledger's alerter read their own streams `cf:routed:<group>`, which the gate fills in the same MULTI as `cf:events` with only the types each folds (docs/delivery.md#type-routed-streams). Against real Redis and PostgreSQL (`tests/integration/readiness/test_readiness_routed.py`): each event reaches `cf:events` and exactly the routed streams of its type, in the same order; readiness stopped while an event is forwarded applies it once restarted, from its routed stream (it has no group on `cf:events`); an entry a dead instance read from the routed stream and never acked is claimed and applied once. A service whose parsed types are not all routed to it refuses to start (`tests/unit/test_event_routing.py`); only the gate's Redis user may append a routed stream (`tests/reliability/test_trust_boundaries.py`).",
)


OPENAPI_FUZZ_NOTES = (
    "### The served HTTP API under schemathesis (tested, not measured by this script)",
    "",
    "`tests/reliability/test_openapi_fuzz.py` (in `make test`, about 2 minutes; alone:"
    " `.venv/bin/python -m pytest tests/reliability/test_openapi_fuzz.py -q`) starts every service and `cardflow"
    " console` as its own Redis user and PostgreSQL role over the real Redis, PostgreSQL and S3, loads"
    " `/openapi.json` from it and, with an admin token, sends every `/v1` operation (about 70) schemathesis cases"
    " that fit the schema and cases that do not, plus the issue's hostile inputs as explicit examples: NaN,"
    " Infinity, 1e400, NUL, lone surrogates, 100,000-deep nesting, two megabytes, a binary body and a `text/plain`"
    " body on every operation that takes a body, and NUL / surrogate / NaN / 5,000-character values in every path"
    " and query parameter. Each answer must be no 5xx, a status code the schema documents for that operation, the"
    " documented content type, and a body that validates against the documented schema; every problem is listed.",
    "",
    "Its first run found, all fixed with the failing case kept (`tests/reliability/test_openapi_fuzz_findings.py`):"
    " 500s on every route whose body FastAPI parses (NaN or an unpaired surrogate echoed into the 422 broke its JSON"
    " encoding; binary bodies), 500s for NUL in paths and queries (reached PostgreSQL), 500s for dead-letter ids that"
    " are no Redis stream id, a 500 for a board-snapshot reason holding a control character (S3 metadata header),"
    " dropped kept-alive connections after each 500, routes answering a 422 as a sentence where the schema promises"
    " the validation list, and 401/403/404/413/415 answers the schema did not document. The fix is one guard in"
    " front of every `/v1` route (`services/console/request_guard.py`). It also found that the embedded"
    " PostgreSQL's role set-up failed on a schema made before the roles existed (a serial column's sequence),"
    " kept in `tests/reliability/test_pg_roles.py`.",
)


PLAUSIBILITY_NOTES = (
    "### Success plausibility and output bounds",
    "",
    "Two rules of the policy's `reports` section, applied by the dispatcher's report fold after fencing "
    "(`shared/leasing/plausibility.py`), both in the AGENT's time (real seconds x the time scale the agent "
    "registered; a simulated x600 agent that runs a 2-hour task in 12 s ran it for 2 hours):",
    "",
    "- **Too early** (`reports.min_success_share`, default 0.05): a clean finish after less than that share "
    "of the task's estimated runtime on the lease's card type is ACCEPTED — the task ends `succeeded`; "
    "refusing it would rerun the task on the word of the same agent — but FLAGGED "
    "`implausibly_early_success`, with a sentence saying by how much. A run resumed from a checkpoint is not "
    "judged (earlier runs did part of the work and the dispatcher keeps no total of their times). 0 turns the"
    " rule off.",
    "- **Too much output** (`reports.max_output_units_per_gpu_hour`, default 1e8, per output unit in "
    "`reports.max_output_units_per_gpu_hour_by_unit`, default `tokens: 1e9`): a run may claim that many units"
    " per GPU-hour it ran, "
    "counting at least its estimate's GPU-hours (so an early claim is judged against the run it was planned "
    "to be). Beyond that the claim is REFUSED with reason `output_out_of_bounds`, never clamped: a progress "
    "report is applied without its output (one counted `rejected_reports` row per lease and batch); a success"
    " ends the task `succeeded`, flagged `output_out_of_bounds`, with no output "
    "(`task.succeeded.claimed_output_units` keeps the claim). 0 turns the bound off.",
    "",
    "A flagged success carries its flags on `task.succeeded` (`flags`, `flag_detail`) and on the dispatcher's"
    " task row (`dispatcher.tasks.flags`), raises a `flagged_success` alert to the policy's sinks, shows as "
    "`succeeded_flagged` with its sentence in `cardflow status TASK` and the console (中文: 已完成，但成功报告被标记待复核), "
    "and is told in `cardflow audit why`. **Its output is not counted**: the ledger moves the run's output "
    "(checkpoints included) to `ledger.flagged_output`, so no total, round report or cost per output unit "
    "includes it, and `cardflow review` and the round report (`cardflow round show`, the console's /rounds/{id}, "
    "report.html/.csv/.json) list it apart (\"flagged successes (output not counted)\"). The task's"
    " GPU time is charged as usual, so a flagged task raises its project's cost per output. "
    'A person who checked the output clears the flag with `cardflow review clear-flag TASK --reason TEXT`'
    ' (or `POST /v1/review/{task_id}/clear-flag`; role reviewer or admin, a listed reviewer of the projec'
    "t, never the task's submitter): a `task.flag_cleared` event with the actor and reason (told by `card"
    'flow audit why` and `cardflow audit log`); the ledger then counts the held-back output as final outp'
    'ut from that moment (the round open then counts it), once — a redelivered or repeated clear moves no'
    'thing; a claim refused as out of bounds stays uncounted. The flagged row stays in `ledger.flagged_ou'
    'tput` as the record (`cleared_at`, `cleared_by`, `clear_reason`).',
    "",
    "Honest simulated agents never trip either rule: a fresh simulated run lasts exactly its estimate in the "
    "agent's time and reports 100 units per estimated second (`tests/e2e/test_up_demo.py` asserts the demo "
    "raises no `flagged_success`). Tests: `tests/unit/dispatcher/test_report_plausibility.py` (tables: the "
    "issue's case, the share's edge, x600 agents, resumed runs, the bound per GPU and per unit, progress "
    "claims, late reconciled finishes), `tests/unit/ledger/test_ledger_batch.py`, "
    "`tests/unit/test_projection.py`, `tests/reliability/test_implausible_success.py` (live: a x10 agent's "
    "lease, 20 s of its time, `report.finished` with 1e9 and the real token → flagged twice, output refused, "
    "alert in `ledger.alerts`, nothing in `ledger.task_output`, listed by the review, view and story say so).",
)


def _yes_no(value: bool | None) -> str:
    return "not measured" if value is None else ("yes" if value else "no")
