"""Fixtures shared by every test area: one real control plane per session, a namespace per test, kubectl.

`control_plane` is a `grpo_dev.localcluster.ControlPlane` (real etcd, kube-apiserver and
kube-controller-manager on 127.0.0.1, with crds/ and the KubeRay CRDs installed); it starts only when a
test asks for it. `namespace` is a fresh namespace, deleted after the test. `kubectl(*args, input=None,
check=True)` runs the real kubectl as cluster admin and returns the `CompletedProcess`.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest
from grpo_dev.localcluster import ControlPlane

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:48].strip("-")
    name = f"{slug or 'test'}-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Kubectl:
    return control_plane.kubectl
