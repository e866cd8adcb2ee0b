"""Pod statuses as the kubelet reports them, for tests of what the operator reads from pods."""

from __future__ import annotations

from kubernetes import client


def preflight_failed_pod(
    message: str, name: str = "quickstart-ray-gpu-worker-abcde", node: str = "ip-10-0-0-7"
) -> client.V1Pod:
    """A worker whose preflight init container ended non-zero with `message` (its log tail, kept as the termination
    message) and now waits in the kubelet's back-off: the failure is in `last_state`."""
    ended = client.V1ContainerStateTerminated(exit_code=3, reason="Error", message=message)
    waiting = client.V1ContainerStateWaiting(
        reason="CrashLoopBackOff", message="back-off 10s restarting failed container"
    )
    init = client.V1ContainerStatus(
        name="preflight",
        image="i",
        image_id="",
        ready=False,
        restart_count=1,
        state=client.V1ContainerState(waiting=waiting),
        last_state=client.V1ContainerState(terminated=ended),
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[], node_name=node),
        status=client.V1PodStatus(phase="Pending", init_container_statuses=[init]),
    )
