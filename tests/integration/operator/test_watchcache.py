"""A watched run costs the API server nothing to reconcile while nothing changes, and a reconcile never starts
from a watch's copy older than the operator's own last status write.

The reconciler runs in this process against the real API server, with the `Kube` and `KubeCache` the operator uses
and a `WatchView` over dicts shaped like kopf's indices (key -> collection of values), fed here with what the
operator's watches would have delivered (controller/handlers.py feeds the real ones). Every request the
client sends is recorded at `ApiClient.call_api`, the one method all of the client's calls go through.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.controller.reconciler import Reconciler
from grpo_operator.edges.kube import Kube
from grpo_operator.edges.kubecache import KubeCache
from grpo_operator.edges.watchcache import WatchView, slim_cluster, slim_deployment, slim_pod, trimmed
from grpo_operator.render import names
from kubernetes import config

from tests.support.operator_harness import get_run, manifest

pytestmark = pytest.mark.integration
RUN = "watched"


def recorded(kube: Kube) -> list[str]:
    """The requests `kube` sends from now on, as "METHOD path"."""
    api = kube._api
    sent: list[str] = []
    call = api.call_api

    def counting(method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # ApiClient.call_api(method, url, ...)
        sent.append(f"{method} {url}")
        return call(method, url, *args, **kwargs)

    api.call_api = counting  # type: ignore[method-assign]
    return sent


Indices = dict[str, dict[Any, list[Any]]]


def feed(indices: Indices, kubectl: Callable[..., Any], namespace: str) -> None:
    """What the operator's watches hold once they have seen every change so far."""

    def objects(kind: str) -> list[dict[str, Any]]:
        out = kubectl("get", kind, "-n", namespace, "-l", names.RUN_LABEL, "-o", "json").stdout
        return list(json.loads(out)["items"])

    key = (namespace, RUN)
    indices["runs"][key] = [trimmed(get_run(kubectl, namespace, RUN))]
    indices["clusters"][key] = [slim_cluster(c) for c in objects("rayclusters")]
    indices["pods"][key] = [slim_pod(p) for p in objects("pods")]
    indices["deployments"][key] = [slim_deployment(d) for d in objects("deployments")]


def test_an_unchanged_watched_run_is_reconciled_without_one_request_and_never_from_a_copy_older_than_its_write(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any]
) -> None:
    # Ray on a closed port: the run waits for its RayCluster (never ready here), so only the API server is used.
    settings = OperatorSettings(ray_address="http://127.0.0.1:9")
    kubectl("apply", "-f", "-", input=manifest(RUN, namespace))

    def reconciler(kube: Kube) -> Reconciler:
        return Reconciler(kube=kube, settings=settings)

    plain = Kube(
        config.new_client_from_config(str(control_plane.kubeconfig)), KubeCache(resync_seconds=600, token_seconds=0)
    )
    cached = Kube(config.new_client_from_config(str(control_plane.kubeconfig)), KubeCache(resync_seconds=600))
    indices: Indices = {"runs": {}, "clusters": {}, "pods": {}, "deployments": {}}
    view = cached.cache.view = WatchView(**indices)
    reconciler(cached).reconcile({"metadata": {"namespace": namespace, "name": RUN}})  # children made, status written
    reconciler(cached).reconcile({"metadata": {"namespace": namespace, "name": RUN}})  # the cluster they made observed
    first = get_run(kubectl, namespace, RUN)
    assert first["status"]["phase"] in ("Pending", "Provisioning"), first["status"]

    # The same unchanged run, its children applied already, reconciled with every read a request (the operator
    # before its watches: the run, its token Secret, its RayCluster, its pods) ...
    reconciler(plain).reconcile({"metadata": {"namespace": namespace, "name": RUN}})
    by_request = recorded(plain)
    reconciler(plain).reconcile({"metadata": {"namespace": namespace, "name": RUN}})
    # ... and from the watches, once they have seen it all: nothing to send.
    feed(indices, kubectl, namespace)
    from_watch = recorded(cached)
    reconciler(cached).reconcile({"metadata": {"namespace": namespace, "name": RUN}})
    print(f"requests for one reconcile of an unchanged run: {len(by_request)} by request, {len(from_watch)} watched")
    assert any("/grporuns/" in r for r in by_request) and any("/rayclusters/" in r for r in by_request), by_request
    assert from_watch == []
    assert get_run(kubectl, namespace, RUN)["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    # The operator writes the status; the watch still holds the copy from before that write.
    stale = view.run(namespace, RUN)
    assert stale is not None
    written = cached.patch_status(
        namespace, RUN, {"message": "written by this operator"}, resource_version=stale["metadata"]["resourceVersion"]
    )
    from_watch.clear()
    current = cached.get_run(namespace, RUN)
    assert current is not None and current["status"]["message"] == "written by this operator"
    assert current["metadata"]["resourceVersion"] == written
    assert len(from_watch) == 1 and from_watch[0].startswith("GET ") and from_watch[0].endswith(f"/grporuns/{RUN}")
    # Once the watch has that version, it is served from there again.
    feed(indices, kubectl, namespace)
    from_watch.clear()
    assert cached.get_run(namespace, RUN) is view.run(namespace, RUN)
    assert from_watch == []

    # A process that has never read or written the run (a new run, or the first reconcile after a restart) takes
    # the watch's copy: nothing it wrote can be missing from it.
    restarted = Kube(config.new_client_from_config(str(control_plane.kubeconfig)), KubeCache(resync_seconds=600))
    restarted.cache.view = view
    sent = recorded(restarted)
    assert restarted.get_run(namespace, RUN) is view.run(namespace, RUN)
    assert sent == []
