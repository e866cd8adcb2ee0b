"""The chart's Grafana dashboard: rendered only when asked for, every panel queries a gauge the operator really
serves (read from a RunCollector holding a status with accounting), and every query is valid PromQL
(`promtool check rules`, each query wrapped as a recording rule)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from grpo_operator.api.status import GRPORunStatus, Phase, Reason, RunAccounting
from grpo_operator.edges import opmetrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helm import by_kind, template
from tests.support.promtool import PromtoolUnavailable, check_rules, promtool

pytestmark = pytest.mark.integration


def _served() -> set[str]:
    collector = opmetrics.RunCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    accounting = RunAccounting(
        updated_at="2026-12-01T00:00:00Z", gpu_hours=1.0, goodput=0.5, time_to_first_rollout_seconds=60
    )
    collector.update("ml", "r", GRPORunStatus(phase=Phase.RUNNING, reason=Reason.RUNNING, accounting=accounting))
    return {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_no_dashboard_unless_enabled() -> None:
    assert not [c for c in by_kind(template(), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]


def test_the_dashboard_panels_query_gauges_the_operator_serves_in_valid_promql(tmp_path: Path) -> None:
    [config_map] = by_kind(template("metrics.grafanaDashboard.enabled=true"), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["grpo-runs.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert {"GPU-hours held", "Lost GPU-hours", "Goodput", "Time to first rollout"} <= {
        p["title"] for p in dashboard["panels"]
    }
    metrics = {m for e in exprs for m in re.findall(r"\b(grpo_[a-z_]+)\b", e)}
    assert metrics and metrics <= _served(), metrics - _served()
    try:
        tool = promtool()
    except PromtoolUnavailable as exc:
        pytest.skip(str(exc))
    rules = [{"record": f"dashboard:panel{i}", "expr": e.replace("$namespace", ".*")} for i, e in enumerate(exprs)]
    result = check_rules(tool, {"groups": [{"name": "dashboard", "rules": rules}]}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
