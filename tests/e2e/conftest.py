"""Fixtures for the real-pod tests: a simulated cluster with a real kubelet node, and our images in it.

`real_cluster` (one for the whole package: the node is one per machine, held under a machine-wide lock, so
`test_make_run_real`, which starts its own through `make run`, runs before the first test that asks for this
one, as the file names sort, and tests/integration's real-node test after the package's teardown) is a
`SimulatedCluster(real_node=True)` with one kwok CPU node for the platform's pods: containerd, runc, the CNI
bridge, kubelet, kube-proxy and CoreDNS on this machine (grpo_dev.localcluster.realnode). The tests skip, saying
why, only where the machine cannot run a node at all (not root, no br_netfilter, tools missing and not
installable); on a machine that can, a node that fails to start fails the test.

`node_images` builds the operator and reward-service images (podman, as tests/images does) and imports them
into the node's containerd; pods use them with `imagePullPolicy: Never`. `platform` adds what a platform team
would have on the node (grpo_dev.localcluster.realplatform): the dev layers, the GPU advertised, the node's
GRPORuntime, and the chart with the operator image, its pod on the node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from grpo_dev.images import DEV_IMAGES, IMAGES, ImageError, build_all, build_dev
from grpo_dev.localcluster import SimulatedCluster, realplatform
from grpo_dev.localcluster.realnode import RealNodeUnavailable, ensure_host_tools
from grpo_dev.localcluster.simcluster import cpu_node


def _unavailable() -> str | None:
    """Why this machine cannot run a real node (None: it can; host tools missing are installed first)."""
    try:
        ensure_host_tools(install=True)
    except RealNodeUnavailable as exc:
        return str(exc)
    return None


# One kwok CPU node plays the platform's own pods (the KubeRay operator's Deployment record); our pods select
# the real node by its label.
PLATFORM_NODES = [cpu_node("cpu-0")]


@pytest.fixture(scope="package")
def real_cluster() -> Iterator[SimulatedCluster]:
    reason = _unavailable()
    if reason:
        pytest.skip(f"this machine cannot run a real node: {reason}")
    with SimulatedCluster(nodes=PLATFORM_NODES, real_node=True) as cluster:
        yield cluster


@pytest.fixture(scope="package")
def node_images(real_cluster: SimulatedCluster) -> dict[str, str]:
    """name -> image reference, built from this tree and present in the real node's containerd."""
    problem = None
    try:
        build_all(install=False)
    except ImageError as exc:
        problem = str(exc)
    if problem:
        pytest.fail(problem, pytrace=False)
    assert real_cluster.real_node is not None
    references = {name: image.reference for name, image in IMAGES.items()}
    for reference in references.values():
        real_cluster.real_node.import_image(reference)
    return references


# The namespace of the runs the operator drives on the node (test_operator_real).
NAMESPACE = "real-op"


@pytest.fixture(scope="package")
def platform(real_cluster: SimulatedCluster, node_images: dict[str, str]) -> Iterator[dict[str, Any]]:
    """The platform on the real node (grpo_dev.localcluster.realplatform): the dev layers imported, the GPU
    advertised, the node's GRPORuntime, the chart installed with the operator image (its pod on this node,
    in-cluster API access), a namespace with the shared claim."""
    node = real_cluster.real_node
    assert node is not None
    try:
        build_dev("ray-node-gpu")
        for name in ("ray-node", "ray-node-gpu"):  # our images are in the node already (node_images)
            node.import_image(DEV_IMAGES[name].reference)
        installed = realplatform.install(real_cluster, NAMESPACE)
    except (ImageError, realplatform.PlatformError) as exc:
        pytest.fail(str(exc), pytrace=False)
    yield {"node": installed.node, "shared": installed.shared, "deployment": realplatform.DEPLOYMENT, "at": installed}
    realplatform.uninstall(real_cluster)
