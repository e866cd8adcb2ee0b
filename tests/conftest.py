"""Fixtures shared by every test area: one real control plane per session, a namespace per test, kubectl.

`control_plane` is a `grpo_dev.localcluster.ControlPlane` (real etcd, kube-apiserver and
kube-controller-manager on 127.0.0.1, with crds/ and the KubeRay CRDs installed); it starts only when a
test asks for it. `namespace` is a fresh namespace, deleted after the test. `kubectl(*args, input=None,
check=True)` runs the real kubectl as cluster admin and returns the `CompletedProcess`.

`simulated_cluster` is a second, separate `grpo_dev.localcluster.SimulatedCluster` (the same control plane plus
kube-scheduler, kwok nodes shaped like the EKS GPU and CPU node groups, and the real KubeRay operator), also
started only on demand; `sim_namespace` is a fresh namespace in it holding the `fsx-claim` PVC the examples
mount.
"""

from __future__ import annotations

import re
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest
from grpo_dev.localcluster import ControlPlane, SimulatedCluster

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the children the tests stop with SIGINT, however the suite was started.

    A shell that starts a job in the background (`make test &`, nohup, some CI runners) leaves SIGINT ignored;
    an ignored signal stays ignored across exec, so every child would ignore the Ctrl-C that the teardown tests
    send (tests/controlplane/test_controlplane_teardown.py, tests/operator/test_localray.py). Python's own
    handler here makes children start with the default disposition, as from a terminal.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        yield plane


@pytest.fixture(scope="session")
def simulated_cluster() -> Iterator[SimulatedCluster]:
    with SimulatedCluster() as cluster:
        yield cluster


def _namespace_name(request: pytest.FixtureRequest) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:48].strip("-")
    return f"{slug or 'test'}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = _namespace_name(request)
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def sim_namespace(simulated_cluster: SimulatedCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = _namespace_name(request)
    simulated_cluster.kubectl("create", "namespace", name)
    simulated_cluster.provide_claim(name, "fsx-claim")
    yield name
    simulated_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    # The next test's pods need the GPU nodes this one's pods held (a GRPORun may keep the namespace itself
    # Terminating: its finalizer waits for an operator that is gone by now).
    simulated_cluster.kubectl("wait", "--for=delete", "pods", "--all", "-n", name, "--timeout=120s", check=False)


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Kubectl:
    return control_plane.kubectl
