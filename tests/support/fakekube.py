"""A fake of `edges.kube.Kube` for the reconciler's unit tier: runs and GRPORuntimes held as the API server holds
them, every call recorded in order, no network. It imitates what the reconcile reads back from the API server:

- `patch_status` is a JSON merge patch (RFC 7386: a null removes its key) onto the status subresource, as
  `Kube.patch_status` sends it; the run's resourceVersion moves on each write, and a write onto another
  resourceVersion is refused with `StatusConflict` (the API server's 409).
- What is stored comes back as Go's encoding/json writes it: a float with no fraction loses its ".0"
  (k8s.io/apimachinery pkg/util/json decodes a number into float64 and marshals 80.0 as 80).
- The status key Secret is made once, on first read, as `Kube.status_key` makes it.

No RayCluster, pod or reward Deployment ever exists here, so a run stays before its job and the Ray Jobs API is
never called: what a test checks is what the reconciler resolves, records, applies and writes.
"""

from __future__ import annotations

import copy
import json
import secrets
from typing import Any

from grpo_operator.edges.kube import StatusConflict


def _as_stored(value: Any) -> Any:
    """`value` as the API server writes it back (JSON, integral floats as integers)."""
    if isinstance(value, dict):
        return {k: _as_stored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_stored(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def merge_patch(into: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386: a null removes its key, at any depth (a mapping merged where there was none is merged into {})."""
    out = dict(into)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merge_patch(out[key] if isinstance(out.get(key), dict) else {}, value)
        else:
            out[key] = value
    return out


class FakeKube:
    def __init__(self) -> None:
        self.runs: dict[tuple[str, str], dict[str, Any]] = {}
        self.runtimes: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.applied: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name) -> the last manifest applied
        self._key: bytes | None = None
        self._tokens: set[tuple[str, str]] = set()
        self._version = 100

    # --- what a test sets up and changes, as a user or the platform team would with kubectl -----------------
    def put_run(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        self.runs[(meta["namespace"], meta["name"])] = _as_stored(json.loads(json.dumps(body)))

    def put_runtime(self, doc: dict[str, Any]) -> None:
        self._version += 1
        doc = json.loads(json.dumps(doc))
        doc["metadata"]["resourceVersion"] = str(self._version)
        self.runtimes[doc["metadata"]["name"]] = _as_stored(doc)

    def edit_spec(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A spec edit: the generation moves, as the API server moves it on a spec change."""
        body = copy.deepcopy(self.runs[(namespace, name)])
        body["spec"] = merge_patch(body["spec"], patch)
        body["metadata"]["generation"] = int(body["metadata"].get("generation", 1)) + 1
        self.put_run(body)

    def edit_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A merge patch of the status subresource by someone other than the operator."""
        body = copy.deepcopy(self.runs[(namespace, name)])
        body["status"] = merge_patch(body.get("status") or {}, patch)
        self.put_run(body)

    def status_of(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.runs[(namespace, name)].get("status") or {})

    # --- Kube's interface, as the reconciler uses it ---------------------------------------------------------
    def get_run(self, namespace: str, run: str) -> dict[str, Any] | None:
        self.calls.append(f"get run {run}")
        found = self.runs.get((namespace, run))
        return copy.deepcopy(found) if found is not None else None

    get_run_fresh = get_run

    def runtime(self, name: str) -> dict[str, Any] | None:
        self.calls.append(f"get grporuntime {name}")
        found = self.runtimes.get(name)
        return copy.deepcopy(found) if found is not None else None

    def status_key(self, namespace: str, name: str) -> bytes:
        if self._key is None:
            self.calls.append(f"get secret {namespace}/{name}")
            self._key = secrets.token_bytes(32)
        return self._key

    def ray_auth_token(self, namespace: str, run: str, uid: str | None, *, create: bool = True) -> str | None:
        if create:
            self._tokens.add((namespace, run))
        return "token" if (namespace, run) in self._tokens else None

    def ray_cluster(self, namespace: str, run: str) -> dict[str, Any] | None:
        return None

    def run_pods(self, namespace: str, run: str) -> list[Any]:
        return []

    def reward_deployment(self, namespace: str, run: str) -> Any:
        return None

    def kueue_workloads(self, namespace: str, cluster: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    def pod_template_problems(self, namespace: str, children: list[dict[str, Any]]) -> list[str]:
        return []

    def dry_run_problems(self, children: list[dict[str, Any]]) -> list[str]:
        return []

    def apply(self, manifest: dict[str, Any]) -> None:
        self.calls.append(f"apply {manifest['kind']} {manifest['metadata']['name']}")
        self.applied[(manifest["kind"], manifest["metadata"]["name"])] = copy.deepcopy(manifest)

    def create(self, manifest: dict[str, Any]) -> bool:
        self.calls.append(f"create {manifest['kind']} {manifest['metadata']['name']}")
        return True

    def delete_ray_cluster(self, namespace: str, run: str) -> bool:
        self.calls.append(f"delete RayCluster {run}")
        return True

    def patch_status(
        self, namespace: str, run: str, status: dict[str, Any], resource_version: str | None = None
    ) -> str | None:
        self.calls.append(f"patch status {run}")
        body = self.runs[(namespace, run)]
        if resource_version is not None and resource_version != body["metadata"]["resourceVersion"]:
            raise StatusConflict(f"{namespace}/{run}: the GRPORun changed since resourceVersion {resource_version}")
        self.edit_status(namespace, run, status)
        return str(self.runs[(namespace, run)]["metadata"]["resourceVersion"])
