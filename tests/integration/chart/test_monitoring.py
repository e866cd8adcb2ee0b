"""The chart's alerts and the Grafana dashboard query only metrics the operator and the reward service really
export, with the labels they really carry: a renamed metric or label breaks this test, not a dashboard at 3 am.

The exported names come from the real collectors (the operator's registry after it has seen a run, the reward
service's own registry), rendered in the Prometheus text format and parsed back.
"""

from __future__ import annotations

import collections
import json
import re
from typing import Any

import pytest
import yaml
from grpo_operator.controller.reconciler import previous_status
from grpo_operator.edges import opmetrics
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from reward_service.metrics import ServiceMetrics

from tests.support.argocd import ARGOCD
from tests.support.helm import REPO, by_kind, template

DASHBOARD = REPO / "deploy" / "grafana" / "grpo-run-dashboard.json"
METRIC = re.compile(r"\b((?:grpo|reward_service)_[a-z0-9_]+)\b")


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Sample name -> label names, as a Prometheus server would store them after a scrape."""
    status = previous_status(yaml.safe_load((ARGOCD / "testdata" / "running.yaml").read_text()))  # as read from the API
    assert status is not None and status.metrics is not None
    metrics = opmetrics.OperatorMetrics()  # as the operator makes it at start
    metrics.runs.update("ml-team", "chart-monitoring-sample", status)
    metrics.scrape_errors.labels("reward").inc(0)
    metrics.reconciles.labels("ok").inc(0)
    texts = [generate_latest(metrics.registry).decode()]
    live = collections.defaultdict(float, ready=1.0)
    texts.append(generate_latest(ServiceMetrics(lambda: live).registry).decode())
    names: dict[str, set[str]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                names.setdefault(sample.name, set()).update(sample.labels)
    return names


def _rule_exprs() -> list[str]:
    [rule] = by_kind(template("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def _metric_selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names it filters or groups by) for each metric in the expression."""
    out = []
    for match in METRIC.finditer(expr):
        name = match.group(1)
        selector = re.match(r"\{([^}]*)\}", expr[match.end() :])
        labels = set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", selector.group(1))) if selector else set()
        out.append((name, labels))
    return out


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_query_names_an_exported_metric_and_its_labels(source: str, exported: dict[str, set[str]]) -> None:
    exprs = _rule_exprs() if source == "alerts" else _dashboard_exprs()
    assert exprs
    # the reward service's series get `namespace` from the scrape and `name` from the ServiceMonitor relabeling
    added_by_scrape = {"namespace", "name", "pod", "service", "job", "instance"}
    for expr in exprs:
        for name, labels in _metric_selectors(expr):
            assert name in exported, f"{source}: {name} is not exported (in: {expr})"
            known = exported[name] | (added_by_scrape if name.startswith("reward_service_") else set())
            assert labels <= known, f"{source}: {name} has no label {labels - known} (in: {expr})"
        for grouped in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            for label in (x.strip() for x in grouped.split(",")):
                assert any(
                    label in exported.get(n, set()) | {"namespace", "name"} for n, _ in _metric_selectors(expr)
                ), expr


def test_the_alerts_cover_a_degenerate_run_a_stalled_run_and_a_failing_reward_service() -> None:
    [rule] = by_kind(template("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {"GRPORunDegenerate", "GRPORunStalled", "GRPORewardServiceFailing"} <= set(alerts)
    assert 'grpo_run_condition{type="Healthy", reason="DegenerateOutput"}' in alerts["GRPORunDegenerate"]["expr"]
    assert "grpo_run_rollout" in alerts["GRPORunStalled"]["expr"]
    assert "reward_service_service_error_ratio" in alerts["GRPORewardServiceFailing"]["expr"]


def test_the_dashboard_is_per_run_and_shows_reward_repetition_progress_and_phase() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "run"} <= variables
    by_metric = {name for expr in _dashboard_exprs() for name, _ in _metric_selectors(expr)}
    assert {"grpo_run_reward", "grpo_run_repetition_frac", "grpo_run_rollout", "grpo_run_phase"} <= by_metric
    per_run = [
        t["expr"]
        for p in dashboard["panels"]
        if "all runs" not in p["title"] and "Operator" not in p["title"]
        for t in p["targets"]
    ]
    assert all('name="$run"' in e and 'namespace="$namespace"' in e for e in per_run)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
