"""Pinned versions of every control-plane component and where each one lives in the cache.

This module owns the single list of what the test control plane and the simulated cluster are made of
(kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from `k8s.io/kubernetes`, etcd from
`go.etcd.io/etcd/server/v3`, helm from `helm.sh/helm/v4`, kwok and its stage files from `sigs.k8s.io/kwok`,
the KubeRay operator and its CRDs from the `ray-operator` Go module, Kueue's manager and CRDs from
`sigs.k8s.io/kueue`; for the real node kubelet and kube-proxy from `k8s.io/kubernetes`, CoreDNS from
`github.com/coredns/coredns` and a locally made pause image) and the cache layout
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
# helm v4.3.2 requires k8s.io/client-go v0.37.2 (its go.mod), the client of the server version above.
HELM_VERSION = "v4.3.2"
KWOK_VERSION = "v0.8.0"
# Kueue v0.17.0 (the newest the module proxy serves) is built against k8s.io/api v0.35.3 and KubeRay's
# ray-operator v1.6.0 API types (its go.mod); ray.io/v1 RayCluster fields it reads (spec.suspend, the head and
# worker group templates, replicas, numOfHosts) are the same in the v1.5.0 CRDs installed here. Its client talks
# to the v1.37 API server only through GA APIs (v1 core, coordination, admissionregistration, apiextensions).
KUEUE_VERSION = "v0.17.0"
# CoreDNS serves the real node's cluster DNS, built with the plugins its Corefile (realnode.py) names and no others.
COREDNS_VERSION = "v1.15.0"
COREDNS_PLUGINS = ("bind", "errors", "ready", "kubernetes", "cache")
# The real node's sandbox ("pause") image: a static Go program made here; bump when pause.go changes.
PAUSE_VERSION = "1"

KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
KUBERAY_CRDS = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")
# kwok runs no pod or node lifecycle without Stage objects; these are its "fast" node and pod stages, copied
# from the module (kustomize/stage/node/fast, node/heartbeat-with-lease, pod/fast): the set kwokctl installs by default
# when node leases are on (pkg/kwokctl/runtime/cluster.go, getDefaultNodeStages and getDefaultPodStages).
KWOK_STAGES = {
    "node-initialize.yaml": "kustomize/stage/node/fast/node-initialize.yaml",
    "node-heartbeat-with-lease.yaml": "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod-ready.yaml": "kustomize/stage/pod/fast/pod-ready.yaml",
    "pod-complete.yaml": "kustomize/stage/pod/fast/pod-complete.yaml",
    "pod-delete.yaml": "kustomize/stage/pod/fast/pod-delete.yaml",
}

# The CRDs Kueue's manager watches (config/components/crd/bases of the module), installed as they are: no
# conversion webhook, so clients use the storage version kueue.x-k8s.io/v1beta2.
KUEUE_CRDS = tuple(
    f"kueue.x-k8s.io_{kind}.yaml"
    for kind in (
        "admissionchecks",
        "clusterqueues",
        "cohorts",
        "localqueues",
        "multikueueclusters",
        "multikueueconfigs",
        "provisioningrequestconfigs",
        "resourceflavors",
        "topologies",
        "workloadpriorityclasses",
        "workloads",
    )
)

BIN_DIR_ENV = "GRPO_CONTROL_PLANE_BIN_DIR"
KUBERAY_CRD_DIR_ENV = "GRPO_KUBERAY_CRD_DIR"
KWOK_STAGE_DIR_ENV = "GRPO_KWOK_STAGE_DIR"
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
KUBECTL = Component("kubectl", KUBERNETES_VERSION, ("kubectl",))
HELM = Component("helm", HELM_VERSION, ("helm",))
KUBERAY = Component("kuberay-crds", KUBERAY_VERSION, KUBERAY_CRDS)
KWOK = Component("kwok", KWOK_VERSION, ("kwok",))
KWOK_STAGE_FILES = Component("kwok-stages", KWOK_VERSION, tuple(KWOK_STAGES))
KUBERAY_OPERATOR = Component("kuberay-operator", KUBERAY_VERSION, ("ray-operator",))
KUEUE = Component("kueue", KUEUE_VERSION, ("kueue", *KUEUE_CRDS))
# The real node (see realnode.py): kubelet and kube-proxy from the control plane's k8s.io/kubernetes release,
# CoreDNS, and the pause binary with its image as a docker-archive tarball for `ctr images import`.
NODE = Component("kubelet", KUBERNETES_VERSION, ("kubelet", "kube-proxy"))
COREDNS = Component("coredns", COREDNS_VERSION, ("coredns",))
PAUSE = Component("pause", PAUSE_VERSION, ("pause", "pause.tar"))
COMPONENTS = (ETCD, KUBERNETES, KUBECTL, HELM, KUBERAY, KWOK, KWOK_STAGE_FILES, KUBERAY_OPERATOR, KUEUE)
REAL_NODE_COMPONENTS = (NODE, COREDNS, PAUSE)

TOOL_COMPONENT = {
    "etcd": ETCD,
    "kube-apiserver": KUBERNETES,
    "kube-controller-manager": KUBERNETES,
    "kube-scheduler": KUBERNETES,
    "kubectl": KUBECTL,
    "helm": HELM,
    "kwok": KWOK,
    "ray-operator": KUBERAY_OPERATOR,
    "kueue": KUEUE,
    "kubelet": NODE,
    "kube-proxy": NODE,
    "coredns": COREDNS,
    "pause": PAUSE,
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
