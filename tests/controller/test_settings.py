"""The operator refuses, at start and in one line naming the variable, every setting that would break each run
later (a duplicate containerPort at apply, a NetworkPolicy the API server refuses, a KeyError at every
reconcile, a Ray head open to the whole namespace), and accepts every value the chart and the tests pass."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
from grpo_operator.controller.config import SettingsError, load_settings

LABELS = '{"app.kubernetes.io/name": "grpo-operator"}'


# (the variable, a value it refuses, the rule its message names)
REFUSED = [
    # ports: 1-65535 and not a port a run's Ray pods already use
    ("GRPO_PROMETHEUS_PORT", "9465", "the launcher's metrics port"),
    ("GRPO_PROMETHEUS_PORT", "8080", "Ray metrics port"),
    ("GRPO_PROMETHEUS_PORT", "8265", "Ray dashboard port"),
    ("GRPO_PROMETHEUS_PORT", "0", "greater than or equal to 1"),
    ("GRPO_PROMETHEUS_PORT", "-1", "greater than or equal to 1"),
    ("GRPO_PROMETHEUS_PORT", "70000", "less than or equal to 65535"),
    # CIDRs as the NetworkPolicy's ipBlock takes them
    ("GRPO_EGRESS_CIDRS", '["10.0.0.0"]', "not a CIDR"),
    ("GRPO_EGRESS_CIDRS", '["10.0.0.0/33"]', "not a CIDR"),
    ("GRPO_EGRESS_CIDRS", '["corp"]', "not a CIDR"),
    # label maps and the namespace by the Kubernetes label grammar
    ("GRPO_OPERATOR_POD_LABELS", '{"app": "grpo operator"}', "label value"),
    ("GRPO_OPERATOR_POD_LABELS", '{"-app": "grpo"}', "label key"),
    ("GRPO_PROMETHEUS_POD_LABELS", json.dumps({"app": "p" * 64}), "at most 63"),
    ("GRPO_PROMETHEUS_NAMESPACE_LABELS", '{"Example.COM/team": "obs"}', "DNS subdomain"),
    ("GRPO_OPERATOR_NAMESPACE", "Ops_Team", "match pattern"),
    ("GRPO_OPERATOR_NAMESPACE", "o" * 64, "at most 63"),
    # an empty selector opens each run's Ray head to every pod of its namespace
    ("GRPO_OPERATOR_POD_LABELS", "{}", "matches every pod in the namespace"),
    # URL templates formatted once at start
    ("GRPO_TRAINER_METRICS_URL", "http://{hostname}:{port}/metrics", "unknown placeholder {hostname}"),
    ("GRPO_TRAINER_METRICS_URL", "http://{host}:{port/metrics", "not a URL template"),
    ("GRPO_REWARD_METRICS_URL", "http://{service}:{port}/{0}", "unknown placeholder {0}"),
    ("GRPO_REWARD_METRICS_URL", "http://{service}:{port:q}/", "not a URL template"),
    ("GRPO_REWARD_METRICS_URL", "ftp://{service}:{port}/metrics", "only http(s)"),
    # images as the kubelet parses them: no whitespace or control characters
    ("GRPO_REWARD_IMAGE", "registry.example/reward:1 ", "whitespace or control characters"),
    ("GRPO_REWARD_IMAGE", "registry.example/re\x1bward:1", "whitespace or control characters"),
    # floors on intervals and timeouts
    ("GRPO_RECONCILE_INTERVAL_SECONDS", "1e-300", "greater than or equal to 1"),
    ("GRPO_HTTP_TIMEOUT_SECONDS", "1e-300", "greater than or equal to 0.1"),
    ("GRPO_PEERING_LIFETIME_SECONDS", "1", "greater than or equal to 5"),
    # prices by instance type, positive and finite
    ("GRPO_GPU_HOUR_PRICES_USD", '{"p5.xlarge": 4}', "Input should be 'p5.48xlarge'"),
    ("GRPO_GPU_HOUR_PRICES_USD", '{"p5en.48xlarge": 0}', "greater than 0"),
    ("GRPO_GPU_HOUR_PRICES_USD", '{"p5en.48xlarge": "Infinity"}', "finite number"),
    ("GRPO_GPU_HOUR_PRICES_USD", "5.2", "JSON object of instance type: USD per GPU-hour"),
    # shapes
    ("GRPO_ENTRYPOINT_PREFIX", "python3 fake.py", "JSON list of strings"),
    ("GRPO_OPERATOR_POD_LABELS", "app=grpo", "JSON object"),
]


@pytest.mark.parametrize(
    ("variable", "value", "rule"), REFUSED, ids=[f"{v}={value!r}: {rule}" for v, value, rule in REFUSED]
)
def test_a_setting_that_would_break_every_run_is_refused_at_start_in_one_line_naming_it(
    variable: str, value: str, rule: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings({variable: value})
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"{variable}="), line
    assert rule in line, line


def test_every_value_the_chart_and_the_tests_give_is_accepted() -> None:
    settings = load_settings(
        {
            "GRPO_PROMETHEUS_PORT": "9401",
            "GRPO_EGRESS_CIDRS": '["10.0.0.0/8", "fd00::/8"]',
            "GRPO_OPERATOR_POD_LABELS": LABELS,
            "GRPO_PROMETHEUS_NAMESPACE_LABELS": '{"kubernetes.io/metadata.name": "monitoring"}',
            "GRPO_PROMETHEUS_POD_LABELS": '{"app.kubernetes.io/name": "prometheus"}',
            "GRPO_OPERATOR_NAMESPACE": "grpo-system",
            "GRPO_TRAINER_METRICS_URL": "http://127.0.0.1:{port}/metrics",
            "GRPO_REWARD_METRICS_URL": "http://{service}.{namespace}.svc.{domain}:{port}/metrics",
            "GRPO_REWARD_IMAGE": "registry.example/reward@sha256:" + "c" * 64,
            "GRPO_RECONCILE_INTERVAL_SECONDS": "1",
            "GRPO_HTTP_TIMEOUT_SECONDS": "2",
            "GRPO_ENTRYPOINT_PREFIX": '["python3", "fake.py"]',
            "GRPO_NETWORK_POLICIES": "false",
            "GRPO_CLUSTER_DOMAIN": "",  # empty: unset, as the chart leaves an optional value
        }
    )
    render = settings.render
    assert render.prometheus_port == 9401 and render.egress_cidrs == ("10.0.0.0/8", "fd00::/8")
    assert render.operator_pod_labels == json.loads(LABELS) and render.operator_namespace == "grpo-system"
    assert render.launcher == ("python3", "fake.py") and render.network_policies is False
    assert render.cluster_domain == "cluster.local"
    assert settings.reconcile_interval_seconds == 1


def test_an_unknown_grpo_variable_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SettingsError, match=r"GRPO_PROMETHEUS_PROT: unknown setting; known: .*GRPO_PROMETHEUS_PORT"):
        load_settings({"GRPO_PROMETHEUS_PROT": "9401"})


def test_importing_the_handlers_reads_no_setting_and_binds_no_port() -> None:
    # A bad setting and a taken port at import would stop the process at import (the old behaviour).
    code = (
        "import socket; s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen();"
        "import os; os.environ['GRPO_METRICS_PORT'] = str(s.getsockname()[1]); os.environ['GRPO_TYPO'] = '1';"
        "import grpo_operator.controller.handlers as h; print('imported', hasattr(h, 'SETTINGS'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "imported False", done.stdout + done.stderr


def test_the_edges_hold_no_module_state() -> None:
    scrape = importlib.import_module("grpo_operator.edges.scrape")
    opmetrics = importlib.import_module("grpo_operator.edges.opmetrics")
    assert not hasattr(scrape, "SLOW")
    assert not any(hasattr(opmetrics, name) for name in ("RUNS", "RECONCILES", "SCRAPE_ERRORS"))
    first, second = opmetrics.OperatorMetrics(), opmetrics.OperatorMetrics()  # one per operator, no clash
    assert first.registry is not second.registry
