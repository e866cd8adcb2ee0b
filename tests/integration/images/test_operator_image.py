"""The operator image, installed with the chart and run for real under podman + runc, reconciles a run exactly
as the source tree does.

`helm lint --strict` and `helm install` of the chart take the built image references (operator and default
reward image). The installed Deployment's pod spec is what the container runs with (conftest.kubelet_args:
read-only root, the /tmp emptyDir, its user, dropped capabilities, its args and GRPO_* env), with the chart's
ServiceAccount token in a kubeconfig for the local control plane (no kubelet runs here, so no token is
mounted; tests/integration/operator/test_chart_rbac.py does the same with the source tree) and its ports moved to free
ones on loopback. Beside it, the source tree's operator (tests/operator/harness.py) reconciles the same run in
another namespace with the same settings; the two runs must get the same status and the same children, at
Provisioning and at Running (KubeRay played by a status patch, miles by grpo_dev/fake_miles.py on a real Ray
head, as in tests/integration/operator/test_scenarios.py).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from grpo_dev.images import podman
from grpo_dev.localray import LocalRayHead

from tests.support.containers import RunContainer, readable_copy
from tests.support.helm import CHART, helm
from tests.support.operator_harness import (
    RAY_TOKEN,
    Operator,
    fake,
    free_port,
    manifest,
    phase_is,
    play_kuberay_ready,
    wait_for,
)

pytestmark = pytest.mark.integration

RUN = "imaged"


def image_values(images: dict[str, str]) -> list[str]:
    repository, tag = images["operator"].rsplit(":", 1)
    return [
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        f"rewardService.image={images['reward-service']}",
    ]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[LocalRayHead]:
    """A real Ray head with token auth on and the token `manifest` puts in every run's Secret."""
    with LocalRayHead(auth_token=RAY_TOKEN) as head:
        yield head


@pytest.fixture
def installed(
    built_images: dict[str, str], control_plane: Any, kubectl: Any, namespace: str
) -> Iterator[dict[str, Any]]:
    """The chart installed with the built images into its own namespace, watching `namespace`; its Deployment."""
    release, operator_ns = f"img-{uuid.uuid4().hex[:6]}", f"grpo-img-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", operator_ns)
    kubectl("label", "namespace", operator_ns, "pod-security.kubernetes.io/enforce=restricted")
    helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        operator_ns,
        f"--kubeconfig={control_plane.kubeconfig}",
        "--force-conflicts",
        "--set",
        f"watchNamespaces={{{namespace}}}",
        *image_values(built_images),
    )
    try:
        deployment = json.loads(
            kubectl("get", "deployment", f"{release}-grpo-operator", "-n", operator_ns, "-o", "json").stdout
        )
        yield deployment
    finally:
        helm("uninstall", release, "--namespace", operator_ns, f"--kubeconfig={control_plane.kubeconfig}", check=False)
        kubectl("delete", "namespace", operator_ns, "--wait=false", check=False)


