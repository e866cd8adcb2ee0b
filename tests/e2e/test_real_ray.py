"""The Ray head and worker the operator renders, run for real on the real node by the real KubeRay: the worker
joins the head through the head Service's DNS name with token auth, a Ray job runs the real launcher and the
miles double on the worker, whose gauges answer on the worker pod's IP; and the rendered preflight init container,
run on this GPU-less node, fails with the one line the operator puts into the run's status.

What is changed from the rendered objects, and why: the image (the dev layer devtools/images/ray-node.Dockerfile:
the operator image's Ray with the launcher and the miles double, as no trainer image runs without a GPU), the CPU
and memory requests (sized for a p5en, not this machine), the node selector (this node instead of a p5en), and
the worker's preflight init container, which the last test runs on its own (the node has no GPU). The GPUs are
played: the node advertises `nvidia.com/gpu` through its status, as a platform without a device plugin would."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grpo_dev.images import DEV_IMAGES, ImageError, build_dev
from grpo_dev.localcluster import SimulatedCluster
from grpo_dev.localcluster.realnode import NODE_LABELS
from grpo_operator.edges import childstate
from grpo_operator.edges.scrape import trainer_metrics
from grpo_operator.edges.watchcache import as_model
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings, names, render
from grpo_operator.render.auth import ray_auth_secret

from tests.support.builders import example, run_of

pytestmark = pytest.mark.integration

RUN = "real-ray"
TOKEN = f"real-ray-{uuid.uuid4().hex}"
POD_RESOURCES = {"cpu": "250m", "memory": "1500Mi"}
POD_MEMORY_LIMIT = "3Gi"
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def ray_image(real_cluster: SimulatedCluster, node_images: dict[str, str]) -> str:
    """The ray-node dev layer on the operator image `node_images` has just built, in the node's containerd."""
    try:
        build_dev("ray-node")
    except ImageError as exc:
        pytest.fail(str(exc), pytrace=False)
    reference = DEV_IMAGES["ray-node"].reference
    assert real_cluster.real_node is not None
    real_cluster.real_node.import_image(reference)
    return reference


def _fit(container: dict[str, Any], image: str) -> None:
    container["image"], container["imagePullPolicy"] = image, "Never"
    gpus = container.get("resources", {}).get("limits", {}).get(GPU)
    limits = {"memory": POD_MEMORY_LIMIT, **({GPU: gpus} if gpus else {})}
    container["resources"] = {"requests": {**POD_RESOURCES, **({GPU: gpus} if gpus else {})}, "limits": limits}


