"""Constrained scalar types shared by event payloads, reports and commands.

Naming the constraint once (`EntityId`, `Fraction`, `GpuIndices`) keeps every payload's JSON
Schema saying the same thing about the same kind of value.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

EntityId = Annotated[str, Field(min_length=1, max_length=200)]
"""An id of a task, lease, node, agent, project, quota account or round."""

Detail = Annotated[str, Field(max_length=2000)]
"""A human sentence explaining a machine reason, printed verbatim by the console."""

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
"""A share between 0 and 1 inclusive."""

NonNegative = Annotated[float, Field(ge=0.0)]
Positive = Annotated[float, Field(gt=0.0)]

FencingToken = Annotated[int, Field(ge=1)]
"""Monotonic per GPU pool; a report or command with an older token than the lease's is stale."""


def _distinct_sorted(indices: tuple[int, ...]) -> tuple[int, ...]:
    if len(set(indices)) != len(indices):
        raise ValueError("each GPU index at most once")
    return tuple(sorted(indices))


GpuIndices = Annotated[
    tuple[Annotated[int, Field(ge=0)], ...], Field(min_length=1), AfterValidator(_distinct_sorted)
]
"""Distinct GPU indices on one node, in ascending order."""
