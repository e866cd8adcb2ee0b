"""`grpo doctor`'s control-plane checks: the GRPORun CRD, the grpo operator's Deployment (ready, image, what it
watches) and KubeRay (its CRDs carry every field a run sets, its operator is recent enough and shares our cluster
domain).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from grpo_operator.api import VERSION
from grpo_operator.cli.doctorchecks.model import (
    GRPORUN_CRD,
    KUBERAY_INSTALL,
    MIN_KUBERAY,
    OPERATOR_INSTALL,
    OPERATOR_LABEL,
    RAYCLUSTER_CRD,
    Check,
    Cluster,
    Target,
    Verdict,
    containers,
    env_of,
    name_of,
    operator_deployment,
    replicas_ready,
    unread,
)
from grpo_operator.render import RenderSettings


def grporun_crd(cluster: Cluster) -> Check:
    crd = cluster.crds.get(GRPORUN_CRD)
    if crd is None:
        return unread(cluster, "GRPORun CRD", "customresourcedefinitions") or Check(
            "GRPORun CRD",
            Verdict.FAIL,
            f"no CustomResourceDefinition {GRPORUN_CRD}",
            f"{OPERATOR_INSTALL}, or kubectl apply --server-side -f crds/",
        )
    served = [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("served")]
    if VERSION not in served:
        return Check(
            "GRPORun CRD",
            Verdict.FAIL,
            f"{GRPORUN_CRD} serves {', '.join(served) or 'no version'}, not {VERSION}",
            "install the CRD of this grpo release: kubectl apply --server-side -f crds/",
        )
    return Check("GRPORun CRD", Verdict.OK, f"{GRPORUN_CRD} serves {VERSION}")


def _running_images(cluster: Cluster, deployment: dict[str, Any]) -> list[str]:
    """The imageIDs (digests) the Deployment's pods report running, as their kubelets resolved the image."""
    selector = (deployment["spec"].get("selector") or {}).get("matchLabels") or {}
    namespace = deployment["metadata"].get("namespace")
    found = set()
    for pod in cluster.pods:
        labels = pod["metadata"].get("labels") or {}
        if pod["metadata"].get("namespace") == namespace and selector and selector.items() <= labels.items():
            statuses = pod.get("status", {}).get("containerStatuses") or []
            found |= {str(s["imageID"]) for s in statuses if s.get("name") == "operator" and s.get("imageID")}
    return sorted(found)


