"""Many reconciles of one run at once, as kopf makes them (create/update/resume handlers and the timer of one
object run concurrently on its thread pool, each with the body it last saw): one job is submitted, and no guard
update is lost. The reconciler runs in this process against the real API server and the real local Ray head;
the trainer's gauges are served by this test in miles's format so it decides when a rollout happens."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.controller.reconciler import Reconciler
from grpo_operator.edges.kube import Kube
from kubernetes import config
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from ray.job_submission import JobSubmissionClient

from tests.support.operator_harness import RAY_TOKEN, free_port, manifest, play_kuberay_ready, wait_for

pytestmark = pytest.mark.integration
THREADS = 8
ROLLOUTS = 5
# The driver registers with Ray like miles's does (so the job has a driver node to scrape) and then waits.
DRIVER = (sys.executable, "-c", "import ray, time; ray.init(); time.sleep(600)")


def _get(kubectl: Callable[..., Any], ns: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(kubectl("get", "grporun", name, "-n", ns, "-o", "json").stdout)
    return body


def _all_at_once(reconciler: Reconciler, bodies: list[dict[str, Any]]) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(len(bodies))

    def one(body: dict[str, Any]) -> None:
        start.wait()
        try:
            reconciler.reconcile(body)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_concurrent_reconciles_of_one_run_submit_once_and_lose_no_guard_update(
    control_plane: Any, ray_head: Any, namespace: str, kubectl: Callable[..., Any], tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    labels = ["run_name"]
    step = Gauge("miles_metric_rollout_step", "rollout/step", labels, registry=registry)
    repetition = Gauge("miles_metric_rollout_repetition_frac", "rollout/repetition_frac", labels, registry=registry)
    reward = Gauge("miles_metric_rollout_raw_reward", "rollout/raw_reward", labels, registry=registry)
    port = free_port()
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    settings = OperatorSettings(
        prometheus_port=port,
        entrypoint_prefix=DRIVER,
        ray_address=ray_head.dashboard_url,
        http_timeout_seconds=60,
    )
    reconciler = Reconciler(kube=Kube(config.new_client_from_config(str(control_plane.kubeconfig))), settings=settings)
    guards = {"action": "Warn", "consecutiveRollouts": 1000, "maxRepetitionFrac": 0.3, "stallTimeoutSeconds": 3600}
    kubectl("apply", "-f", "-", input=manifest("busy", namespace, {"rollout": {"numRollout": 50}, "guards": guards}))
    client = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"})
    try:
        reconciler.reconcile(_get(kubectl, namespace, "busy"))  # creates the children
        play_kuberay_ready(kubectl, namespace, "busy")
        stale = _get(kubectl, namespace, "busy")  # what a handler that has not seen our writes yet holds
        _all_at_once(reconciler, [stale] * THREADS)
        jobs = [j for j in client.list_jobs() if (j.metadata or {}).get("grpo.dev/namespace") == namespace]
        assert len(jobs) == 1, [j.submission_id for j in jobs]

        def running() -> dict[str, Any] | None:
            reconciler.reconcile(_get(kubectl, namespace, "busy"))
            body = _get(kubectl, namespace, "busy")
            return body if body["status"].get("phase") == "Running" else None

        wait_for("the job running", running, timeout=180, interval=1.0)
        for rollout in range(ROLLOUTS):
            step.labels("busy").set(rollout)
            repetition.labels("busy").set(0.9)
            reward.labels("busy").set(0.5)
            fresh = _get(kubectl, namespace, "busy")
            _all_at_once(reconciler, [fresh if i % 2 else stale for i in range(THREADS)])
            stale = fresh  # the next round's laggards hold this round's body
        status = _get(kubectl, namespace, "busy")["status"]
        assert status["phase"] == "Running", status
        assert status["guards"]["lastRollout"] == ROLLOUTS - 1
        assert (
            status["guards"]["repetitionStreak"] == ROLLOUTS
        )  # each rollout counted once: no update lost, none doubled
        assert len([j for j in client.list_jobs() if (j.metadata or {}).get("grpo.dev/namespace") == namespace]) == 1
    finally:
        for job in client.list_jobs():
            if (job.metadata or {}).get("grpo.dev/namespace") == namespace:
                client.stop_job(job.submission_id)
        server.shutdown()
