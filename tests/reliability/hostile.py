"""Hostile submissions as an upstream system could send them, each with the field it must be
rejected for. Payloads are JSON *text*, exactly as on the wire, so NaN, Infinity, NUL characters
and lone surrogates reach cardflow the way a hostile client writes them.

Shared by the reliability tests (cf:ingest and HTTP) and `bench/chaos.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

VALID: dict[str, Any] = {
    "name": "hostile-suite",
    "project": "proj-a",
    "priority_class": "standard",
    "gpus": 1,
    "estimate_gpu_hours": 0.01,
    "profile": "compute",
}


@dataclass(frozen=True)
class Hostile:
    """One hostile submission: a label, its JSON text, and the field a rejection must name."""

    label: str
    text: str
    field: str


def _with(label: str, field: str, **overrides: Any) -> Hostile:
    return Hostile(label, json.dumps({**VALID, "name": label, **overrides}), field)


def _raw(label: str, field: str, fragment: str) -> Hostile:
    """A valid submission with `"fragment"` (raw JSON text, e.g. `"gpus": NaN`) spliced in last."""
    body = json.dumps({**VALID, "name": label})
    return Hostile(label, body[:-1] + ", " + fragment + "}", field)


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


HOSTILE: tuple[Hostile, ...] = (
    _with("checkpoint every 1e-300 minutes", "checkpoint.interval_minutes", checkpoint={"interval_minutes": 1e-300}),
    _with("checkpoint every 30 seconds", "checkpoint.interval_minutes", checkpoint={"interval_minutes": 0.5}),
    _with("gpus 2^31", "gpus", gpus=2**31),
    _with("gpus 2^63", "gpus", gpus=2**63),
    _with("gpus 1e30", "gpus", gpus=1e30),
    _with("gpus true", "gpus", gpus=True),
    _with("gpus as text", "gpus", gpus="8"),
    _with("estimate 1e308", "estimate_gpu_hours", estimate_gpu_hours=1e308),
    _with("estimate true", "estimate_gpu_hours", estimate_gpu_hours=True),
    _with("a year and a day on one GPU", "estimate_gpu_hours", gpus=1, estimate_gpu_hours=24 * 367),
    _with("min_vram 1e308", "min_vram_gb", min_vram_gb=1e308),
    _with("deadline at the end of time", "deadline", deadline="9999-12-31T23:59:59Z"),
    _raw("estimate NaN", "estimate_gpu_hours", '"estimate_gpu_hours": NaN'),
    _raw("estimate Infinity", "estimate_gpu_hours", '"estimate_gpu_hours": Infinity'),
    _raw("estimate 1e400", "estimate_gpu_hours", '"estimate_gpu_hours": 1e400'),
    _raw("label NaN", "labels.team", '"labels": {"team": NaN}'),
    _raw("name with NUL", "name", '"name": "a\\u0000b"'),
    _raw("name lone surrogate", "name", '"name": "a\\ud800b"'),
    _raw("label with NUL", "labels.team", '"labels": {"team": "x\\u0000"}'),
    _raw("env value lone surrogate", "env.HOME", '"env": {"HOME": "\\udfff"}'),
    _raw("unknown key with NUL", "x\\u0000", '"x\\u0000": 1'),
    _with("nested 40 deep", "labels.team", labels={"team": _nested(40)}),
    _with("command of 100,000 characters", "command", command="x" * 100_000),
    _with("argv of 5,000 items", "command", command=["x"] * 5_000),
    _with("5,000 inputs", "inputs", inputs=[f"s3://bucket-a/k{i}" for i in range(5_000)]),
    _with("1,000 labels", "labels", labels={f"k{i}": "v" for i in range(1_000)}),
    _with("label value of 10,000 characters", "labels.team", labels={"team": "v" * 10_000}),
)
"""Every hostile submission of issue 15 (and a few more of the same kinds)."""


HTTP_HOSTILE: dict[str, bytes] = {
    **{h.label: h.text.encode("utf-8", "surrogatepass") for h in HOSTILE},
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "unclosed nesting": b"{" * 50_000,
    "binary": bytes(range(256)) * 4,
    "empty body": b"",
    "a JSON array": b"[1, 2, 3]",
    "a JSON string with NUL": b'"\\u0000"',
    "two megabytes": b'{"name": "' + b"x" * 2_000_000 + b'"}',
}
"""HTTP request bodies: every hostile submission as bytes on the wire, and what only HTTP can send."""


def a_valid(name: str) -> str:
    """A valid submission's JSON text."""
    return json.dumps({**VALID, "name": name})
