"""Reading children and metrics: KubeRay status, pod problems, reward readiness, Prometheus text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from grpo_operator.controller.config import SettingsError, load_settings
from grpo_operator.edges import childstate, scrape
from grpo_operator.status.observation import GpuObservation
from kubernetes import client

from tests.support.pods import preflight_failed_pod


def pod(name: str, *, unschedulable: str | None = None, waiting: tuple[str, str] | None = None) -> client.V1Pod:
    conditions = (
        [client.V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message=unschedulable)]
        if unschedulable
        else []
    )
    statuses = []
    if waiting:
        statuses = [
            client.V1ContainerStatus(
                name="ray-worker",
                image="i",
                image_id="",
                ready=False,
                restart_count=0,
                state=client.V1ContainerState(
                    waiting=client.V1ContainerStateWaiting(reason=waiting[0], message=waiting[1])
                ),
            )
        ]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        status=client.V1PodStatus(conditions=conditions, container_statuses=statuses),
    )


def test_kuberay_conditions_and_worker_counts_decide_readiness() -> None:
    ready = {
        "status": {
            "readyWorkerReplicas": 2,
            "conditions": [
                {"type": "RayClusterProvisioned", "status": "True"},
                {"type": "HeadPodReady", "status": "True"},
            ],
        }
    }
    assert childstate.cluster_ready(ready, 2)[0]
    assert not childstate.cluster_ready(ready, 3)[0]
    assert not childstate.cluster_ready({"status": {}}, 1)[0]
    assert childstate.cluster_ready({"status": {"state": "ready", "readyWorkerReplicas": 1}}, 1)[0]


def test_pod_problems_are_quoted_from_the_scheduler_and_kubelet() -> None:
    lines = childstate.pod_problems(
        [
            pod("w-0", unschedulable="0/4 nodes are available: 4 Insufficient vpc.amazonaws.com/efa."),
            pod("w-1", waiting=("ImagePullBackOff", 'Back-off pulling image "miles@sha256:x"')),
            pod("w-2", waiting=("ContainerCreating", "")),
        ]
    )
    assert lines == [
        "pod w-0 unschedulable: 0/4 nodes are available: 4 Insufficient vpc.amazonaws.com/efa.",
        'pod w-1 container ray-worker ImagePullBackOff: Back-off pulling image "miles@sha256:x"',
    ]


def test_reward_service_with_failing_scoring_is_not_ready() -> None:
    deployment = client.V1Deployment.model_construct(status=client.V1DeploymentStatus(ready_replicas=2))
    assert childstate.reward_observation(deployment, 0.0, 0.1).ready  # type: ignore[union-attr]
    failing = childstate.reward_observation(deployment, 0.5, 0.1)
    assert failing is not None and not failing.ready and failing.reason == "ScoringErrors"
    none_ready = childstate.reward_observation(
        client.V1Deployment.model_construct(status=client.V1DeploymentStatus()), None, 0.1
    )
    assert none_ready is not None and none_ready.reason == "NotReady"


MILES_TEXT = """# HELP miles_metric_rollout_raw_reward rollout/raw_reward
# TYPE miles_metric_rollout_raw_reward gauge
miles_metric_rollout_raw_reward{run_name="quickstart"} 0.531
miles_metric_rollout_raw_reward{run_name="other"} 0.1
# TYPE miles_metric_rollout_step gauge
miles_metric_rollout_step{run_name="quickstart"} 36.0
# TYPE miles_metric_rollout_repetition_frac gauge
miles_metric_rollout_repetition_frac{run_name="quickstart"} 0.0
# TYPE miles_metric_perf_step_time gauge
miles_metric_perf_step_time{run_name="quickstart"} 273.5
"""


def test_trainer_gauges_are_read_for_this_run_only() -> None:
    m = scrape.trainer_metrics(MILES_TEXT, "quickstart")
    assert (m.rollout, m.raw_reward, m.repetition_frac, m.step_time_seconds) == (36, 0.531, 0.0, 273.5)
    assert scrape.trainer_metrics(MILES_TEXT, "missing").rollout is None


def test_garbage_is_a_scrape_error_not_a_crash() -> None:
    with pytest.raises(scrape.ScrapeError):
        scrape.trainer_metrics('miles_metric_rollout_step{run_name="x" 1\n', "x")
    with pytest.raises(scrape.ScrapeError):
        scrape.Scraper().fetch("file:///etc/passwd", 1)


def test_operator_settings_name_the_variable_and_rule() -> None:
    with pytest.raises(SettingsError, match="GRPO_RECONCILE_INTERVAL_SECONDS='0'"):
        load_settings({"GRPO_RECONCILE_INTERVAL_SECONDS": "0"})
    with pytest.raises(SettingsError, match="GRPO_TYPO: unknown setting"):
        load_settings({"GRPO_TYPO": "1"})
    assert load_settings({"GRPO_RAY_ADDRESS": "http://127.0.0.1:8265"}).ray_address == "http://127.0.0.1:8265"


def _gpu_pod(
    name: str, gpus: int, node: str | None, bound: datetime | None, phase: str = "Running", *, grace: int = 30
) -> client.V1Pod:
    resources = client.V1ResourceRequirements(requests={"nvidia.com/gpu": str(gpus)} if gpus else {})
    conditions = (
        [client.V1PodCondition(type="PodScheduled", status="True", last_transition_time=bound)] if bound else []
    )
    container = client.V1Container(name="ray-worker", resources=resources)
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(node_name=node, containers=[container], termination_grace_period_seconds=grace),
        status=client.V1PodStatus(phase=phase, conditions=conditions),
    )


def test_the_gpus_held_are_the_requests_of_the_bound_unfinished_pods_from_the_earliest_binding() -> None:
    t0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    pods = [
        _gpu_pod("head", 0, "cpu-1", t0, grace=5),  # holds no GPU: its grace bounds no save
        _gpu_pod("w1", 8, "gpu-1", t0 + timedelta(minutes=2), grace=600),
        _gpu_pod("w2", 8, "gpu-2", t0 + timedelta(minutes=1), grace=900),
        _gpu_pod("w3", 8, None, None, phase="Pending", grace=10),  # not bound: holds nothing
        _gpu_pod("w4", 8, "gpu-3", t0, phase="Failed", grace=10),  # finished: its GPUs are free
    ]
    # The shortest grace of the pods holding GPUs: a distributed save needs every rank, so it bounds the save.
    assert childstate.gpu_observation(pods) == GpuObservation(16, t0 + timedelta(minutes=1), 600)
    assert childstate.gpu_observation([]) == GpuObservation(0, None, None)


def test_worker_nodes_map_each_scheduled_workers_pod_ip_to_its_node() -> None:
    def placed(component: str, ip: str | None, node: str | None) -> client.V1Pod:
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"{component}-{ip}", labels={"grpo.dev/component": component}),
            spec=client.V1PodSpec(containers=[], node_name=node),
            status=client.V1PodStatus(pod_ip=ip),
        )

    pods = [
        placed("ray-worker", "10.0.1.7", "n7"),
        placed("ray-head", "10.0.0.2", "cpu"),
        placed("ray-worker", None, None),
    ]
    assert childstate.worker_nodes(pods) == (("10.0.1.7", "n7"),)


def test_a_ray_cluster_being_deleted_is_not_ready_whatever_its_status_says() -> None:
    ready = {"status": {"readyWorkerReplicas": 1, "state": "ready", "conditions": []}}
    deleting = {**ready, "metadata": {"deletionTimestamp": "2026-12-01T00:00:00Z"}}
    observed = childstate.cluster_observation(deleting, 1, [])
    assert observed is not None and not observed.ready and "being deleted" in observed.message


def test_a_failed_preflight_init_container_is_observed_with_its_pod_node_and_line() -> None:
    cluster = {"metadata": {"name": "r-ray"}, "spec": {}, "status": {"readyWorkerReplicas": 0}}
    log = "checking the node\npreflight failed: libcuda: libcuda.so.1 cannot be loaded\n"
    observed = childstate.cluster_observation(
        cluster, 1, [pod("w-0", waiting=("ContainerCreating", "")), preflight_failed_pod(log, "w-1", "gpu-7")]
    )
    assert observed is not None and not observed.ready
    assert (
        observed.preflight_failure == "pod w-1 on node gpu-7: preflight failed: libcuda: libcuda.so.1 cannot be loaded"
    )
    unschedulable = childstate.cluster_observation(cluster, 1, [pod("w-0", unschedulable="0/4 nodes are available")])
    assert unschedulable is not None and unschedulable.preflight_failure == ""
