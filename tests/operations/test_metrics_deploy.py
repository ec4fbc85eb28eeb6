"""The dashboard, the alert rules and Prometheus's configuration in deploy/, checked by
structure: each loads, every query names only metrics agentloop exports (`METRICS`) or the
Temporal SDK's (those are checked on a live endpoint in `test_metrics.py`), every rule has what
Prometheus needs to evaluate and route it, and the compose file mounts them all."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from agentloop.runtime.metrics import METRICS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "agentloop.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
METRIC_NAME = re.compile(r"\b((?:agentloop|temporal)_[a-z_]+)\b")
SERIES_SUFFIX = re.compile(r"_(bucket|sum|count)$")
DURATION = re.compile(r"^\d+[smhd]$")


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    exprs = []
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["type"] and panel["targets"], panel.get("title")
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        for target in panel["targets"]:
            assert target["refId"] and target["expr"], panel["title"]
            exprs.append(target["expr"])
    return exprs


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def named_metrics(exprs: list[str]) -> set[str]:
    """The metrics `exprs` query, a histogram by its own name (not its series')."""
    return {SERIES_SUFFIX.sub("", name) for expr in exprs for name in METRIC_NAME.findall(expr)}


def dashboard_temporal_metrics() -> set[str]:
    return {name for name in named_metrics(dashboard_exprs()) if name.startswith("temporal_")}


def test_the_dashboard_queries_only_metrics_we_export() -> None:
    named = named_metrics(dashboard_exprs())
    ours = {name for name in named if name.startswith("agentloop_")}
    exported = {metric.exported for metric in METRICS.values()}
    assert ours <= exported, ours - exported
    # Every metric of ours has a panel, and the SDK's worker metrics are shown too.
    assert ours == exported, exported - ours
    assert dashboard_temporal_metrics()


def test_every_alert_rule_has_an_expression_a_duration_and_labels() -> None:
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} >= {
        "AgentloopUnknownWriteOpen",
        "AgentloopApprovalsWaiting",
        "AgentloopRunFailureRate",
    }
    exported = {metric.exported for metric in METRICS.values()}
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert DURATION.match(rule["for"]), rule["alert"]
        assert rule["labels"].get("severity"), rule["alert"]
        assert rule["annotations"].get("summary"), rule["alert"]
        assert named_metrics([rule["expr"]]) <= exported, rule["alert"]
    [unknown] = [r for r in rules if r["alert"] == "AgentloopUnknownWriteOpen"]
    assert "agentloop_unknown_writes_open" in unknown["expr"] and unknown["for"] == "1h"
    [approvals] = [r for r in rules if r["alert"] == "AgentloopApprovalsWaiting"]
    assert 'agentloop_oldest_wait_seconds{kind="approval"}' in approvals["expr"]


def test_prometheus_scrapes_the_workers_port_and_loads_the_rules() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    [job] = config["scrape_configs"]
    [target] = job["dns_sd_configs"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    worker_port = services["worker"]["environment"]["AGENTLOOP_METRICS_PORT"]
    assert (target["names"], target["port"]) == (["worker"], int(worker_port))
    assert "./deploy/prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
    mounted = services["grafana"]["volumes"]
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in mounted
    provisioning = DEPLOY / "grafana" / "provisioning"
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "agentloop.yml").read_text())[
        "providers"
    ]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
