"""The Grafana dashboard only uses metrics a live server exports, and is well-formed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from server.config import load_config
from tests.ops.conftest import Ops, sample_names

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "tierstore.json"
METRIC = re.compile(r"\btierstore_[a-z0-9_]+")
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows hold their panels
    return out


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", []) if t.get("expr")]


def family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def test_every_metric_on_the_dashboard_is_exported(ops: Ops) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = {name for expr in expressions(dashboard) for name in METRIC.findall(expr)}
    assert len(used) >= 30, sorted(used)
    # The compose stack scrapes with `[metrics] per_bucket` on; an administrator's scrape shows the same.
    if any(name.startswith("tierstore_bucket_") for name in used):
        assert load_config(DEPLOY / "tierstore.toml").metrics_per_bucket, "the bucket panels need per_bucket"
    text = ops.metrics_text(admin=True)
    samples = sample_names(text)
    families = {family(n) for n in samples}
    # Exact sample names: PromQL must say tierstore_x_total / _bucket exactly as exported.
    missing = sorted(name for name in used if name not in samples)
    hints = {
        name: f"family {family(name)!r} exported as {sorted(s for s in samples if family(s) == family(name))}"
        for name in missing
        if family(name) in families
    }
    assert not missing, f"dashboard metrics absent from /metrics: {missing}; {hints}"


def test_dashboard_covers_the_operating_areas() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = "\n".join(expressions(dashboard))
    for needle in (
        "histogram_quantile(0.99",
        "tierstore_s3_request_duration_seconds_bucket",
        "tierstore_s3_time_to_first_byte_seconds_bucket",
        "tierstore_s3_received_bytes_total",
        "tierstore_s3_sent_bytes_total",
        "tierstore_tier_capacity_bytes",
        "tierstore_tier_heat",
        "tierstore_domain_up",
        "tierstore_shards_healed_total",
        "tierstore_scrub_checked_blobs",
        "tierstore_lifecycle_transitions_total",
        "tierstore_mover_active",
        "tierstore_tier_power_watts",
        "tierstore_bucket_power_watts",
        "tierstore_lifecycle_transition_energy_joules_total",
    ):
        assert needle in exprs, needle


def test_dashboard_is_well_formed_for_provisioning() -> None:
    import yaml

    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "tierstore" and dashboard["title"]
    datasource = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid, panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/tierstore.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
