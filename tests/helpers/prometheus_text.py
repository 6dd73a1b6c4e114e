"""Reading a Prometheus text exposition in tests: samples by name, summed values by labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Metric family name and sample name (`_total`, `_count`, ...) -> [(labels, value)] of a Prometheus
    text exposition."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        found.setdefault(family.name, [])
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for sample_labels, v in found.get(name, []) if labels.items() <= sample_labels.items())
