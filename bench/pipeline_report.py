"""Results of `bench/pipeline.py`: value types, per-stage lags, the rich tables and the docs section."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

DOC = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"
START, END = "<!-- pipeline:start -->", "<!-- pipeline:end -->"
TARGET_PER_S = 1_000

STAGES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("XADD to cf:ingest -> task.submitted committed", "intake", ("sent",), "task.submitted"),
    ("task.submitted committed -> on cf:events", "intake's outbox relay + gate", ("task.submitted",), "task.submitted@stream"),
    ("task.submitted on stream -> task.readiness_changed committed", "readiness", ("task.submitted@stream",),
     "task.readiness_changed"),
    ("task.submitted on stream -> task.matched committed", "matcher", ("task.submitted@stream",), "task.matched"),
    ("task.readiness_changed committed -> on cf:events", "readiness's outbox relay + gate", ("task.readiness_changed",),
     "task.readiness_changed@stream"),
    ("task.matched committed -> on cf:events", "matcher's outbox relay + gate", ("task.matched",), "task.matched@stream"),
    ("ready + matched on stream -> lease.granted committed", "dispatcher (cycle)",
     ("task.readiness_changed@stream", "task.matched@stream"), "lease.granted"),
    ("lease.granted committed -> grant command on agent inbox", "dispatcher's outbox relay", ("lease.granted",),
     "command@stream"),
    ("grant command on inbox -> report.finished on cf:reports", "agent (includes the run itself)", ("command@stream",),
     "finished@stream"),
    ("report.finished on cf:reports -> task.succeeded committed", "dispatcher (reports)", ("finished@stream",),
     "task.succeeded"),
    ("lease.released committed -> last usage.recorded committed", "ledger", ("lease.released",), "usage.recorded"),
    ("lease.granted committed -> lease.released committed", "a GPU's hold per task (the run is only a part)",
     ("lease.granted",), "lease.released"),
)  # fmt: skip
"""(label, who, the points whose latest starts the stage, the point that ends it). A point is an
event type (its `occurred_at`: when the owner committed it), `<type>@stream` (when it landed on its
stream: the entry id's time), `sent` (the bench's XADD), `command` / `finished` (the lease's grant
command and finished report)."""


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p99: float
    max: float
    count: int


@dataclass(frozen=True)
class RawResult:
    messages: int
    throughput: float  # messages/s, XADD -> XREADGROUP -> XACK, flat out
    round_trip: Percentiles  # seconds, one message at a time


@dataclass(frozen=True)
class PhaseResult:
    project: str
    offered_rate: float
    sent: int
    done: int
    send_rate: float
    wall_s: float
    throughput: float  # tasks done / (last done - first sent)
    steady_throughput: float  # tasks done per second in the second half of the send window
    submit_to_lease: Percentiles
    stages: list[tuple[str, str, Percentiles]]
    cpu: dict[str, float]  # CPU seconds per process during the phase
    cpu_window_s: float
    mean_gpus_leased: float  # sum of lease holds / (last done - first sent)


def percentiles(values: Sequence[float]) -> Percentiles:
    ordered = sorted(values)
    if not ordered:
        return Percentiles(math.nan, math.nan, math.nan, 0)

    def at(share: float) -> float:
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]

    return Percentiles(at(0.5), at(0.99), ordered[-1], len(ordered))


def stage_lags(done: Mapping[str, Mapping[str, float]], sent: Mapping[str, float]) -> list[tuple[str, str, Percentiles]]:
    """p50/p99 of each stage's lag over the tasks that have both ends."""
    rows = []
    for label, who, starts, end in STAGES:
        lags = []
        for task, times in done.items():
            points = {"sent": sent[task], **times}
            if end in points and all(s in points for s in starts):
                lags.append(points[end] - max(points[s] for s in starts))
        rows.append((label, who, percentiles(lags)))
    return rows


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:,.0f}"


def print_results(console: Console, raw: RawResult, phases: Sequence[PhaseResult], profile: str | None,
                  about: Mapping[str, str]) -> None:  # fmt: skip
    for key in ("fleet", "task", "machine", "load"):
        console.print(about[key])
    console.print(f"raw redis-py stream round trip: {raw.throughput:,.0f} msg/s flat out; one at a time "
                  f"p50 {raw.round_trip.p50 * 1000:.2f} ms, p99 {raw.round_trip.p99 * 1000:.2f} ms")  # fmt: skip
    headline = Table(title="submit -> lease -> done")
    for column in ("offered /s", "sent /s", "tasks", "done", "throughput /s", "steady /s", "submit->lease p50 ms", "p99 ms"):
        headline.add_column(column, justify="right")
    for p in phases:
        headline.add_row(*_phase_row(p))
    console.print(headline)
    for p in phases:
        console.print(_stage_table(p))
        console.print(_cpu_table(p))
    for line in analysis(phases, int(about.get("cores", "2")), about):
        console.print(line)
    if profile:
        print(profile)


