"""What the kubelet and the scheduler say about the run's pods, as `status.recovery` reads it: the latest OOM kill of
a Ray container (`lastState.terminated.reason: OOMKilled` once the kubelet restarted it, `state` before), and since
when the RayCluster's longest-waiting pod has been unschedulable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from grpo_operator.edges.childstate import oom_killed, unschedulable_since
from kubernetes import client

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
CLUSTER = {"metadata": {"name": "x"}, "status": {}}


def _ended(reason: str, minute: int) -> client.V1ContainerState:
    at = T0 + timedelta(minutes=minute)
    return client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(exit_code=137, reason=reason, finished_at=at)
    )


def _pod(
    name: str,
    component: str = "ray-worker",
    *,
    last: client.V1ContainerState | None = None,
    now: client.V1ContainerState | None = None,
    unschedulable: datetime | None = None,
    deleting: bool = False,
) -> client.V1Pod:
    status = client.V1ContainerStatus(
        name="ray-worker", image="i", image_id="", ready=False, restart_count=1, state=now, last_state=last
    )
    conditions = (
        [
            client.V1PodCondition(
                type="PodScheduled", status="False", reason="Unschedulable", last_transition_time=unschedulable
            )
        ]
        if unschedulable
        else []
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"grpo.dev/run": "x", "grpo.dev/component": component},
            deletion_timestamp=T0 if deleting else None,
        ),
        spec=client.V1PodSpec(containers=[], node_name=None if unschedulable else f"node-{name}"),
        status=client.V1PodStatus(phase="Running", container_statuses=[status], conditions=conditions),
    )


OOM = [
    pytest.param([_pod("a", last=_ended("Error", 1))], None, id="a crash that is no OOM kill"),
    pytest.param(
        [_pod("a", last=_ended("OOMKilled", 1)), _pod("b", last=_ended("OOMKilled", 5))],
        ("pod b container ray-worker on node node-b", T0 + timedelta(minutes=5)),
        id="the latest kill, after the kubelet restarted the container",
    ),
    pytest.param(
        [_pod("h", "ray-head", now=_ended("OOMKilled", 2))],
        ("pod h container ray-worker on node node-h", T0 + timedelta(minutes=2)),
        id="a container not restarted yet, the head's too",
    ),
    pytest.param(
        [_pod("r", "reward-service", last=_ended("OOMKilled", 9))], None, id="the reward service's pods are not Ray's"
    ),
]


@pytest.mark.parametrize(("pods", "found"), OOM)
def test_the_latest_oom_kill_of_a_ray_container_is_read_in_the_kubelets_words(
    pods: list[client.V1Pod], found: tuple[str, datetime] | None
) -> None:
    assert oom_killed(pods) == found


WAITING = [
    pytest.param(CLUSTER, [_pod("a", last=_ended("Error", 1))], None, id="every pod scheduled"),
    pytest.param(
        CLUSTER,
        [_pod("a", unschedulable=T0 + timedelta(minutes=3)), _pod("b", unschedulable=T0 + timedelta(minutes=1))],
        T0 + timedelta(minutes=1),
        id="the longest-waiting pod",
    ),
    pytest.param(
        {"metadata": {"name": "x", "deletionTimestamp": "2026-12-01T10:00:00Z"}},
        [_pod("a", unschedulable=T0)],
        None,
        id="a RayCluster being deleted: its pods go with it",
    ),
    pytest.param(CLUSTER, [_pod("a", unschedulable=T0, deleting=True)], None, id="a pod being deleted"),
    pytest.param(None, [_pod("a", unschedulable=T0)], None, id="no RayCluster"),
]


@pytest.mark.parametrize(("cluster", "pods", "since"), WAITING)
def test_since_when_a_pod_of_the_ray_cluster_is_unschedulable_as_the_scheduler_says(
    cluster: dict[str, object] | None, pods: list[client.V1Pod], since: datetime | None
) -> None:
    assert unschedulable_since(cluster, pods) == since
