"""The one module that talks to the Kubernetes API (children, pods, the GRPORun's status).

Children are applied with server-side apply under one field manager, so a re-apply converges and never
fights over fields it does not own (KubeRay writes the RayCluster's status; we never do).
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.render import names

FIELD_MANAGER = "grpo-operator"


class Kube:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client
        self._dynamic: DynamicClient | None = None
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.apps = client.AppsV1Api(api_client)

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:  # discovery on first use, not at import or start
            self._dynamic = DynamicClient(self._api)  # type: ignore[no-untyped-call]
        return self._dynamic

    def apply(self, manifest: dict[str, Any]) -> None:
        resource = self.dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        self.dynamic.server_side_apply(  # type: ignore[no-untyped-call]
            resource, body=manifest, namespace=manifest["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER, force_conflicts=True,
        )  # fmt: skip

    def ray_cluster(self, namespace: str, run: str) -> dict[str, Any] | None:
        try:
            found = cast(dict[str, Any], self.custom.get_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayclusters", names.ray_cluster(run)
            ))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def delete_ray_cluster(self, namespace: str, run: str) -> bool:
        try:
            self.custom.delete_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayclusters", names.ray_cluster(run), propagation_policy="Foreground"
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def run_pods(self, namespace: str, run: str) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{names.RUN_LABEL}={run}")
        return list(pods.items)

    def reward_deployment(self, namespace: str, run: str) -> client.V1Deployment | None:
        try:
            deployment: client.V1Deployment = self.apps.read_namespaced_deployment(names.reward_service(run), namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return deployment

    def patch_status(self, namespace: str, run: str, status: dict[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, run, {"status": status}
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report on
                raise


__all__ = ["FIELD_MANAGER", "Kube"]
