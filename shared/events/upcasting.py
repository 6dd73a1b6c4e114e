"""Upcasters: functions that rewrite an old event payload into the next schema version.

An event type's schema version goes up when its payload changes shape. The code then only
knows the newest shape; every older version is rewritten on parse by a chain of upcasters,
one per step (`from_version` -> `from_version + 1`), each a pure `dict -> dict` on `data`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class UpcastError(ValueError):
    """An event's schema version cannot be brought to the current one."""


class UpcasterRegistry:
    """Upcasters by (event type, version they read)."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, event_type: str, *, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator: `fn` turns `event_type`'s payload at `from_version` into `from_version + 1`."""

        def add(fn: Upcaster) -> Upcaster:
            key = (event_type, from_version)
            if key in self._steps:
                raise ValueError(f"an upcaster for {event_type} v{from_version} is already registered")
            self._steps[key] = fn
            return fn

        return add

    def has_step(self, event_type: str, from_version: int) -> bool:
        return (event_type, from_version) in self._steps

    def upcast(self, event_type: str, version: int, data: Any, *, to_version: int) -> Any:
        """`data` rewritten from `version` to `to_version` (the input is not modified)."""
        if version > to_version:
            raise UpcastError(
                f"{event_type} schema v{version} is newer than this code's v{to_version}; upgrade cardflow"
            )
        if version < 1:
            raise UpcastError(f"{event_type} schema version {version} is not a version (versions start at 1)")
        if version == to_version:
            return data
        data = copy.deepcopy(data)
        for step in range(version, to_version):
            fn = self._steps.get((event_type, step))
            if fn is None:
                raise UpcastError(f"no upcaster registered for {event_type} from schema v{step} to v{step + 1}")
            data = fn(data)
        return data


UPCASTERS = UpcasterRegistry()
"""The registry `parse_event` uses; `shared.events.upcasters` fills it."""


def upcaster(event_type: str, *, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register an upcaster in the default registry: `@upcaster("lease.renewed", from_version=1)`."""
    return UPCASTERS.register(event_type, from_version=from_version)
