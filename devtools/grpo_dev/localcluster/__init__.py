"""A real local Kubernetes control plane for tests and `make run`, built from pinned sources.

Public API: `ControlPlane` (context manager running etcd, kube-apiserver and kube-controller-manager on
127.0.0.1), `SimulatedCluster` (the same plus kube-scheduler, kwok nodes and the real KubeRay operator) and
`tool_path` (path of kubectl, helm, kwok, etcd, the KubeRay operator or a Kubernetes binary, obtained into
`~/.cache/grpo-operator/` on first use). `python -m grpo_dev.localcluster build|up` is the CLI.
"""

from __future__ import annotations

from grpo_dev.localcluster.build import BuildError, tool_path
from grpo_dev.localcluster.controlplane import ControlPlane, ControlPlaneError
from grpo_dev.localcluster.simcluster import SimulatedCluster

__all__ = ["BuildError", "ControlPlane", "ControlPlaneError", "SimulatedCluster", "tool_path"]
