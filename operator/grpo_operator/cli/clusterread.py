"""`grpo doctor`'s reads: one pass over the cluster into a `doctorchecks.Cluster`, with GET and LIST only, plus
SelfSubjectAccessReviews (which store nothing). A read the user may not do is recorded with the API server's
words, so its checks say so; an unreachable server, a missing kubeconfig or refused credentials end the command
with one line (`ReadError`).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.api.runtime import RUNTIME_PLURAL
from grpo_operator.cli.doctorchecks import (
    GRPORUN_CRD,
    GRPORUNTIME_CRD,
    LOCALQUEUE_CRD,
    PROMETHEUSRULE_CRD,
    RAYCLUSTER_CRD,
    SERVICEMONITOR_CRD,
    Cluster,
    Target,
)

KUEUE_GROUP = "kueue.x-k8s.io"
TIMEOUT_SECONDS = 20
# What a user needs to run GRPORuns in a namespace.
USER_VERBS = ("create", "get", "list", "delete")


class ReadError(RuntimeError):
    """The cluster cannot be read at all; the message is the one line the user sees."""


# What the reads are doing now (one slot, written by the reading thread), so the deadline's line can name what
# never answered: the kubeconfig's credential plugin, or the request the server is dripping or withholding.
STEP = ["starting"]


def as_user_problem(as_user: str) -> str | None:
    """Why `--as` cannot be sent as the Impersonate-User header (a control character such as CR or LF), or None."""
    bad = next((c for c in as_user if not c.isprintable()), None)
    if bad is None:
        return None
    return (
        f"--as {json.dumps(as_user)[:120]}: a user name is one header line and may not hold a control character "
        f"({bad!r}); pass the user name exactly, without line breaks"
    )


def connect(kubeconfig: str | None, context: str | None, as_user: str | None = None) -> tuple[client.ApiClient, str]:
    """An API client from the kubeconfig (`--kubeconfig`, else $KUBECONFIG or ~/.kube/config), and the context's
    namespace; with `as_user`, every request impersonates that user (kubectl's --as), access reviews included."""
    problem = as_user_problem(as_user) if as_user else None
    if problem:
        raise ReadError(problem)
    STEP[0] = "loading the kubeconfig (a credential plugin it runs, if any)"
    try:
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        raise ReadError(
            f"no usable kubeconfig ({where}): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
            "pass --kubeconfig FILE or set KUBECONFIG"
        ) from exc
    host = str(configuration.host or "")
    if urlsplit(host).scheme not in ("http", "https") or not urlsplit(host).netloc:
        # urllib3 would warn, then guess; kubectl reads a bare address as https.
        raise ReadError(
            f"the kubeconfig's server address {host!r} has no http:// or https:// scheme; write it as "
            f"https://{host.rsplit('://', maxsplit=1)[-1]} (kubectl reads it so) in the cluster's server field"
        )
    configuration.retries = 0
    namespace = ((active or {}).get("context") or {}).get("namespace") or "default"
    api = client.ApiClient(configuration)
    if as_user:
        api.set_default_header("Impersonate-User", as_user)  # type: ignore[no-untyped-call]
    return api, namespace


class Reader:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self.cluster = Cluster()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer; `ApiException` for an HTTP error, `ReadError` when the server cannot be reached."""
        path, _, query = path.partition("?")
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=[tuple(p.split("=", 1)) for p in query.split("&")] if query else None,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        host = self._api.configuration.host
        STEP[0] = f"{method} {host}{path}"
        try:
            response = self._api.call_api(*request, _request_timeout=TIMEOUT_SECONDS)
            data = response.read()  # type: ignore[no-untyped-call]
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ReadError(
                f"cannot reach the API server at {host}: {reason}; check that the cluster is up and the "
                "kubeconfig's server address"
            ) from exc
        if not 200 <= response.status < 300:
            refused = ApiException(status=response.status, reason=response.reason)
            refused.body = data
            raise refused
        return _json_object(data, f"{method} {path}", host, response)

    def get(self, path: str, kind: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist or `kind` may not be read (recorded)."""
        try:
            found: dict[str, Any] = self._call("GET", path)
            return found
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 401:
                raise ReadError(
                    f"the API server at {self._api.configuration.host} refuses the kubeconfig's credentials "
                    "(401 Unauthorized); renew them (a new token or certificate) and try again"
                ) from exc
            if exc.status == 403:
                message = _message(exc.body)
                if "impersonate" in message:
                    raise ReadError(
                        f"{message}; drop --as, or have the kubeconfig's user granted impersonate on that user"
                    ) from exc
                self.cluster.unreadable.setdefault(kind, "forbidden")
                return None
            raise ReadError(f"reading {kind} failed: {exc.status} {exc.reason}") from exc

    def items(self, path: str, kind: str) -> list[dict[str, Any]]:
        found = self.get(path, kind)
        listed = (found or {}).get("items") or []
        if not isinstance(listed, list) or not all(isinstance(item, dict) for item in listed):
            raise ReadError(
                f"the server at {self._api.configuration.host} answered GET {path} with JSON that is not a "
                f"Kubernetes list (its items are not objects); {_NOT_AN_API_SERVER}"
            )
        return listed

    def allowed(self, verb: str, resource: str, namespace: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {"group": GROUP, "resource": resource, "verb": verb, "namespace": namespace}
            },
        }
        try:
            answer = self._call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
        except ApiException:
            return False
        status = answer.get("status")
        return isinstance(status, dict) and status.get("allowed") is True


