"""A remote-reward run whose reward service reports scoring errors: the operator says so in a condition.

The reward service's pods are played like a kubelet would report them (Running and Ready, through the real
API server: the real ReplicaSet and Deployment controllers then count them), and its /metrics endpoint is
played by a prometheus_client registry serving the service's own `reward_service_service_error_ratio`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grpo_operator.render import names
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.support.operator_harness import (
    REWARD_IMAGE,
    free_port,
    get_run,
    manifest,
    play_kubelet_ready,
    running_operator,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def reward_metrics() -> Iterator[tuple[int, Gauge]]:
    registry = CollectorRegistry()
    ratio = Gauge("reward_service_service_error_ratio", "service errors / requests over the window", registry=registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield port, ratio
    server.shutdown()
    thread.join(timeout=5)


def reward_condition(kubectl: Any, namespace: str, name: str) -> dict[str, Any] | None:
    run = get_run(kubectl, namespace, name)
    return next((c for c in run.get("status", {}).get("conditions", []) if c["type"] == "RewardServiceReady"), None)


def test_reward_service_errors_set_the_condition_and_clear_when_they_stop(  # type: ignore[no-untyped-def]
    control_plane, namespace, kubectl, tmp_path: Path, reward_metrics
) -> None:
    port, ratio = reward_metrics
    ratio.set(0.5)
    spec = {"reward": {"type": "remote", "remote": {"replicas": 1, "image": REWARD_IMAGE}}}
    with running_operator(
        control_plane,
        namespace,
        "http://127.0.0.1:9",  # no Ray head: the test is about the reward service's condition only
        tmp_path,
        ray_head=False,
        GRPO_REWARD_METRICS_URL=f"http://127.0.0.1:{port}/metrics",
    ):
        kubectl("apply", "-f", "-", input=manifest("scored", namespace, spec))
        selector = "grpo.dev/run=scored,grpo.dev/component=reward"
        wait_for("reward pods", lambda: play_kubelet_ready(kubectl, namespace, selector))
        wait_for(
            "deployment ready",
            lambda: (
                json.loads(
                    kubectl("get", "deployment", names.reward_service("scored"), "-n", namespace, "-o", "json").stdout
                )
                .get("status", {})
                .get("readyReplicas")
            ),
        )
        failing = wait_for(
            "ScoringErrors",
            lambda: (c := reward_condition(kubectl, namespace, "scored")) and c["reason"] == "ScoringErrors" and c,
        )
        assert failing["status"] == "False" and "error ratio 0.5" in failing["message"]
        run = get_run(kubectl, namespace, "scored")
        assert run["status"]["phase"] in ("Pending", "Provisioning")  # no job is sent to a failing scorer
        ratio.set(0.0)
        healthy = wait_for(
            "Ready", lambda: (c := reward_condition(kubectl, namespace, "scored")) and c["status"] == "True" and c
        )
        assert healthy["reason"] == "Ready"
