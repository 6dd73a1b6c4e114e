"""One line per measure of an in-process A/B that alternates two sides round by round: the median of the per-round
differences (new - old) and in how many rounds the new side was lower. Shared by `bench/dispatcher_save_ab.py`
and `bench/readiness_batches.py`."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def paired_line(name: str, new: Sequence[float], old: Sequence[float], unit: str, digits: int, per: str) -> str:
    """`name: new - old per <per>, median <d> <unit>, new lower in k of n` over rounds paired in order."""
    differences = [a - b for a, b in zip(new, old, strict=True)]
    return (f"  {name}: new - old per {per}, median {statistics.median(differences):+.{digits}f} {unit},"
            f" new lower in {sum(d < 0 for d in differences)} of {len(differences)}")
