"""The one module that talks to the Kubernetes API (children, pods, the GRPORun's status).

Children are applied with server-side apply under one field manager, so a re-apply converges and never
fights over fields it does not own (KubeRay writes the RayCluster's status; we never do). What it remembers
between reconciles (applied manifests, tokens, the watches' copies) is its `cache` (edges/kubecache.py).

The run's Ray auth token is the one child made here rather than rendered: a random value has no place in the
pure core. `ray_auth_token` creates the Secret once (owned by the run, immutable) and reads it back after; a
Secret of that name made before the run is used as it is (bring your own token). The value goes nowhere else.
`secret_values` reads the Secrets a run's `secretEnv` names, by name, only to redact the logs the operator keeps.
The operator's status key (`status_key`, what seals each run's `status.runtime`: planning/runtimeseal.py) is made
the same way, once per cluster, in the operator's own namespace, and read once per process.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
from collections.abc import Sequence
from typing import Any, cast

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.api.runtime import RUNTIME_PLURAL
from grpo_operator.edges.errors import Conflict, Refused, Unavailable
from grpo_operator.edges.kubecache import KubeCache
from grpo_operator.render import names
from grpo_operator.render.auth import ray_auth_secret

FIELD_MANAGER = "grpo-operator"
# Verdicts kept (a digest and a line each, about 200 bytes): a run has two or three pod templates, so this holds
# some thousands of runs, each dry-run once rather than at every resync.
TEMPLATE_VERDICTS = 16384

log = logging.getLogger("grpo_operator")


def pod_templates(children: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(where, template) for every pod template the children carry: the RayCluster's head and worker
    groups, and `spec.template` of any other child (the reward Deployment)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for child in children:
        label = f"{child['kind']} {child['metadata']['name']}"
        spec = child.get("spec") or {}
        if child["kind"] == "RayCluster":
            found.append((f"{label} head group", spec["headGroupSpec"]["template"]))
            found += [
                (f"{label} worker group {g['groupName']}", g["template"]) for g in spec.get("workerGroupSpecs", [])
            ]
        elif isinstance(spec.get("template"), dict) and "spec" in spec["template"]:
            found.append((label, spec["template"]))
    return found


def _server_words(exc: ApiException, strip: str = "") -> str:
    """The API server's words for a refusal, one line: its causes, else its message."""
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    causes = (body.get("details") or {}).get("causes") or []
    said = "; ".join(f"{str(c.get('field', '')).removeprefix(strip)}: {c.get('message', '')}" for c in causes)
    return (said or str(body.get("message") or exc.reason))[:900]


def _refusal(where: str, exc: ApiException) -> str:
    return f"{where}: the API server refuses its pod template: {_server_words(exc, 'template.')}"


def dry_run_unavailable(where: str, exc: ApiException) -> Unavailable | None:
    """A dry run the API server could not answer (a 5xx: its own error, a webhook it could not call; a 429): no
    verdict on the child, which is not applied; the reconcile keeps what it has and tries again (edges/errors.py)."""
    if exc.status is None or not (exc.status >= 500 or exc.status == 429):
        return None
    return Unavailable(
        f"the API server answered {exc.status} to the dry run of {where}: {_server_words(exc)}; nothing is applied "
        "until it answers, and the check is tried again at the next reconcile"
    )


def refusal(where: str, exc: ApiException) -> str:
    """One line naming what the API server refused and why, in its words."""
    return f"{where}: the API server refuses it: {_server_words(exc)}"


# The key in the operator's status key Secret, and its size (HMAC-SHA256's block is 64 bytes; 32 is its strength).
STATUS_KEY = "key"
STATUS_KEY_BYTES = 32


def _key_forbidden(namespace: str, name: str, verb: str, exc: ApiException) -> str:
    return (
        f"the operator may not {verb} its status key, Secret {namespace}/{name} ({_server_words(exc)}); grant its "
        f"ServiceAccount get on that Secret and create on secrets in {namespace} (the chart's Role <release>-status-key), "
        "or set GRPO_OPERATOR_NAMESPACE to the namespace it runs in"
    )


KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


class ChildRefused(Refused):
    """The API server refused a child of the run (400 or 422): the spec cannot run as it is."""