def rendered(namespace: str, image: str) -> tuple[list[dict[str, Any]], dict[str, Any], Any]:
    """The run's Ray children fitted to this node (module docstring), the worker's preflight init container as
    rendered, and the job submission."""
    doc = example("quickstart")
    doc["metadata"].update(name=RUN, namespace=namespace)
    run = run_of(doc)
    result = render(run, make_plan(run), RenderSettings())
    children = [c for c in result.children if c["kind"] in ("RayCluster", "ConfigMap")]
    children.append(ray_auth_secret(namespace, RUN, None, TOKEN))
    children += _referenced_secrets(children)
    [cluster] = [c for c in children if c["kind"] == "RayCluster"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    [workers] = cluster["spec"]["workerGroupSpecs"]
    worker = workers["template"]["spec"]
    [preflight] = worker.pop("initContainers")
    for pod in (head, worker):
        pod["nodeSelector"] = dict(NODE_LABELS)
        for container in pod["containers"]:
            _fit(container, image)
    _fit(preflight, image)
    for child in children:
        child["metadata"].pop("ownerReferences", None)
    return children, preflight, result.job


def _referenced_secrets(children: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A placeholder for each Secret the pods' env names that the run's user would have made (the Hugging Face
    token): the kubelet does not start a container whose Secret is missing."""
    made = {c["metadata"]["name"] for c in children if c["kind"] == "Secret"}
    wanted = {
        (ref["name"], ref["key"])
        for c in children
        for env in _env_of(c)
        if (ref := (env.get("valueFrom") or {}).get("secretKeyRef")) and ref["name"] not in made
    }
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {key: "placeholder"}}
        for name, key in sorted(wanted)
    ]


def _env_of(child: dict[str, Any]) -> list[dict[str, Any]]:
    if child["kind"] != "RayCluster":
        return []
    groups = [child["spec"]["headGroupSpec"], *child["spec"]["workerGroupSpecs"]]
    pods = [g["template"]["spec"] for g in groups]
    return [e for p in pods for c in p["containers"] + p.get("initContainers", []) for e in c.get("env", [])]


def _advertise_gpus(cluster: SimulatedCluster, count: int) -> None:
    assert cluster.real_node is not None
    patch = [
        {"op": "add", "path": f"/status/{field}/{GPU.replace('/', '~1')}", "value": str(count)}
        for field in ("capacity", "allocatable")
    ]
    cluster.kubectl(
        "patch", "node", cluster.real_node.name, "--subresource=status", "--type=json", "-p", json.dumps(patch)
    )


@pytest.fixture(scope="module")
def ray(real_cluster: SimulatedCluster, ray_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The fitted RayCluster Ready on the real node: its namespace, pods, preflight container and job."""
    namespace = f"real-ray-{uuid.uuid4().hex[:6]}"
    kubectl = real_cluster.kubectl
    kubectl("create", "namespace", namespace)
    shared = tmp_path_factory.mktemp("shared")
    shared.chmod(0o777)  # the pods' user is not root
    _claim(real_cluster, namespace, shared)
    children, preflight, job = rendered(namespace, ray_image)
    # Room for the worker's GPUs and those of the preflight pod the last test starts beside it.
    _advertise_gpus(real_cluster, 2 * int(preflight["resources"]["limits"][GPU]))
    kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": children})
    )
    selector = f"ray.io/cluster={names.ray_cluster(RUN)}"
    deadline = time.monotonic() + 600
    pods: list[dict[str, Any]] = []
    while time.monotonic() < deadline:  # the pods exist only once KubeRay has made them
        pods = real_cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
        if len(pods) == 2 and all(_ready(p) for p in pods):
            break
        time.sleep(2)
    assert len(pods) == 2 and all(_ready(p) for p in pods), json.dumps([p.get("status") for p in pods], indent=1)
    by_type = {p["metadata"]["labels"]["ray.io/node-type"]: p for p in pods}
    yield {
        "namespace": namespace,
        "head": by_type["head"],
        "worker": by_type["worker"],
        "preflight": preflight,
        "job": job,
        "shared": shared,
    }
    kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    kubectl("delete", "pv", f"{namespace}-shared", "--wait=false", check=False)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _claim(cluster: SimulatedCluster, namespace: str, path: Path) -> None:
    """The run's ReadWriteMany claim, bound to a directory of this machine (the FSx volume's part)."""
    assert cluster.real_node is not None
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-shared"},
        "spec": {
            "capacity": {"storage": "1200Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": "fsx-claim"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": key, "operator": "In", "values": [value]} for key, value in NODE_LABELS.items()
                            ]
                        }
                    ]
                }
            },
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "fsx-claim", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": f"{namespace}-shared",
            "resources": {"requests": {"storage": "1200Gi"}},
        },
    }
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [volume, claim]})
    )


def _exec_python(cluster: SimulatedCluster, namespace: str, pod: str, script: str) -> str:
    return cluster.kubectl("exec", "-n", namespace, pod, "--", "python3", "-c", script).stdout


def test_the_worker_joins_the_head_through_its_service_name_with_the_token(
    real_cluster: SimulatedCluster, ray: dict[str, Any]
) -> None:
    namespace, head, worker = ray["namespace"], ray["head"], ray["worker"]
    for pod in (head, worker):
        assert pod["spec"]["nodeName"] == real_cluster.real_node.name if real_cluster.real_node else False
        assert all(s["containerID"].startswith("containerd://") for s in pod["status"]["containerStatuses"])
    # KubeRay points the worker at the head Service's DNS name; CoreDNS and kube-proxy carry it.
    service = f"{names.ray_cluster(RUN)}-head-svc.{namespace}.svc.cluster.local"
    assert service in json.dumps(worker["spec"]["containers"][0])
    nodes = _exec_python(
        real_cluster,
        namespace,
        head["metadata"]["name"],
        "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
        "print(json.dumps([[n['NodeManagerAddress'], n['Resources']] for n in ray.nodes() if n['Alive']]))",
    )
    alive = json.loads(nodes.strip().splitlines()[-1])
    by_ip = {ip: resources for ip, resources in alive}
    assert set(by_ip) == {head["status"]["podIP"], worker["status"]["podIP"]}
    assert "gpu_node" in by_ip[worker["status"]["podIP"]]  # the rendered rayStartParams reached Ray
    # Token auth is on: the Jobs API refuses a caller without the token.
    refused = _exec_python(
        real_cluster,
        namespace,
        head["metadata"]["name"],
        "import urllib.request, urllib.error\n"
        "try:\n urllib.request.urlopen('http://127.0.0.1:8265/api/jobs/', timeout=10); print('open')\n"
        "except urllib.error.HTTPError as e:\n print(e.code)",
    )
    assert refused.strip() == "401"


