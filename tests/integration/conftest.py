"""Fixtures of the integration tier: one real control plane per session, a namespace per test, kubectl, and one
real local Ray head per session.

`control_plane` is a `grpo_dev.localcluster.ControlPlane` (real etcd, kube-apiserver and
kube-controller-manager on 127.0.0.1, with crds/ and the KubeRay CRDs installed); it starts only when a
test asks for it. `namespace` is a fresh namespace, deleted after the test. `kubectl(*args, input=None,
check=True)` runs the real kubectl as cluster admin and returns the `CompletedProcess`.

`simulated_cluster` is a second, separate `grpo_dev.localcluster.SimulatedCluster` (the same control plane plus
kube-scheduler, kwok nodes shaped like the EKS GPU and CPU node groups, and the real KubeRay operator), also
started only on demand; `sim_namespace` is a fresh namespace in it holding the `fsx-claim` PVC the examples
mount.

`ray_head` is a started `grpo_dev.localray.LocalRayHead` (CPU only, every port on 127.0.0.1, the custom
resource `gpu_node: 1`, token auth on with `operator_harness.RAY_TOKEN`); use it with
`JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers)`. It is stopped, with every
process it started, when the session ends.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from grpo_dev.localcluster import ControlPlane, SimulatedCluster
from grpo_dev.localray import LocalRayHead

from tests.support.operator_harness import RAY_TOKEN, Operator

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
OPERATOR_LOG_TAIL = 200  # lines of each operator log a failed test's report carries


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
    # Terminating: its finalizer waits for an operator that is gone by now). A namespace being deleted takes no
    # new pods (NamespaceLifecycle admission: KubeRay cannot make them again), so its pods are deleted here at
    # once rather than on the namespace controller's first pass, about 5 s later.
    simulated_cluster.kubectl("delete", "pods", "--all", "-n", name, "--wait=false", check=False)
    simulated_cluster.kubectl("wait", "--for=delete", "pods", "--all", "-n", name, "--timeout=120s", check=False)


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Kubectl:
    return control_plane.kubectl


@pytest.fixture(scope="session")
def ray_head() -> Iterator[LocalRayHead]:
    with LocalRayHead(auth_token=RAY_TOKEN) as head:
        yield head


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this tier carries the `integration` marker, so `-m "not integration"` selects the unit tiers."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran the operator reports the operator's log tail: on CI that log is the only witness of
    what the operator decided, and the test's tmp_path is gone with the machine."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    values = list(getattr(item, "funcargs", {}).values())
    for value in values + [v for t in values if isinstance(t, tuple) for v in t]:
        if isinstance(value, Operator):
            lines = value.logs().splitlines()[-OPERATOR_LOG_TAIL:]
            report.sections.append(("operator log (last lines)", "\n".join(lines)))
