"""The demo's fleet and workload, as plain data (pure: no I/O; the clock is the caller's).

`build_workload(run_id)` returns what `cardflow up --demo` sends through `cf:ingest`, like an
upstream system would:

- a mixed batch: every priority class, four projects, small jobs the matcher sends to the cheaper
  L40S cards and big 80 GB-per-GPU jobs that only H100s can run;
- three tasks whose inputs appear later: an S3 object, an S3 prefix completed by its `_READY`
  marker, and a dataset version announced by a `data.ready` entry (`data_actions`, with delays);
- one impossible task (200 GB of VRAM per GPU: no card type has that much) and one invalid
  submission (several problems at once), so the view shows both kinds of "no";
- two submission templates (`DEMO_TEMPLATES`): the big llm jobs and the llm evals are sent as
  `template: NAME` plus only the fields the template does not give (`wire_form`), so intake merges
  and pins them (`cardflow status TASK` shows `demo-llm-h100@1`);
- governance: the demo's policy (`shared.config.demo_policy`) makes core work above 20 GPU-hours
  wait for a reviewer, so `finetune-7b` and `finetune-13b-rush` wait in `held` (not approved);
  `DEMO_REVIEWS` says what the demo's reviewer decides (approve the first, deny the second, each
  with a reason); `stuck-dataloader` reports 0% GPU utilisation (`sim_util_pct: "0"`), so idle
  reclaim takes its GPUs back, twice, and then holds it for a person.

`demo_time_scale(...)` picks the agents' `--time-scale` so the whole workload finishes within
`target_s` real seconds on the demo fleet.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from shared.cards import Catalog
from shared.cards.matching import MatchRequest, rank_cards
from shared.events.intake import ReviewDecision

DEMO_BUCKET = "cardflow-demo"
UTIL_LABEL, IDLE_UTIL = "sim_util_pct", "0"
"""The submission label the simulated agent reports as GPU utilisation (`services.agent.sim_plan`), and an idle value."""


@dataclass(frozen=True)
class DemoQuota:
    """A quota account the demo grants before it submits (so the console's quota pages have data)."""

    project: str
    gpu_hours: float
    valid_days: float  # from now
    alert_lead_days: float = 15.0

    @property
    def account_id(self) -> str:
        return f"demo-{self.project}"


DEMO_QUOTAS: tuple[DemoQuota, ...] = (
    DemoQuota("llm", 20_000, 90),
    DemoQuota("vision", 5_000, 12),  # expires within its 15-day alert lead: the console's banner shows it
    DemoQuota("research", 10_000, 60),
)
"""Generous amounts (no demo task is held on quota); `speech` has no account (unlimited)."""


@dataclass(frozen=True)
class DemoAgent:
    """One simulated GPU host of the demo fleet (`cardflow agent --id ID --sim CARDxN`)."""

    agent_id: str
    card_type: str
    gpus: int

    @property
    def sim(self) -> str:
        return f"{self.card_type}x{self.gpus}"


DEMO_FLEET: tuple[DemoAgent, ...] = (
    DemoAgent("h100-a", "H100", 8),
    DemoAgent("h100-b", "H100", 8),
    DemoAgent("l40s-a", "L40S", 8),
)
"""Two card types: H100 (80 GB, fast, dear) and L40S (48 GB, slower, far cheaper per job)."""


@dataclass(frozen=True)
class DemoTemplate:
    """A submission template the demo writes (as `system:demo`, once per data dir) and submits through."""

    name: str
    description: str
    defaults: Mapping[str, Any]

    def text(self) -> str:
        """The template document (`templates/<name>.yaml`)."""
        import yaml

        body = {"description": self.description, "defaults": dict(self.defaults)}
        return f"# the demo's template (cardflow up --demo)\n{yaml.safe_dump(body, sort_keys=False, width=100)}"


DEMO_TEMPLATES: tuple[DemoTemplate, ...] = (
    DemoTemplate("demo-llm-h100", "the llm team's big jobs: a whole H100 node, 80 GB per GPU, checkpoints every 20 min",
                 {"project": "llm", "gpus": 8, "min_vram_gb": 80, "profile": "compute",
                  "checkpoint": {"interval_minutes": 20}, "output_unit": "samples"}),
    DemoTemplate("demo-llm-eval", "the llm team's evals: memory-bound, small, on whatever card is cheapest",
                 {"project": "llm", "profile": "memory", "output_unit": "samples"}),
)  # fmt: skip


@dataclass(frozen=True)
class DemoReview:
    """What the demo's reviewer (token `DEMO_REVIEWER`, role reviewer) decides about a task that waits
    for approval, `after_s` real seconds after the demo first sees it waiting."""

    name: str
    decision: ReviewDecision
    reason: str
    after_s: float = 3.0


DEMO_REVIEWS: tuple[DemoReview, ...] = (
    DemoReview("finetune-7b", ReviewDecision.APPROVE, "this round's deliverable; config and checkpoint plan checked"),
    DemoReview("finetune-13b-rush", ReviewDecision.DENY,
               "self-declared core, not a deliverable this round: resubmit it as standard"),
)


def wire_form(submission: Mapping[str, Any]) -> dict[str, Any]:
    """What the demo sends for `submission`: with a `template`, only the fields it does not give."""
    template = next((t for t in DEMO_TEMPLATES if t.name == submission.get("template")), None)
    if template is None:
        return dict(submission)
    return {key: value for key, value in submission.items() if template.defaults.get(key, _UNSET) != value}


_UNSET = object()


class DataActionKind(StrEnum):
    PUT_OBJECT = "put_object"  # upload an object (a single input, or a prefix's _READY marker)
    DATA_READY = "data_ready"  # XADD a data.ready entry for a dataset version to cf:ingest


@dataclass(frozen=True)
class DataAction:
    """Something the demo does `after_s` seconds after submitting, to make an input ready."""

    after_s: float
    kind: DataActionKind
    target: str  # s3://bucket/key for PUT_OBJECT, dataset@version for DATA_READY

    @property
    def dataset_version(self) -> tuple[str, str]:
        dataset, _, version = self.target.partition("@")
        return dataset, version


@dataclass(frozen=True)
class DemoWorkload:
    """What the demo submits: valid and impossible tasks, invalid submissions, delayed data."""

    run_id: str
    submissions: tuple[dict[str, Any], ...]
    invalid: tuple[dict[str, Any], ...]
    data_actions: tuple[DataAction, ...]
    impossible_key: str

    @property
    def keys(self) -> frozenset[str]:
        """Idempotency keys of every valid submission (the demo's tasks)."""
        return frozenset(s["idempotency_key"] for s in self.submissions)

    @property
    def to_run(self) -> tuple[dict[str, Any], ...]:
        """The submissions the demo expects to run to their end (not those its reviewer denies, nor the
        idle one, which is reclaimed and held): what the time scale is sized for."""
        denied = {review.name for review in DEMO_REVIEWS if review.decision is ReviewDecision.DENY}
        return tuple(s for s in self.submissions
                     if s["name"] not in denied and s["labels"].get(UTIL_LABEL) != IDLE_UTIL)


def build_workload(run_id: str, *, seed: int = 7, small_jobs: int = 18) -> DemoWorkload:
    """The demo workload; `run_id` makes its idempotency keys unique per run."""
    rng = random.Random(seed)
    later = _waiting_for_data(run_id)
    impossible = _task(run_id, "giant-moe", "research", "standard", gpus=8, hours=400, profile="compute",
                       min_vram_gb=200, scenario="exploration", labels={"demo": "impossible"})  # fmt: skip
    submissions = (*_big_jobs(run_id), *_small_jobs(run_id, rng, small_jobs), *later, impossible)
    return DemoWorkload(
        run_id=run_id,
        submissions=submissions,
        invalid=(_invalid(run_id),),
        data_actions=_data_actions(),
        impossible_key=impossible["idempotency_key"],
    )


def _task(run_id: str, name: str, project: str, priority_class: str, *, gpus: int, hours: float, profile: str,
          scenario: str, labels: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """The whole submission (with `template`: what intake resolves it to; `wire_form` is what is sent).

    `scenario` becomes the `scenario` label: rounds and the ledger report spend against output by it.
    """
    return {
        "idempotency_key": f"demo-{run_id}-{name}",
        "name": name,
        "project": project,
        "priority_class": priority_class,
        "gpus": gpus,
        "estimate_gpu_hours": hours,
        "profile": profile,
        "output_unit": "samples",
        "labels": {"scenario": scenario, **(labels or {})},
        **extra,
    }


def _big_jobs(run_id: str) -> list[dict[str, Any]]:
    """Jobs that need 80 GB per GPU: only H100 qualifies. Checkpointing, so preemption resumes."""
    every_20_min = {"interval_minutes": 20}
    return [
        _task(run_id, "finetune-7b", "llm", "core", gpus=8, hours=96, profile="compute", min_vram_gb=80,
              scenario="llm-training", priority=10, checkpoint=every_20_min, template="demo-llm-h100"),
        _task(run_id, "pretrain-ablation", "llm", "standard", gpus=8, hours=64, profile="compute", min_vram_gb=80,
              scenario="llm-training", checkpoint=every_20_min, template="demo-llm-h100"),
        _task(run_id, "vision-sweep-a", "vision", "standard", gpus=4, hours=24, profile="balanced", min_vram_gb=64,
              scenario="vision-search"),
        _task(run_id, "vision-sweep-b", "vision", "standard", gpus=4, hours=24, profile="balanced", min_vram_gb=64,
              scenario="vision-search"),
        _task(run_id, "rl-rollouts", "research", "opportunistic", gpus=4, hours=16, profile="memory", min_vram_gb=72,
              scenario="exploration"),
        # core and big: both wait for the demo's reviewer (DEMO_REVIEWS: the first is approved, this one denied)
        _task(run_id, "finetune-13b-rush", "llm", "core", gpus=8, hours=160, profile="compute", min_vram_gb=80,
              scenario="llm-training", checkpoint=every_20_min, template="demo-llm-h100"),
        # its data loader hangs: GPUs at 0%, so idle reclaim takes them back (and holds it after two reclaims)
        _task(run_id, "stuck-dataloader", "research", "standard", gpus=1, hours=24, profile="memory", min_vram_gb=24,
              scenario="exploration", checkpoint=every_20_min, labels={UTIL_LABEL: IDLE_UTIL}),
    ]  # fmt: skip


def _small_jobs(run_id: str, rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Evals and data jobs that fit in 48 GB: the matcher picks the cheaper L40S for them."""
    kinds = [
        ("eval", "llm", "standard", "memory", "evaluation"),
        ("tokenize", "speech", "opportunistic", "balanced", "data-prep"),
        ("embed", "vision", "standard", "compute", "data-prep"),
        ("probe", "research", "opportunistic", "memory", "exploration"),
        ("hotfix-eval", "llm", "core", "memory", "evaluation"),
    ]
    jobs = []
    for n in range(count):
        kind, project, priority_class, profile, scenario = kinds[n % len(kinds)]
        gpus = rng.choice((1, 1, 2))
        template = {"template": "demo-llm-eval"} if project == "llm" else {}
        jobs.append(_task(run_id, f"{kind}-{n:02d}", project, priority_class, gpus=gpus,
                          hours=round(rng.uniform(0.8, 2.4) * gpus, 2), profile=profile, scenario=scenario,
                          min_vram_gb=rng.choice((16, 24, 40)), priority=rng.randint(0, 5), **template))  # fmt: skip
    return jobs


def _waiting_for_data(run_id: str) -> list[dict[str, Any]]:
    return [
        _task(run_id, "train-on-shard-07", "vision", "standard", gpus=2, hours=3, profile="compute", scenario="vision-search",
              min_vram_gb=24, inputs=[f"s3://{DEMO_BUCKET}/raw/shard-07.parquet"]),
        _task(run_id, "features-2024-06", "research", "standard", gpus=1, hours=1.5, profile="memory", scenario="data-prep",
              inputs=[f"s3://{DEMO_BUCKET}/features/2024-06/"]),
        _task(run_id, "tokenize-web-crawl", "llm", "opportunistic", gpus=2, hours=2.5, profile="balanced", scenario="data-prep",
              inputs=[{"dataset": "web-crawl", "version": "2024-06-01"}]),
    ]  # fmt: skip


def _data_actions() -> tuple[DataAction, ...]:
    return (
        DataAction(8.0, DataActionKind.PUT_OBJECT, f"s3://{DEMO_BUCKET}/raw/shard-07.parquet"),
        DataAction(12.0, DataActionKind.PUT_OBJECT, f"s3://{DEMO_BUCKET}/features/2024-06/_READY"),
        DataAction(16.0, DataActionKind.DATA_READY, "web-crawl@2024-06-01"),
    )


def _invalid(run_id: str) -> dict[str, Any]:
    """A submission with several problems at once: intake lists every one of them."""
    return {
        "idempotency_key": f"demo-{run_id}-broken",
        "name": "",
        "project": "vision team",
        "priority_class": "urgent",
        "gpu": 2,
        "estimate_gpu_hours": 3,
        "profile": "compute",
    }


# ---- time scale -------------------------------------------------------------------------------


def estimated_busy_s(submissions: Sequence[Mapping[str, Any]], fleet: Sequence[DemoAgent], catalog: Catalog) -> dict[str, float]:
    """Per card type: GPU-seconds of the work the matcher would send there, spread over its GPUs.

    A rough lower bound of the makespan in simulated seconds (each task on its cheapest card).
    """
    gpus = {card: sum(a.gpus for a in fleet if a.card_type == card) for card in {a.card_type for a in fleet}}
    busy = dict.fromkeys(gpus, 0.0)
    for submission in submissions:
        match = rank_cards(_match_request(submission), catalog, available_types=gpus)
        if match.chosen is not None:
            busy[match.chosen.card_type] += match.chosen.runtime_s * submission["gpus"] / gpus[match.chosen.card_type]
    return busy


def demo_time_scale(submissions: Sequence[Mapping[str, Any]], fleet: Sequence[DemoAgent], catalog: Catalog,
                    *, target_s: float = 30.0) -> float:  # fmt: skip
    """The `--time-scale` that makes the busiest card type's work take about `target_s` real seconds."""
    busiest = max(estimated_busy_s(submissions, fleet, catalog).values(), default=0.0)
    return max(1.0, round(busiest / target_s))


def _match_request(submission: Mapping[str, Any]) -> MatchRequest:
    return MatchRequest(
        gpus=submission["gpus"],
        min_vram_gb=submission.get("min_vram_gb") or 0.0,
        estimate_gpu_hours=submission["estimate_gpu_hours"],
        profile=submission["profile"],
    )
