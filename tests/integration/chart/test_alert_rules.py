"""The chart's PrometheusRule, evaluated by Prometheus's own rule engine (`promtool test rules`) on series shaped
like the operator's and the reward service's: each alert fires for the run it is about, and stays quiet for a
healthy run. `promtool check rules` also checks the PromQL and the templates.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import by_kind, template
from tests.support.promtool import PromtoolUnavailable, check_rules, promtool

ALERTS = (
    "GRPORunDegenerate",
    "GRPORunStalled",
    "GRPORunMetricsUnavailable",
    "GRPORunFailed",
    "GRPORewardServiceFailing",
    "GRPORunLowGoodput",
)


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    [rule] = by_kind(template("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    spec: dict[str, Any] = rule["spec"]
    return spec


@pytest.fixture(scope="module")
def tool() -> Path:
    try:
        return promtool()
    except PromtoolUnavailable as exc:
        pytest.skip(str(exc))


def _annotations(rules: dict[str, Any], alert: str, namespace: str, name: str) -> dict[str, str]:
    """The alert's annotations as Prometheus renders them for one run (only these two template variables)."""
    [rule] = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    return {
        key: value.replace("{{ $labels.namespace }}", namespace).replace("{{ $labels.name }}", name)
        for key, value in rule["annotations"].items()
    }


def _run(
    tool: Path, tmp_path: Path, rules: dict[str, Any], tests: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    return subprocess.run(
        [str(tool), "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _case(series: list[dict[str, str]], checks: list[tuple[str, str, list[dict[str, Any]]]]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": e} for t, a, e in checks],
    }