def operator(cluster: Cluster) -> Check:
    key, value = OPERATOR_LABEL
    deployment = operator_deployment(cluster)
    if deployment is not None:
        ready, wanted = replicas_ready(deployment)
        container = containers(deployment)[0]
        image = str(container.get("image"))
        args = container.get("args", [])
        watching = [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")] or ["all namespaces"]
        running = _running_images(cluster, deployment)
        what = f"Deployment {name_of(deployment)}: {ready}/{wanted} ready, image {image} (running "
        what += f"{', '.join(running) or 'no imageID reported yet'}), watching {', '.join(watching)}"
        if ready < 1:
            return Check(
                "operator", Verdict.FAIL, what, f"kubectl -n {deployment['metadata']['namespace']} describe pods"
            )
        if "@sha256:" not in image:
            return Check(
                "operator",
                Verdict.WARN,
                f"{what}: the image is a mutable tag without a digest, so a re-pushed tag changes what runs",
                "pin it: set the chart's image.digest to the image's sha256 digest (the running imageID above)",
            )
        return Check("operator", Verdict.OK, what)
    if cannot := unread(cluster, "operator", "deployments", "grporuns"):
        return cannot
    current = [
        r
        for r in cluster.runs
        if r["metadata"].get("generation") is not None
        and r.get("status", {}).get("observedGeneration") == r["metadata"]["generation"]
    ]
    if current:
        return Check(
            "operator",
            Verdict.OK,
            f"no Deployment labelled {key}={value}; GRPORun {name_of(current[0])} has a status for its current "
            "generation: an operator outside the cluster writes it",
        )
    return Check(
        "operator",
        Verdict.FAIL,
        f"no Deployment labelled {key}={value} and no GRPORun status written",
        OPERATOR_INSTALL,
    )


def schema_gaps(value: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """Paths in `value` the structural `schema` has no field for: the API server drops them silently."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                yield from schema_gaps(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from schema_gaps(item, extra, f"{path}.{key}")
            elif properties is not None:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            yield from schema_gaps(item, schema["items"], f"{path}[]")


def kuberay_crds(cluster: Cluster, target: Target | None) -> Check:
    crd = cluster.crds.get(RAYCLUSTER_CRD)
    if crd is None:
        return unread(cluster, "KubeRay CRDs", "customresourcedefinitions") or Check(
            "KubeRay CRDs", Verdict.FAIL, f"no CustomResourceDefinition {RAYCLUSTER_CRD}", KUBERAY_INSTALL
        )
    versions = {v["name"]: v for v in crd.get("spec", {}).get("versions", []) if v.get("served")}
    if "v1" not in versions:
        return Check(
            "KubeRay CRDs", Verdict.FAIL, f"{RAYCLUSTER_CRD} serves {', '.join(versions)}, not v1", KUBERAY_INSTALL
        )
    if target is not None:
        schema = versions["v1"].get("schema", {}).get("openAPIV3Schema", {}).get("properties", {}).get("spec", {})
        gaps = sorted(set(schema_gaps(target.ray_cluster_spec(), schema, "spec")))
        if gaps:
            return Check(
                "KubeRay CRDs",
                Verdict.FAIL,
                f"{RAYCLUSTER_CRD} has no field {', '.join(gaps[:3])}{' ...' if len(gaps) > 3 else ''}, which "
                f"{target.run.metadata.name}'s RayCluster sets: the API server would drop it (an older KubeRay CRD)",
                f"apply the CRDs of KubeRay {'.'.join(map(str, MIN_KUBERAY))} or later: {KUBERAY_INSTALL}",
            )
    return Check(
        "KubeRay CRDs", Verdict.OK, f"{RAYCLUSTER_CRD} serves v1" + (" with every field the run sets" * bool(target))
    )


def _version(image: str) -> tuple[int, ...] | None:
    found = re.search(r":v?(\d+)\.(\d+)\.(\d+)", image)
    return tuple(int(part) for part in found.groups()) if found else None


def kuberay_operator(cluster: Cluster) -> Check:
    found = [
        (d, c) for d in cluster.deployments for c in containers(d) if "kuberay/operator" in str(c.get("image", ""))
    ]
    if not found:
        return unread(cluster, "KubeRay operator", "deployments") or Check(
            "KubeRay operator", Verdict.FAIL, "no Deployment runs a kuberay/operator image", KUBERAY_INSTALL
        )
    deployment, container = found[0]
    ready, wanted = replicas_ready(deployment)
    image = str(container["image"])
    version = _version(image)
    what = f"Deployment {name_of(deployment)}: {ready}/{wanted} ready, image {image}"
    if ready < 1:
        return Check("KubeRay operator", Verdict.FAIL, what, f"kubectl -n {deployment['metadata']['namespace']} logs")
    minimum = ".".join(map(str, MIN_KUBERAY))
    if version is None or version < MIN_KUBERAY:
        return Check(
            "KubeRay operator",
            Verdict.FAIL if version else Verdict.WARN,
            f"{what}: version {'.'.join(map(str, version)) if version else 'unknown (no x.y.z tag)'}; runs need "
            f"{minimum} or later",
            f"upgrade KubeRay: {KUBERAY_INSTALL}",
        )
    ours = operator_setting(cluster, "GRPO_CLUSTER_DOMAIN") or RenderSettings().cluster_domain
    theirs = env_of(container, "CLUSTER_DOMAIN") or "cluster.local"
    if theirs != ours:
        return Check(
            "KubeRay operator",
            Verdict.FAIL,
            f"{what}: CLUSTER_DOMAIN {theirs}, the grpo operator's {ours}",
            "set the grpo chart's clusterDomain (GRPO_CLUSTER_DOMAIN) to KubeRay's CLUSTER_DOMAIN",
        )
    return Check("KubeRay operator", Verdict.OK, f"{what}, CLUSTER_DOMAIN {theirs}")


def operator_setting(cluster: Cluster, name: str) -> str | None:
    """The grpo operator Deployment's environment variable `name` (a GRPO_* setting), None when unset."""
    deployment = operator_deployment(cluster)
    if deployment is None:
        return None
    return next((s for c in containers(deployment) if (s := env_of(c, name))), None)