JOBS_CLIENT = (
    "import os\nfrom ray.job_submission import JobSubmissionClient\n"
    "c = JobSubmissionClient('http://127.0.0.1:8265', headers={'Authorization': 'Bearer ' + os.environ['RAY_AUTH_TOKEN']})\n"
)


def _jobs(cluster: SimulatedCluster, ray: dict[str, Any], call: str) -> str:
    """`call` on a Jobs API client inside the head pod (the head's dashboard, with the token the pod holds)."""
    return _exec_python(cluster, ray["namespace"], ray["head"]["metadata"]["name"], f"{JOBS_CLIENT}print({call})")


def test_a_job_runs_the_launcher_and_the_double_on_the_worker_whose_gauges_answer_on_its_pod_ip(
    real_cluster: SimulatedCluster, ray: dict[str, Any]
) -> None:
    worker, job = ray["worker"], ray["job"]
    # The rendered entrypoint, with the launcher's preflight skipped (no GPU here; the next test runs it). The
    # launcher holds miles's argv to the run config, so the double's knobs come through the shared volume: steps
    # slowed so its gauges can be read while it runs, served on every address as miles serves them (the double's
    # default is loopback, for the suite's host processes).
    knobs = ray["shared"] / "fake-knobs"
    knobs.mkdir(exist_ok=True)
    (knobs / f"{RUN}.json").write_text(json.dumps(["--fake-step-seconds", "3", "--fake-bind-address", "0.0.0.0"]))
    mount = next(m["mountPath"] for m in worker["spec"]["containers"][0]["volumeMounts"] if m["name"] == "shared")
    runtime_env = dict(job.runtime_env)
    runtime_env["env_vars"] = {**runtime_env["env_vars"], "FAKE_MILES_KNOBS_DIR": f"{mount}/fake-knobs"}
    argv = list(job.entrypoint_argv)
    at = argv.index("--")
    argv = [*argv[:at], "--skip-preflight", *argv[at:]]
    submitted = _jobs(
        real_cluster,
        ray,
        f"c.submit_job(entrypoint={' '.join(argv)!r}, submission_id='real-ray-1', "
        f"entrypoint_resources={job.entrypoint_resources!r}, runtime_env={runtime_env!r})",
    )
    assert submitted.strip() == "real-ray-1"
    port = next(p["containerPort"] for p in worker["spec"]["containers"][0]["ports"] if p["name"] == "trainer-metrics")
    url = f"http://{worker['status']['podIP']}:{port}/metrics"
    seen, status = None, ""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (seen is None or seen.rollout is None):
        status = _jobs(real_cluster, ray, "c.get_job_status('real-ray-1').value").strip()
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        with contextlib.suppress(OSError):  # not serving yet
            seen = trainer_metrics(urllib.request.urlopen(url, timeout=5).read().decode(), RUN)
        time.sleep(1)
    while time.monotonic() < deadline and status not in ("SUCCEEDED", "FAILED", "STOPPED"):
        status = _jobs(real_cluster, ray, "c.get_job_status('real-ray-1').value").strip()
        time.sleep(2)
    logs = _jobs(real_cluster, ray, "c.get_job_logs('real-ray-1')")
    assert seen is not None and seen.rollout is not None, f"no rollout gauge at {url}; job {status}: {logs[-3000:]}"
    assert status == "SUCCEEDED", logs[-3000:]
    assert "GRPO_RUN_SUMMARY" in logs and "rollout 0: {" in logs, logs[-3000:]


def test_the_rendered_preflight_fails_on_this_gpu_less_node_with_the_line_the_status_shows(
    real_cluster: SimulatedCluster, ray: dict[str, Any]
) -> None:
    namespace, preflight, worker = ray["namespace"], ray["preflight"], ray["worker"]
    spec = worker["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "preflight"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(NODE_LABELS),
            "volumes": spec["volumes"],
            # As in the worker pod: the preflight runs first, and nothing after it starts when it fails.
            "initContainers": [preflight],
            "containers": [
                {"name": "after", "image": preflight["image"], "imagePullPolicy": "Never", "command": ["true"]}
            ],
        },
    }
    real_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    real_cluster.kubectl(
        "wait", "-n", namespace, "--for=jsonpath={.status.phase}=Failed", "--timeout=300s", "pod/preflight"
    )
    found = real_cluster.get_json("pod", "preflight", "-n", namespace)
    problems = childstate.pod_problems([as_model(found, "V1Pod")])  # as the operator reads pods
    assert len(problems) == 1, json.dumps(found["status"], indent=1)
    [line] = problems
    node = real_cluster.real_node.name if real_cluster.real_node else "?"
    assert line.startswith(f"pod preflight on node {node}: preflight failed: libcuda: ")