def _phase_row(p: PhaseResult) -> list[str]:
    return [f"{p.offered_rate:,.0f}", f"{p.send_rate:,.0f}", f"{p.sent:,}", f"{p.done:,}", f"{p.throughput:,.0f}",
            f"{p.steady_throughput:,.0f}", _ms(p.submit_to_lease.p50), _ms(p.submit_to_lease.p99)]  # fmt: skip


def _stage_table(p: PhaseResult) -> Table:
    table = Table(title=f"stage lags at {p.offered_rate:,.0f}/s offered (ms, from event timestamps)")
    for column in ("stage", "who", "p50", "p99", "max"):
        table.add_column(column, justify="left" if column in ("stage", "who") else "right", overflow="fold")
    for label, who, lag in p.stages:
        table.add_row(label, who, _ms(lag.p50), _ms(lag.p99), _ms(lag.max))
    return table


def _cpu_table(p: PhaseResult) -> Table:
    table = Table(title=f"CPU per process at {p.offered_rate:,.0f}/s offered ({p.cpu_window_s:.0f} s, 100% = one core)")
    for column in ("process", "CPU s", "share of one core", "CPU ms per task"):
        table.add_column(column, justify="left" if column == "process" else "right")
    for name, used in [*sorted(p.cpu.items(), key=lambda item: -item[1]), ("total", sum(p.cpu.values()))]:
        table.add_row(name, f"{used:.1f}", f"{used / p.cpu_window_s:.0%}", f"{used * 1000 / max(p.done, 1):.2f}")
    return table


def analysis(phases: Sequence[PhaseResult], cores: int, about: Mapping[str, str]) -> list[str]:
    """Sentences on where the time went, from the busiest phase's numbers."""
    if not phases:
        return []
    p = max(phases, key=lambda phase: phase.offered_rate)
    total = sum(p.cpu.values())
    per_task_ms = total * 1000 / max(p.done, 1)
    share = total / p.cpu_window_s / cores
    top = sorted(p.cpu.items(), key=lambda item: -item[1])[:4]
    slowest = max(p.stages[:-1], key=lambda row: row[2].p50 if not math.isnan(row[2].p50) else -1)
    lag = {who: stage.p50 for _, who, stage in p.stages}
    relay, agent, reports = (lag["dispatcher's outbox relay"], lag["agent (includes the run itself)"],
                             lag["dispatcher (reports)"])  # fmt: skip
    hold = p.stages[-1][2]
    gpus, run_s = float(about.get("gpus", "nan")), float(about.get("task_seconds", "nan"))
    return [
        f"- At {p.offered_rate:,.0f}/s offered the system's processes used {share:.0%} of the machine's {cores} cores "
        f"({total / p.cpu_window_s:.0%} of one core) for {p.done:,} tasks: **{per_task_ms:.1f} ms of CPU per task** "
        f"summed over every process, so these {cores} cores cannot finish more than about "
        f"{cores * 1000 / per_task_ms:,.0f} tasks/s at this cost per task.",
        "- CPU per task by process: " + ", ".join(f"{name} {used * 1000 / max(p.done, 1):.2f} ms" for name, used in top)
        + f". Without the simulated fleet (the agents; on GPU hosts in production): "
        f"{(total - p.cpu.get('fleet', 0.0)) * 1000 / max(p.done, 1):.1f} ms per task.",
        f"- The longest stage (p50) is {slowest[0]} ({slowest[1]}): {_ms(slowest[2].p50)} ms — where tasks queue.",
        f"- GPUs leased on average: {p.mean_gpus_leased:,.0f} of {gpus:,.0f}. A lease holds its GPU {_ms(hold.p50)} ms "
        f"(p50) for a {run_s * 1000:,.0f} ms run: the grant command reaches the agent "
        f"{_ms(relay)} ms after the grant commits, the agent reports the end {_ms(agent)} ms after that, the "
        f"dispatcher commits it {_ms(reports)} ms later; the freed GPU then waits for the next cycle. "
        f"At that turnaround the fleet finishes at most about {gpus / hold.p50 if hold.p50 else math.nan:,.0f} tasks/s.",
    ]  # fmt: skip