def test_the_chart_lints_strictly_with_the_built_image_references(built_images: dict[str, str]) -> None:
    result = helm("lint", "--strict", str(CHART), *image_values(built_images))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_installed_pod_spec_gives_the_container_what_it_needs(
    installed: dict[str, Any], built_images: dict[str, str]
) -> None:
    pod = installed["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == built_images["operator"]
    config = json.loads(podman("image", "inspect", "--format", "{{json .Config}}", built_images["operator"]).stdout)
    # the image's user is the pod's, and not root (runAsNonRoot admits it)
    assert config["User"] == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" != "0:0"
    # the ports the image serves are the ones the pod declares: kopf's liveness and the metrics port
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {f"{port}/tcp" for port in ports.values()} == set(config["ExposedPorts"])
    liveness = next(a for a in container["args"] if a.startswith("--liveness="))
    assert liveness.endswith(f":{ports['healthz']}/healthz")
    assert {"name": "GRPO_METRICS_PORT", "value": str(ports["metrics"])} in container["env"]
    # a read-only root with HOME and temporary files on the one writable mount
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    home = next(e.split("=", 1)[1] for e in config["Env"] if e.startswith("HOME="))
    tmp = {m["mountPath"] for m in container["volumeMounts"]} & {home}
    assert tmp == {"/tmp"} and any(v["name"] == "tmp" and "emptyDir" in v for v in pod["volumes"])


def _normalized(obj: Any, namespace: str, run_uid: str, metrics_port: str) -> Any:
    """`obj` without what differs between two identical runs in two namespaces: times, uids, versions, and
    the trainer's metrics port (each run's miles double binds its own on the shared Ray head's host)."""
    drop = {
        "lastTransitionTime",
        "lastUpdateTime",
        "creationTimestamp",
        "uid",
        "resourceVersion",
        "managedFields",
        "startTime",
        "submittedAt",
        "lastHeartbeatTime",
        "time",
        "generation",
        "selfLink",
    }

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    text = json.dumps(walk(obj)).replace(namespace, "<namespace>").replace(run_uid, "<uid>")
    return json.loads(re.sub(rf"(?<!\d){metrics_port}(?!\d)", "0", text))


def _run(kubectl: Any, namespace: str) -> dict[str, Any]:
    run: dict[str, Any] = json.loads(kubectl("get", "grporun", RUN, "-n", namespace, "-o", "json").stdout)
    return run


def _children(kubectl: Any, namespace: str, metrics_port: str) -> dict[str, Any]:
    items = json.loads(
        kubectl(
            "get",
            "rayclusters,configmaps,deployments,services",
            "-n",
            namespace,
            "-l",
            f"grpo.dev/run={RUN}",
            "-o",
            "json",
        ).stdout
    )["items"]
    uid = _run(kubectl, namespace)["metadata"]["uid"]
    return {
        f"{i['kind']}/{i['metadata']['name']}": _normalized(
            {k: v for k, v in i.items() if k != "status"}, namespace, uid, metrics_port
        )
        for i in items
    }


def _status(kubectl: Any, namespace: str, metrics_port: str) -> dict[str, Any]:
    run = _run(kubectl, namespace)
    status: dict[str, Any] = _normalized(run.get("status", {}), namespace, run["metadata"]["uid"], metrics_port)
    status.pop("metrics", None)  # scraped from each run's own trainer: values move with its progress
    status.pop("progress", None)
    status.pop("accounting", None)  # durations and GPU-seconds on each run's own clock
    # The seal over each run's own runtime copy (bound to its namespace and uid), under each operator's own key.
    assert str(status.pop("runtimeDigest", "")).startswith("hmac-sha256:"), status
    return status


def test_the_operator_image_reconciles_a_run_like_the_source_tree(  # noqa: PLR0917 - pytest fixtures
    installed: dict[str, Any],
    run_container: RunContainer,
    control_plane: Any,
    kubectl: Any,
    namespace: str,
    ray_head: LocalRayHead,
    tmp_path: Path,
) -> None:
    pod = installed["spec"]["template"]["spec"]
    [container] = pod["containers"]
    chart_env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    tree_ns = f"tree-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", tree_ns)
    # The chart's own /metrics port (8081) is the host's here: a `make run` beside the suite holds it.
    tree = Operator(
        control_plane.kubeconfig,
        tree_ns,
        ray_head.dashboard_url,
        tmp_path,
        **{**chart_env, "GRPO_METRICS_PORT": str(free_port())},
    )
    # The same GRPO_* settings for both (the chart's, then the suite's: Ray head, the miles double, 1 s interval).
    settings = {k: v for k, v in tree.env.items() if k.startswith("GRPO_")}
    metrics_port, healthz_port, trainer_port = free_port(), free_port(), str(free_port())
    ports = {namespace: trainer_port, tree_ns: settings["GRPO_PROMETHEUS_PORT"]}
    token = control_plane.token_kubeconfig(installed["metadata"]["namespace"], pod["serviceAccountName"])
    args = [
        a if not a.startswith("--liveness=") else f"--liveness=http://127.0.0.1:{healthz_port}/healthz"
        for a in container["args"]
    ]
    image = run_container(
        pod,
        container,
        args=args,
        volumes=[f"{readable_copy(token, tmp_path)}:/var/run/grpo/kubeconfig:ro"],
        env={
            **settings,
            "GRPO_PROMETHEUS_PORT": trainer_port,
            "GRPO_METRICS_PORT": str(metrics_port),
            "KUBECONFIG": "/var/run/grpo/kubeconfig",
        },
    )
    tree.start()
    try:
        wait_for(
            "the container's /healthz",
            lambda: _up(f"http://127.0.0.1:{healthz_port}/healthz") or not image.running(),
            timeout=180,
        )
        assert image.running(), image.logs()
        spec = fake("--fake-reward", "0.5", rollouts=300)
        for ns in (namespace, tree_ns):
            kubectl("apply", "-f", "-", input=manifest(RUN, ns, spec))
        logs = {namespace: image.logs, tree_ns: tree.logs}
        for ns in (namespace, tree_ns):
            _reach(logs[ns], f"Provisioning in {ns}", lambda ns=ns: phase_is(kubectl, ns, RUN, "Provisioning"))  # type: ignore[misc]
        assert _status(kubectl, namespace, ports[namespace]) == _status(kubectl, tree_ns, ports[tree_ns])
        assert _children(kubectl, namespace, ports[namespace]) == _children(kubectl, tree_ns, ports[tree_ns])
        for ns in (namespace, tree_ns):
            play_kuberay_ready(kubectl, ns, RUN)
        for ns in (namespace, tree_ns):
            _reach(logs[ns], f"a scraped rollout in {ns}", lambda ns=ns: _past_first_rollout(kubectl, ns))  # type: ignore[misc]
        image_status, tree_status = (
            _status(kubectl, namespace, ports[namespace]),
            _status(kubectl, tree_ns, ports[tree_ns]),
        )
        assert image_status["phase"] == "Running", (
            image_status.get("reason"),
            image_status.get("message"),
            tree_status["phase"],
        )
        # Each run is at its own rollout now; what they must share is the phase, every condition's verdict and
        # the set of status fields.
        assert _verdicts(image_status) == _verdicts(tree_status)
        # the operator's own /metrics, on the port the chart declares (moved to loopback here)
        assert "grpo_" in httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        for ns in (namespace, tree_ns):
            kubectl("delete", "grporun", RUN, "-n", ns, "--wait=true", "--timeout=60s")
    finally:
        tree.stop()
        kubectl("delete", "namespace", tree_ns, "--wait=false", check=False)
    assert image.stop(pod.get("terminationGracePeriodSeconds", 30)) == 0, image.logs()[-3000:]


def _past_first_rollout(kubectl: Any, namespace: str) -> bool:
    """Ended, or Running with a rollout scraped: before that the verdicts depend on when each operator scraped."""
    status = _run(kubectl, namespace).get("status", {})
    if status.get("phase") in ("Failed", "Succeeded"):
        return True
    return status.get("phase") == "Running" and status.get("metrics", {}).get("rollout") is not None


def _verdicts(status: dict[str, Any]) -> tuple[Any, ...]:
    conditions = sorted((c["type"], c["status"], c["reason"]) for c in status.get("conditions", []))
    return status["phase"], conditions, sorted(status)


def _reach(logs: Callable[[], str], what: str, probe: Callable[[], Any]) -> None:
    try:
        wait_for(what, probe, timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{logs()[-4000:]}") from None


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