_NOT_AN_API_SERVER = (
    "is the kubeconfig's server address a Kubernetes API server (not a login page, proxy or other service)?"
)


_JSON_KINDS = {
    list: "a list",
    int: "a number",
    float: "a number",
    str: "a string",
    bool: "a boolean",
    type(None): "null",
}


def _json_object(data: bytes, request: str, host: str, response: Any) -> dict[str, Any]:
    """The answer as a JSON object; `ReadError` naming what answered and how when it is anything else (an HTML
    login page, an empty body, a list or a number)."""
    kind = str(response.headers.get("Content-Type") or "no content type").split(";")[0]
    try:
        found = json.loads(data)
    except (ValueError, RecursionError):
        start = data[:60].decode("utf-8", "replace")
        shown = f"not JSON, starting {json.dumps(start)}" if data.strip() else "an empty body"
        raise ReadError(
            f"the server at {host} answered {request} with {response.status} {kind}, {shown}; {_NOT_AN_API_SERVER}"
        ) from None
    if not isinstance(found, dict):
        raise ReadError(
            f"the server at {host} answered {request} with JSON that is not a Kubernetes object "
            f"({_JSON_KINDS.get(type(found), 'a value')}); {_NOT_AN_API_SERVER}"
        )
    return found


def _message(body: Any) -> str:
    """The API server's message in an error's Status body, or ""."""
    try:
        return str(json.loads(body).get("message") or "")
    except (TypeError, ValueError, AttributeError):
        return ""


def _served(crd: dict[str, Any]) -> str:
    versions = [v for v in crd.get("spec", {}).get("versions", []) if v.get("served")]
    return str(next((v["name"] for v in versions if v.get("storage")), versions[0]["name"] if versions else "v1"))


def read_runtime(api: client.ApiClient, name: str, *, named: bool) -> dict[str, Any] | None:
    """The cluster's GRPORuntime `name` (what the operator resolves a run against), or None when it has none;
    `ReadError` when the run names it (`named`) and it may not be read. The default one, unreadable, is None: the
    checks then judge the run on the built-in types, as for a user who may read nothing."""
    reader = Reader(api)
    found = reader.get(f"/apis/{GROUP}/{VERSION}/{RUNTIME_PLURAL}/{name}", RUNTIME_PLURAL)
    if named and RUNTIME_PLURAL in reader.cluster.unreadable:
        raise ReadError(
            f"GRPORuntime {name}, which the run resolves against, may not be read (forbidden); pass its file with "
            f"--runtime (kubectl get grporuntime {name} -o yaml), or get read access to grporuntimes"
        )
    return found


def read(api: client.ApiClient, namespace: str, target: Target | None) -> Cluster:
    """Everything the checks read, in one pass."""
    reader = Reader(api)
    cluster = reader.cluster
    cluster.user = api.default_headers.get("Impersonate-User")
    for name in (GRPORUN_CRD, GRPORUNTIME_CRD, RAYCLUSTER_CRD, LOCALQUEUE_CRD, SERVICEMONITOR_CRD, PROMETHEUSRULE_CRD):
        crd = reader.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", "customresourcedefinitions")
        if crd is not None:
            cluster.crds[name] = crd
    cluster.nodes = reader.items("/api/v1/nodes", "nodes")
    cluster.deployments = reader.items("/apis/apps/v1/deployments", "deployments")
    cluster.daemonsets = reader.items("/apis/apps/v1/daemonsets", "daemonsets")
    cluster.pods = reader.items(
        "/api/v1/pods?fieldSelector=spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed", "pods"
    )
    cluster.network_policies = reader.items("/apis/networking.k8s.io/v1/networkpolicies", "networkpolicies")
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    cluster.cluster_roles = reader.items(f"{rbac}/clusterroles", "clusterroles")
    cluster.cluster_role_bindings = reader.items(f"{rbac}/clusterrolebindings", "clusterrolebindings")
    cluster.roles = reader.items(f"{rbac}/roles", "roles")
    cluster.role_bindings = reader.items(f"{rbac}/rolebindings", "rolebindings")
    if GRPORUN_CRD in cluster.crds:
        cluster.runs = reader.items(f"/apis/{GROUP}/{VERSION}/{PLURAL}", "grporuns")
    if GRPORUNTIME_CRD in cluster.crds:
        cluster.runtimes = reader.items(f"/apis/{GROUP}/{VERSION}/{RUNTIME_PLURAL}", RUNTIME_PLURAL)
    if target is not None:
        namespace = target.namespace
        claim = target.run.spec.storage.claim_name
        cluster.claim = reader.get(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}", "persistentvolumeclaims"
        )
        queue = target.run.spec.scheduling.queue_name
        if queue is not None and LOCALQUEUE_CRD in cluster.crds:
            prefix = f"/apis/{KUEUE_GROUP}/{_served(cluster.crds[LOCALQUEUE_CRD])}"
            cluster.local_queue = reader.get(f"{prefix}/namespaces/{namespace}/localqueues/{queue}", "localqueues")
            cq = (cluster.local_queue or {}).get("spec", {}).get("clusterQueue")
            if cq:
                cluster.cluster_queue = reader.get(f"{prefix}/clusterqueues/{cq}", "clusterqueues")
            cluster.flavors = reader.items(f"{prefix}/resourceflavors", "resourceflavors")
    cluster.namespace = namespace  # the Roles and bindings above are judged for it (status writers)
    for verb in USER_VERBS:
        cluster.allowed[f"{verb} grporuns in {namespace}"] = reader.allowed(verb, PLURAL, namespace)
    return cluster