# ---- JSON ----------------------------------------------------------------------------------------------


def summary(raw: RawResult, phases: Sequence[PhaseResult], about: Mapping[str, str]) -> dict[str, object]:
    """The run in numbers (`--json OUT`): one entry per offered rate, the raw Redis ceiling, the machine."""

    def number(value: float, digits: int = 1) -> float | None:
        return None if math.isnan(value) else round(value, digits)

    return {
        "rates": [
            {
                "offered": p.offered_rate, "throughput": number(p.throughput), "steady": number(p.steady_throughput),
                "p50_ms": number(p.submit_to_lease.p50 * 1000), "p99_ms": number(p.submit_to_lease.p99 * 1000),
                "cpu_ms_per_task": number(sum(p.cpu.values()) * 1000 / max(p.done, 1), 2),
                "cpu_ms_per_task_by_process": {name: round(used * 1000 / max(p.done, 1), 3)
                                               for name, used in sorted(p.cpu.items(), key=lambda item: -item[1])},
                "sent": p.sent, "done": p.done,
                "stage_lags_ms": [{"stage": label, "who": who, "p50": number(lag.p50 * 1000), "p99": number(lag.p99 * 1000)}
                                  for label, who, lag in p.stages],
            }
            for p in phases
        ],
        "raw_redis_msgs_per_s": round(raw.throughput),
        "machine": about.get("machine"), "load_before": about.get("load"), "fleet": about.get("fleet"),
    }  # fmt: skip


# ---- docs/BENCHMARKS.md --------------------------------------------------------------------------------


def write_doc(raw: RawResult, phases: Sequence[PhaseResult], profile: str | None, about: Mapping[str, str],
              command: str, notes: str = "") -> None:  # fmt: skip
    section = "\n".join([START, render_markdown(raw, phases, profile, about, command, notes), END])
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if START in text and END in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


def render_markdown(raw: RawResult, phases: Sequence[PhaseResult], profile: str | None, about: Mapping[str, str],
                    command: str, notes: str = "") -> str:  # fmt: skip
    best = max(phases, key=lambda p: p.steady_throughput, default=None)
    lines = [
        "## Pipeline: submit -> lease -> done, end to end",
        "",
        f"`{command}` on {about['machine']}; {about['fleet']}; tasks: {about['task']}. The services (gate included) run as "
        "separate processes with the embedded Redis, PostgreSQL and S3 on the same machine, all sharing its cores "
        f"({about['load']}).",
        "",
        f"Raw redis-py stream round trip on the same Redis, same run: **{raw.throughput:,.0f} messages/s** flat out "
        f"(XADD pipelined by 500 -> XREADGROUP 500 -> XACK); one message at a time p50 "
        f"{raw.round_trip.p50 * 1000:.2f} ms, p99 {raw.round_trip.p99 * 1000:.2f} ms.",
        "",
        "| offered /s | sent /s | tasks | done | throughput /s | steady /s | submit->lease p50 ms | p99 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        *("| " + " | ".join(_phase_row(p)) + " |" for p in phases),
        "",
    ]
    if best is not None:
        verdict = "reaches" if best.steady_throughput >= TARGET_PER_S else "misses"
        lines += [f"Headline: **{best.steady_throughput:,.0f} tasks/s** sustained — {verdict} the {TARGET_PER_S:,} tasks/s target.", ""]
    for p in phases:
        lines += [f"Stage lags at {p.offered_rate:,.0f}/s offered (ms, from the events' `occurred_at`):", "",
                  "| stage | who | p50 | p99 | max |", "|---|---|---:|---:|---:|",
                  *(f"| {label} | {who} | {_ms(l.p50)} | {_ms(l.p99)} | {_ms(l.max)} |" for label, who, l in p.stages), ""]  # fmt: skip
        top = sorted(p.cpu.items(), key=lambda item: -item[1])
        lines += [f"CPU during that phase ({p.cpu_window_s:.0f} s; 100% = one core; ms of CPU per finished task): "
                  + ", ".join(f"{name} {used / p.cpu_window_s:.0%} / {used * 1000 / max(p.done, 1):.2f} ms" for name, used in top),
                  ""]  # fmt: skip
    lines += ["Where the time goes:", "", *analysis(phases, int(about.get("cores", "2")), about), ""]
    if notes:
        lines += [notes, ""]
    if profile:
        lines += ["cProfile of the profiled service (cumulative):", "", "```", profile.strip()[:6000], "```"]
    return "\n".join(lines).rstrip()
