"""Fixtures for the real-pod tests: a simulated cluster with a real kubelet node, and our images in it.

`real_cluster` (one per test module: the node is one per machine, and a teardown test starts its own) is a
`SimulatedCluster(real_node=True)` with one kwok CPU node for the platform's pods: containerd, runc, the CNI bridge, kubelet, kube-proxy and
CoreDNS on this machine (grpo_dev.localcluster.realnode). The tests skip, saying why, only where the machine
cannot run a node at all (not root, no br_netfilter, tools missing and not installable); on a machine that can,
a node that fails to start fails the test.

`node_images` builds the operator and reward-service images (podman, as tests/images does) and imports them
into the node's containerd; pods use them with `imagePullPolicy: Never`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from grpo_dev.images import IMAGES, ImageError, build_all
from grpo_dev.localcluster import SimulatedCluster
from grpo_dev.localcluster.realnode import RealNodeUnavailable, ensure_host_tools
from grpo_dev.localcluster.simcluster import cpu_node


def _unavailable() -> str | None:
    if os.environ.get("GRPO_REAL_NODE") != "1":
        return (
            "NOT RUN: the real-node tests have not passed on any machine yet (issue #29); "
            "set GRPO_REAL_NODE=1 to run them"
        )
    try:
        ensure_host_tools(install=True)
    except RealNodeUnavailable as exc:
        return str(exc)
    return None


# One kwok CPU node plays the platform's own pods (the KubeRay operator's Deployment record); our pods select
# the real node by its label.
PLATFORM_NODES = [cpu_node("cpu-0")]


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[SimulatedCluster]:
    reason = _unavailable()
    if reason:
        pytest.skip(reason if reason.startswith("NOT RUN") else f"this machine cannot run a real node: {reason}")
    with SimulatedCluster(nodes=PLATFORM_NODES, real_node=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
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
