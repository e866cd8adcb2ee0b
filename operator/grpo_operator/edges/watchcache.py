"""The runs and their children as the operator's own watches last saw them: reads that cost no API request.

A reconcile needs the run, its RayCluster, the RayCluster's pods and the reward Deployment; read with a GET or a
LIST each, that is four requests per run per timer tick. controller/handlers.py keeps kopf indices of all four
(fed by the watch streams kopf keeps open anyway) and `Kube` answers from them through its `KubeCache`:

- kopf fills every index from its initial listing before it calls any other handler, and an index handler sees
  each object's events in order, so a stored body is one whole version of the object (docs/integrations/kopf.md).
- a child is stored as far as the reconcile reads it (`slim_cluster`, `slim_pod`, `slim_deployment`; never the
  pod templates, the bulk of each object), a pod or a Deployment as the client's model (`V1Pod`,
  `V1Deployment`, the type a GET returns), converted once per watch event rather than per reconcile.
- a miss is not an answer for the run or its RayCluster and Deployment: the object may have been created by this
  very reconcile, its ADDED event still in flight, so `Kube` then GETs it. Pods are read from the index alone:
  KubeRay creates them, never this operator, so the index has every pod the watch has reported.

Pure: it holds the index mappings kopf passes to the handlers (`Mapping[key, Collection[value]]`) and never
imports kopf.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from grpo_operator.edges.childstate import GPU_RESOURCE
from grpo_operator.render import names

Index = Mapping[Any, Collection[Any]]


@functools.cache
def _deserializer() -> client.ApiClient:
    return client.ApiClient()  # only its model mapping is used; made on the first watched pod, not at import


def as_model(obj: Mapping[str, Any], kind: str) -> Any:
    """A watched object (JSON as the API server sent it) as the client's model of `kind`, e.g. "V1Pod"."""
    return _deserializer().deserialize(json.dumps(obj, default=str), kind, "application/json")


def trimmed(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object without its managedFields (the largest part of a pod, read by nothing here)."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {**{k: v for k, v in body.items() if k != "metadata"}, "metadata": meta}


def _meta(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {
        k: meta[k]
        for k in (
            "name",
            "namespace",
            "uid",
            "labels",
            "annotations",
            "ownerReferences",
            "resourceVersion",
            "generation",
            "deletionTimestamp",
        )
        if k in meta
    }


def slim_cluster(body: Mapping[str, Any]) -> dict[str, Any]:
    """A RayCluster as the reconcile reads it: its labels, `spec.suspend` (childstate.admission_queue) and the
    status KubeRay writes (childstate.cluster_ready)."""
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": _meta(body),
        "spec": {"suspend": (body.get("spec") or {}).get("suspend")},
        "status": body.get("status") or {},
    }


def slim_pod(body: Mapping[str, Any]) -> Any:
    """A pod as childstate.pod_problems, trainer_image and gpu_observation read it: its name, node, status, grace
    period and the GPUs its containers ask for."""
    spec = body.get("spec") or {}
    return as_model(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": _meta(body),
            "spec": {
                "nodeName": spec.get("nodeName"),
                "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds"),
                "containers": [_gpu_only(c) for c in spec.get("containers") or []],
            },
            "status": body.get("status") or {},
        },
        "V1Pod",
    )


def _gpu_only(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container as childstate.gpu_observation reads it: its name and its GPU request and limit."""
    resources = container.get("resources") or {}
    kept = {
        part: {GPU_RESOURCE: resources[part][GPU_RESOURCE]}
        for part in ("requests", "limits")
        if GPU_RESOURCE in (resources.get(part) or {})
    }
    return {"name": container.get("name", ""), "resources": kept}


def slim_deployment(body: Mapping[str, Any]) -> Any:
    """A Deployment as childstate.reward_observation reads it: its name and status."""
    return as_model(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(body),
            "spec": {"selector": {}, "template": {}},  # the model requires both, nothing reads them
            "status": body.get("status") or {},
        },
        "V1Deployment",
    )


def run_key(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, run) for an object carrying the run label (render/names.py RUN_LABEL)."""
    meta = body.get("metadata") or {}
    run = (meta.get("labels") or {}).get(names.RUN_LABEL)
    return (str(meta.get("namespace")), str(run)) if run else None


def _values(index: Index, key: Any) -> list[Any]:
    """A snapshot of one index entry. kopf mutates its indices on its event loop while reconciles read them on
    worker threads: a copy that met a concurrent change is taken again."""
    for _ in range(5):
        try:
            return list(index.get(key) or ())
        except RuntimeError:  # "changed size during iteration"
            continue
    return list(index.get(key) or ())


@dataclass(frozen=True)
class WatchView:
    """The four indices, keyed (namespace, name) for runs, (namespace, run) for children."""

    runs: Index
    clusters: Index
    pods: Index
    deployments: Index

    def run(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = _values(self.runs, (namespace, name))
        return found[0] if found else None

    def ray_cluster(self, namespace: str, run: str) -> dict[str, Any] | None:
        wanted = names.ray_cluster(run)
        return next((c for c in _values(self.clusters, (namespace, run)) if c["metadata"].get("name") == wanted), None)

    def run_pods(self, namespace: str, run: str) -> list[client.V1Pod]:
        return sorted(_values(self.pods, (namespace, run)), key=lambda p: p.metadata.name or "")

    def reward_deployment(self, namespace: str, run: str) -> client.V1Deployment | None:
        wanted = names.reward_service(run)
        return next((d for d in _values(self.deployments, (namespace, run)) if d.metadata.name == wanted), None)
