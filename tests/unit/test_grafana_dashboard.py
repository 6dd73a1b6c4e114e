"""deploy/grafana/cardflow.json: an importable Grafana dashboard built only on metrics cardflow exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from faststream.redis.prometheus import RedisPrometheusMiddleware
from prometheus_client import REGISTRY, CollectorRegistry

import services.observability.metrics  # noqa: F401  (registers cardflow's metrics)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "cardflow.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exported_sample_names() -> set[str]:
    """Sample names of cardflow's metrics and of FastStream's Prometheus middleware."""
    faststream = CollectorRegistry()
    RedisPrometheusMiddleware(registry=faststream, app_name="any")
    names = set()
    for registry in (REGISTRY, faststream):
        for family in registry.collect():
            names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def dashboard_metric_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in exprs for name in re.findall(r"\b((?:cardflow|faststream)_[a-z_]+)", expr)}


def test_the_dashboard_uses_only_exported_metrics() -> None:
    used = dashboard_metric_names()

    assert len(used) >= 10
    assert used - exported_sample_names() == set()


def test_the_dashboard_is_importable() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [panel["id"] for panel in dashboard["panels"]]

    assert dashboard["uid"] and dashboard["title"] == "cardflow"
    assert len(ids) == len(set(ids))
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"] and all(target["expr"].strip() for target in panel["targets"]), panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
    covered = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for topic in ("allocated", "utilisation", "reason", "leases", "cycle", "lag", "dead letters", "quota"):
        assert topic in covered, topic