class Kube:
    def __init__(self, api_client: client.ApiClient, cache: KubeCache | None = None) -> None:
        self._api = api_client
        self.cache = cache if cache is not None else KubeCache()
        self._dynamic: DynamicClient | None = None
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.apps = client.AppsV1Api(api_client)
        self._template_verdicts: dict[str, str | None] = {}
        self._child_verdicts: dict[str, str | None] = {}
        self._status_key: bytes | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:  # discovery on first use, not at import or start
            self._dynamic = DynamicClient(self._api)  # type: ignore[no-untyped-call]
        return self._dynamic

    def apply(self, manifest: dict[str, Any]) -> None:
        """Server-side apply `manifest`, unless this very manifest went out within the cache's resync period; a
        child the API server refuses raises `ChildRefused` in its words."""
        if self.cache.applied_recently(manifest):
            return
        resource = self.dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        try:
            self.dynamic.server_side_apply(  # type: ignore[no-untyped-call]
                resource,
                body=manifest,
                namespace=manifest["metadata"].get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )
        except ApiException as exc:
            if exc.status in (400, 422):
                raise ChildRefused(refusal(f"{manifest['kind']} {manifest['metadata'].get('name')}", exc)) from exc
            raise
        self.cache.applied(manifest)

    def record(self, manifest: dict[str, Any]) -> str | None:
        """Apply a child that only records (an evidence bundle, a log tail), best effort: None when written, else
        the API server's words (a quota's 403, a webhook's denial, a 422, a 5xx), so the caller says so and goes on
        to the actions after it (edges/errors.py)."""
        where = f"{manifest.get('kind', 'object')} {(manifest.get('metadata') or {}).get('name', '?')}"
        try:
            self.apply(manifest)
        except ChildRefused as exc:
            return str(exc)
        except ApiException as exc:
            return refusal(where, exc)
        return None

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create `manifest` as it is (a suspended RayCluster under a Kueue queue, render/queueing.py); False when
        it exists already. Fields set here are not owned by the server-side apply of later reconciles."""
        resource = self.dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        try:
            self.dynamic.create(
                resource,
                body=manifest,
                namespace=manifest["metadata"].get("namespace"),  # type: ignore[no-untyped-call]
                field_manager=FIELD_MANAGER,
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status in (400, 422):
                raise ChildRefused(refusal(f"{manifest['kind']} {manifest['metadata'].get('name')}", exc)) from exc
            raise
        return True

    def pod_template_problems(self, namespace: str, children: list[dict[str, Any]]) -> list[str]:
        """Kubernetes' own verdict on every pod template the children carry, before any child exists: each is
        sent as a PodTemplate with dryRun=All (validated like a pod's spec, ValidatePodTemplateSpec, and never
        stored). A verdict is kept per template content, so an unchanged run costs no request. Without RBAC
        for it (403) the check is skipped with one warning: it guards, it does not gate the operator. A 5xx or 429
        is no verdict: `Unavailable` (`dry_run_unavailable`), nothing kept."""
        problems = []
        for where, template in pod_templates(children):
            digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
            if digest not in self._template_verdicts:
                self._template_verdicts[digest] = self._dry_run_template(namespace, where, template)
                if len(self._template_verdicts) > TEMPLATE_VERDICTS:
                    self._template_verdicts.pop(next(iter(self._template_verdicts)))
            problem = self._template_verdicts[digest]
            if problem:
                problems.append(problem)
        return problems

    def dry_run_problems(self, children: list[dict[str, Any]]) -> list[str]:
        """The API server's verdict on every child as a whole (metadata included: a label value from the spec, a
        name), by a server-side apply with dryRun=All, before the first child exists. Kept per content; a 5xx or
        429 is `Unavailable`, nothing kept."""
        problems = []
        for child in children:
            digest = hashlib.sha256(json.dumps(child, sort_keys=True).encode()).hexdigest()
            if digest not in self._child_verdicts:
                self._child_verdicts[digest] = self._dry_run_child(child)
                if len(self._child_verdicts) > TEMPLATE_VERDICTS:
                    self._child_verdicts.pop(next(iter(self._child_verdicts)))
            problem = self._child_verdicts[digest]
            if problem:
                problems.append(problem)
        return problems

    def _dry_run_child(self, child: dict[str, Any]) -> str | None:
        resource = self.dynamic.resources.get(api_version=child["apiVersion"], kind=child["kind"])
        try:
            self.dynamic.server_side_apply(  # type: ignore[no-untyped-call]
                resource,
                body=child,
                namespace=child["metadata"].get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
                dry_run="All",
            )
        except ApiException as exc:
            where = f"{child['kind']} {child['metadata'].get('name')}"
            if exc.status in (400, 422):
                return refusal(where, exc)
            if (unavailable := dry_run_unavailable(where, exc)) is not None:
                raise unavailable from None
            if exc.status == 403:
                log.warning("cannot dry-run %s (%s); its refusal shows on apply instead", child["kind"], exc.reason)
                return None
            raise
        return None

    def _dry_run_template(self, namespace: str, where: str, template: dict[str, Any]) -> str | None:
        body: Any = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "template": template,
            "metadata": {"name": "grpo-template-check", "namespace": namespace},
        }
        try:
            self.core.create_namespaced_pod_template(namespace, body, dry_run="All", field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if exc.status in (400, 422):
                return _refusal(where, exc)
            if (unavailable := dry_run_unavailable(f"the pod template of {where}", exc)) is not None:
                raise unavailable from None
            if exc.status == 403:
                log.warning("cannot dry-run pod templates (%s); grant create on podtemplates to check them", exc.reason)
                return None
            raise
        return None

    def ray_cluster(self, namespace: str, run: str) -> dict[str, Any] | None:
        # A miss in the watch is not an answer: this very reconcile may have just created it.
        found = self.cache.view.ray_cluster(namespace, run) if self.cache.view is not None else None
        if found is not None:
            return found
        try:
            found = cast(
                dict[str, Any],
                self.custom.get_namespaced_custom_object(
                    "ray.io", "v1", namespace, "rayclusters", names.ray_cluster(run)
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def kueue_workloads(self, namespace: str, cluster: dict[str, Any]) -> list[dict[str, Any]]:
        """Kueue's Workloads of a RayCluster (Kueue labels each with its job's UID, `kueue.x-k8s.io/job-uid`:
        sigs.k8s.io/kueue v0.17.0 pkg/controller/jobframework/reconciler.go:1131). Read only while the cluster is
        suspended under a queue; none where Kueue is not installed (404) or the operator may not list them (403)."""
        uid = (cluster.get("metadata") or {}).get("uid")
        if not uid:
            return []
        try:
            found = self.custom.list_namespaced_custom_object(
                KUEUE_GROUP, "v1beta2", namespace, "workloads", label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}"
            )
        except ApiException as exc:
            if exc.status in (403, 404):
                log.info(
                    "cannot read Kueue's Workloads in %s (%s): the eviction reason is not known", namespace, exc.status
                )
                return []
            raise
        return list(cast(dict[str, Any], found).get("items") or [])

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
        if self.cache.view is not None:  # KubeRay creates them, never this operator: the watch has them all
            return self.cache.view.run_pods(namespace, run)
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{names.RUN_LABEL}={run}")
        return list(pods.items)

    def reward_deployment(self, namespace: str, run: str) -> client.V1Deployment | None:
        found = self.cache.view.reward_deployment(namespace, run) if self.cache.view is not None else None
        if found is not None:
            return found
        try:
            deployment: client.V1Deployment = self.apps.read_namespaced_deployment(names.reward_service(run), namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return deployment

    def ray_auth_token(self, namespace: str, run: str, uid: str | None, *, create: bool = True) -> str | None:
        """The run's Ray auth token, from its Secret; made first (when `create`) if there is none yet."""
        known = self.cache.token(namespace, run, uid)
        if known is not None:
            return known
        token = self._read_token(namespace, run, uid, create=create)
        self.cache.remember_token(namespace, run, uid, token)
        return token

    def _read_token(self, namespace: str, run: str, uid: str | None, *, create: bool) -> str | None:
        name = names.ray_auth_secret(run)
        try:
            secret: client.V1Secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            if not create:
                return None
            try:
                body: Any = ray_auth_secret(namespace, run, uid, secrets.token_urlsafe(32))  # 256 bits
                secret = self.core.create_namespaced_secret(namespace, body)
            except ApiException as conflict:
                if conflict.status != 409:  # made meanwhile (a concurrent reconcile): read that one
                    raise
                secret = self.core.read_namespaced_secret(name, namespace)
        raw = (secret.data or {}).get(names.AUTH_TOKEN_KEY)
        if not raw:
            raise RuntimeError(
                f"Secret {namespace}/{name} has no key {names.AUTH_TOKEN_KEY!r}: delete it to get a new one"
            )
        return base64.b64decode(raw).decode()

    def secret_values(self, namespace: str, refs: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
        """The values of the Secret keys `refs` ((Secret, key) in `namespace`) as they are now, for redacting a log the
        operator keeps; and, for each that could not be read, what and why (no such Secret or key, no RBAC, the API
        server unreachable). Best effort: it never raises, and nothing is kept (a rotated key is read anew)."""
        keys: dict[str, list[str]] = {}
        for name, key in refs:
            keys.setdefault(name, []).append(key)
        values: list[str] = []
        missed: list[str] = []
        for name, wanted in keys.items():
            try:
                secret: client.V1Secret = self.core.read_namespaced_secret(name, namespace)
            except ApiException as exc:
                missed += [f"Secret {namespace}/{name} key {key} ({exc.status} {exc.reason})" for key in wanted]
                continue
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                missed += [f"Secret {namespace}/{name} key {key} ({type(exc).__name__})" for key in wanted]
                continue
            data = secret.data or {}
            for key in wanted:
                raw = data.get(key)
                if raw is None:
                    missed.append(f"Secret {namespace}/{name} key {key} (the Secret has no such key)")
                    continue
                values.append(base64.b64decode(raw).decode("utf-8", errors="replace"))
        return values, missed

    def status_key(self, namespace: str, name: str) -> bytes:
        """The operator's key for sealing status.runtime: the Secret `namespace/name`, made on first use (32 random
        bytes, immutable) and kept for the life of the process. Deleting the Secret and restarting the operator
        rotates it: every copy sealed before then no longer verifies."""
        if self._status_key is None:
            secret = self._status_key_secret(namespace, name)
            raw = (secret.data or {}).get(STATUS_KEY)
            key = base64.b64decode(raw) if raw else b""
            if len(key) < STATUS_KEY_BYTES:
                raise RuntimeError(
                    f"Secret {namespace}/{name} key {STATUS_KEY!r} holds {len(key)} bytes, fewer than the "
                    f"{STATUS_KEY_BYTES} of the operator's status key: delete the Secret, and the operator makes a new one"
                )
            self._status_key = key
        return self._status_key

    def _status_key_secret(self, namespace: str, name: str) -> client.V1Secret:
        try:
            return self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 403:
                raise RuntimeError(_key_forbidden(namespace, name, "get", exc)) from exc
            if exc.status != 404:
                raise
        body: Any = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "grpo-operator"},
            },
            "type": "Opaque",
            "immutable": True,  # a new key invalidates every seal: rotate by deleting it, never by an edit
            "data": {STATUS_KEY: base64.b64encode(secrets.token_bytes(STATUS_KEY_BYTES)).decode()},
        }
        try:
            return self.core.create_namespaced_secret(namespace, body)
        except ApiException as exc:
            if exc.status == 403:
                raise RuntimeError(_key_forbidden(namespace, name, "create", exc)) from exc
            if exc.status != 409:  # made meanwhile (another replica): read that one
                raise
        return self.core.read_namespaced_secret(name, namespace)

    def get_run(self, namespace: str, run: str) -> dict[str, Any] | None:
        """The GRPORun at the newest version this process knows: the watch's copy when it is that one
        (`KubeCache.watched_run`), else by a GET. None once it is gone."""
        found = self.cache.watched_run(namespace, run)
        return found if found is not None else self.get_run_fresh(namespace, run)

    def runtime(self, name: str) -> dict[str, Any] | None:
        """The cluster-scoped GRPORuntime `name` by a GET, or None when it does not exist. Read only until a run is
        first planned: from then on the run resolves against the copy in its status."""
        try:
            return cast(dict[str, Any], self.custom.get_cluster_custom_object(GROUP, VERSION, RUNTIME_PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_run_fresh(self, namespace: str, run: str) -> dict[str, Any] | None:
        """The GRPORun by a GET (after a conflict: the watch's copy is known to be older)."""
        try:
            found = cast(
                dict[str, Any], self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, run)
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            found = None
        version = None if found is None else found["metadata"].get("resourceVersion")
        self.cache.saw_run(namespace, run, version, gone=found is None)
        return found

    def patch_status(
        self, namespace: str, run: str, status: dict[str, Any], resource_version: str | None = None
    ) -> str | None:
        """Merge-patch the status; with `resource_version`, only onto that version of the object (optimistic
        concurrency: the API server answers 409 when it changed meanwhile, raised as StatusConflict). Returns the
        object's new resourceVersion (None once it is gone)."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            written: object = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, run, body
            )
        except ApiException as exc:
            if exc.status == 409:
                raise StatusConflict(
                    f"{namespace}/{run}: the GRPORun changed since resourceVersion {resource_version}"
                ) from None
            if exc.status != 404:  # deleted meanwhile: nothing to report on
                raise
            self.cache.saw_run(namespace, run, None)
            return None
        meta = cast(dict[str, Any], written or {}).get("metadata") or {}
        version = cast(str | None, meta.get("resourceVersion"))
        self.cache.saw_run(namespace, run, version)
        return version


class StatusConflict(Conflict):
    """The GRPORun changed since it was read: reconcile again from the newer one."""


__all__ = ["FIELD_MANAGER", "ChildRefused", "Kube", "StatusConflict", "refusal"]