def test_the_rules_pass_promtool_check(tool: Path, rules: dict[str, Any], tmp_path: Path) -> None:
    result = check_rules(tool, rules, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _cond(run: dict[str, str], type_: str, status: str, reason: str, values: str) -> dict[str, str]:
    return _series("grpo_run_condition", {**run, "type": type_, "status": status, "reason": reason}, values)


def test_each_alert_fires_for_its_run_and_a_healthy_run_raises_none(
    tool: Path, rules: dict[str, Any], tmp_path: Path
) -> None:
    run = {"namespace": "ml", "name": "r"}

    def fired(alert: str, severity: str, **extra: str) -> list[dict[str, Any]]:
        annotations = _annotations(rules, alert, "ml", "r")
        annotations = {k: v.replace("{{ $labels.reason }}", extra.get("reason", "")) for k, v in annotations.items()}
        return [{"exp_labels": {**run, **extra, "severity": severity}, "exp_annotations": annotations}]

    running = _series("grpo_run_phase", {**run, "phase": "Running"}, "1x120")
    advancing = _series("grpo_run_rollout", run, "0+1x120")
    available = _cond(run, "MetricsAvailable", "True", "Scraped", "1x120")
    healthy = _cond(run, "Healthy", "True", "MetricsHealthy", "1x120")
    quiet: list[tuple[str, str, list[dict[str, Any]]]] = [(t, a, []) for t in ("20m", "100m") for a in ALERTS]
    tests = [
        # healthy: running, advancing, Healthy=True, reward service fine -> nothing, ever
        _case(
            [
                running,
                advancing,
                available,
                healthy,
                _series("grpo_run_status", {**run, "phase": "Running", "reason": "Running"}, "1x120"),
                _series("reward_service_service_error_ratio", {**run, "pod": "r-reward-0"}, "0x120"),
                _series("reward_service_ready", {**run, "pod": "r-reward-0"}, "1x120"),
            ],
            quiet,
        ),
        # degenerate under guards.action Warn: Healthy=False/DegenerateOutput while rollouts advance
        _case(
            [running, advancing, available, _cond(run, "Healthy", "False", "DegenerateOutput", "1x120")],
            [
                ("3m", "GRPORunDegenerate", []),
                ("20m", "GRPORunDegenerate", fired("GRPORunDegenerate", "warning")),
                ("20m", "GRPORunStalled", []),
            ],
        ),
        # stopped by the guard (or SUCCEEDED with degenerate final rollouts): Failed, Healthy=False/DegenerateOutput
        _case(
            [
                _series("grpo_run_phase", {**run, "phase": "Failed"}, "1x120"),
                _series("grpo_run_rollout", run, "7x120"),
                _series("grpo_run_status", {**run, "phase": "Failed", "reason": "DegenerateOutput"}, "1x120"),
                _cond(run, "Healthy", "False", "DegenerateOutput", "1x120"),
            ],
            [
                ("20m", "GRPORunDegenerate", fired("GRPORunDegenerate", "warning")),
                ("100m", "GRPORunStalled", []),
                ("20m", "GRPORunFailed", []),
            ],
        ),
        # ... and once the run is deleted its series end: the alert resolves
        _case(
            [_cond(run, "Healthy", "False", "DegenerateOutput", "1x30")],
            [("20m", "GRPORunDegenerate", fired("GRPORunDegenerate", "warning")), ("60m", "GRPORunDegenerate", [])],
        ),
        # stalled: Running with metrics available, the rollout step stuck at 5
        _case(
            [running, available, healthy, _series("grpo_run_rollout", run, "5x120")],
            [
                ("20m", "GRPORunStalled", []),
                ("70m", "GRPORunStalled", fired("GRPORunStalled", "warning")),
                ("70m", "GRPORunDegenerate", []),
            ],
        ),
        # stalled before the first rollout: Running, the endpoint answers, no rollout metric at all
        _case(
            [running, _cond(run, "MetricsAvailable", "True", "NoRolloutYet", "1x120")],
            [("70m", "GRPORunStalled", fired("GRPORunStalled", "warning"))],
        ),
        # the stall guard tripped
        _case(
            [_cond(run, "Healthy", "False", "Stalled", "1x120")],
            [("40m", "GRPORunStalled", fired("GRPORunStalled", "warning"))],
        ),
        # metrics unreachable: not a stall, its own alert
        _case(
            [
                running,
                _series("grpo_run_rollout", run, "5x120"),
                _cond(run, "MetricsAvailable", "False", "ScrapeFailed", "1x120"),
            ],
            [
                ("10m", "GRPORunMetricsUnavailable", []),
                ("20m", "GRPORunMetricsUnavailable", fired("GRPORunMetricsUnavailable", "warning")),
                ("100m", "GRPORunStalled", []),
            ],
        ),
        # ended, but the success could not be verified
        _case(
            [_series("grpo_run_status", {**run, "phase": "Failed", "reason": "Unverified"}, "1x120")],
            [("5m", "GRPORunFailed", fired("GRPORunFailed", "warning", reason="Unverified"))],
        ),
        # the reward service answers half its requests with service errors
        _case(
            [
                running,
                advancing,
                available,
                _series("reward_service_service_error_ratio", {**run, "pod": "r-reward-0"}, "0.5x120"),
                _series("reward_service_ready", {**run, "pod": "r-reward-0"}, "1x120"),
            ],
            [
                ("5m", "GRPORewardServiceFailing", []),
                ("20m", "GRPORewardServiceFailing", fired("GRPORewardServiceFailing", "critical")),
            ],
        ),
        # the reward service has no ready replica
        _case(
            [_series("reward_service_ready", {**run, "pod": "r-reward-0"}, "0x120")],
            [("20m", "GRPORewardServiceFailing", fired("GRPORewardServiceFailing", "critical"))],
        ),
    ]
    result = _run(tool, tmp_path, rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_low_goodput_fires_for_a_running_run_below_the_threshold_for_the_whole_hour_only(
    tool: Path, rules: dict[str, Any], tmp_path: Path
) -> None:
    """Defaults: goodputBelow 0.8, lowGoodputFor 1h."""
    run = {"namespace": "ml", "name": "r"}
    annotations = _annotations(rules, "GRPORunLowGoodput", "ml", "r")
    fired = [{"exp_labels": {**run, "severity": "warning"}, "exp_annotations": annotations}]
    running = _series("grpo_run_phase", {**run, "phase": "Running"}, "1x120")
    tests = [
        # 0.5 for two hours while Running: pending for the first hour, firing after it
        _case(
            [running, _series("grpo_run_goodput", run, "0.5x120")],
            [("30m", "GRPORunLowGoodput", []), ("70m", "GRPORunLowGoodput", fired)],
        ),
        # 0.9: above the threshold, never
        _case([running, _series("grpo_run_goodput", run, "0.9x120")], [("100m", "GRPORunLowGoodput", [])]),
        # low for 40 minutes, then recovered: the hour is never reached
        _case(
            [running, _series("grpo_run_goodput", run, "0.5x40 0.85x80")],
            [("70m", "GRPORunLowGoodput", []), ("110m", "GRPORunLowGoodput", [])],
        ),
        # low but Suspended (its GPUs are given back): not a running run's problem
        _case(
            [
                _series("grpo_run_phase", {**run, "phase": "Suspended"}, "1x120"),
                _series("grpo_run_goodput", run, "0.5x120"),
            ],
            [("100m", "GRPORunLowGoodput", [])],
        ),
    ]
    result = _run(tool, tmp_path, rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr
