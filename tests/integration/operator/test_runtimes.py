"""The operator resolves each run against its GRPORuntime, read from the real API server.

The operator runs as a subprocess (tests/support/operator_harness.py) against the real control plane. Nothing
plays KubeRay here, so a run stays before its job (its RayCluster never gets ready) and no Ray head is called:
what is checked is what the operator renders and records. A runtime is cluster-scoped, so each test makes its own
(a unique name, from the InfiniBand example) and deletes it afterwards.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.render import names

from tests.support.builders import EXAMPLES
from tests.support.cli import grpo
from tests.support.operator_harness import get_run, phase_is, running_operator, wait_for

pytestmark = pytest.mark.integration

Kubectl = Callable[..., Any]
IB = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())
RUN = yaml.safe_load((EXAMPLES / "runtimes" / "quickstart.yaml").read_text())
NO_RAY = "http://127.0.0.1:9"  # no job is ever submitted here: the RayCluster never gets ready


def runtime_doc(name: str, **spec: Any) -> dict[str, Any]:
    """The InfiniBand example under `name`, without its Kueue queue (no Kueue runs here)."""
    doc = json.loads(json.dumps(IB))
    doc["metadata"] = {"name": name}
    doc["spec"]["defaults"]["scheduling"].pop("queueName")
    doc["spec"]["locks"]["fields"] = []
    doc["spec"].update(spec)
    return doc


def run_doc(name: str, namespace: str, runtime: str, **spec: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(RUN))
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["runtimeRef"] = {"name": runtime}
    doc["spec"].update(spec)
    return doc


def apply(kubectl: Kubectl, doc: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def change_guards(kubectl: Kubectl, namespace: str, run: str, consecutive: int, *, generation: int) -> None:
    """A guard change (what a started run may change), and its reconcile: the run is resolved again."""
    patch = json.dumps({"spec": {"guards": {"consecutiveRollouts": consecutive}}})
    kubectl("patch", "grporun", run, "-n", namespace, "--type=merge", "-p", patch)
    wait_for(
        f"generation {generation} reconciled",
        lambda: get_run(kubectl, namespace, run)["status"].get("observedGeneration") == generation,
    )


@pytest.fixture
def runtime_name(kubectl: Kubectl) -> Iterator[str]:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    yield name
    kubectl("delete", "grporuntime", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def operator(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[Any]:
    with running_operator(control_plane, namespace, NO_RAY, tmp_path, ray_head=False) as op:
        yield op


def ray_cluster(kubectl: Kubectl, namespace: str, run: str) -> dict[str, Any] | None:
    found = kubectl("get", "raycluster", names.ray_cluster(run), "-n", namespace, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def worker_pod(cluster: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    return spec


def recorded(kubectl: Kubectl, namespace: str, run: str) -> dict[str, Any] | None:
    runtime: dict[str, Any] | None = (get_run(kubectl, namespace, run).get("status") or {}).get("runtime")
    return runtime


def started(kubectl: Kubectl, namespace: str, run: str) -> dict[str, Any]:
    """The run's RayCluster once the operator applied it and recorded the runtime."""
    return wait_for(
        f"{run}'s RayCluster and status.runtime",
        lambda: recorded(kubectl, namespace, run) and ray_cluster(kubectl, namespace, run),
    )


def test_a_run_renders_its_children_from_the_runtime_it_names(
    operator: Any, namespace: str, kubectl: Kubectl, runtime_name: str
) -> None:
    apply(kubectl, runtime_doc(runtime_name))
    apply(kubectl, run_doc("ib", namespace, runtime_name))
    pod = worker_pod(started(kubectl, namespace, "ib"))
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    container = pod["containers"][0]
    assert container["image"] == IB["spec"]["defaults"]["trainerImage"]
    assert container["resources"]["limits"]["rdma/ib"] == "8"
    assert "vpc.amazonaws.com/efa" not in container["resources"]["limits"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["NCCL_IB_HCA"] == "mlx5"
    assert "FI_PROVIDER" not in env
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["shared-rwx"]
    live = json.loads(kubectl("get", "grporuntime", runtime_name, "-o", "json").stdout)
    record = recorded(kubectl, namespace, "ib")
    assert record is not None
    assert (record["name"], record["resourceVersion"]) == (runtime_name, live["metadata"]["resourceVersion"])
    assert record["spec"]["instanceTypes"][0]["fabric"]["resourceName"] == "rdma/ib"


def test_editing_or_deleting_the_runtime_after_the_run_started_changes_nothing_of_the_run(
    operator: Any, namespace: str, kubectl: Kubectl, runtime_name: str
) -> None:
    apply(kubectl, runtime_doc(runtime_name))
    apply(kubectl, run_doc("kept", namespace, runtime_name))
    before = worker_pod(started(kubectl, namespace, "kept"))
    record = recorded(kubectl, namespace, "kept")
    edited = runtime_doc(runtime_name)
    edited["spec"]["defaults"]["trainerImage"] = "registry.example.com/ml/grpo-trainer:edited"
    edited["spec"]["instanceTypes"][0]["nodeSelector"] = {"nvidia.com/gpu.product": "edited"}
    apply(kubectl, edited)
    change_guards(kubectl, namespace, "kept", 4, generation=2)
    after = ray_cluster(kubectl, namespace, "kept")
    assert after is not None
    assert worker_pod(after)["nodeSelector"] == before["nodeSelector"]
    assert worker_pod(after)["containers"][0]["image"] == before["containers"][0]["image"]
    assert recorded(kubectl, namespace, "kept") == record
    kubectl("delete", "grporuntime", runtime_name)
    change_guards(kubectl, namespace, "kept", 5, generation=3)
    status = get_run(kubectl, namespace, "kept")["status"]
    assert status.get("reason") != "RuntimeNotFound"
    assert status["runtime"] == record
    assert worker_pod(ray_cluster(kubectl, namespace, "kept") or {})["nodeSelector"] == before["nodeSelector"]


def test_a_missing_runtime_keeps_the_run_pending_until_it_is_created(
    operator: Any, namespace: str, kubectl: Kubectl, runtime_name: str
) -> None:
    apply(kubectl, run_doc("waits", namespace, runtime_name))
    status = wait_for("Pending", lambda: phase_is(kubectl, namespace, "waits", "Pending"))["status"]
    assert status["reason"] == "RuntimeNotFound"
    assert f"GRPORuntime {runtime_name} does not exist" in status["message"]
    assert ray_cluster(kubectl, namespace, "waits") is None
    apply(kubectl, runtime_doc(runtime_name))
    pod = worker_pod(started(kubectl, namespace, "waits"))
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert get_run(kubectl, namespace, "waits")["status"].get("reason") != "RuntimeNotFound"


def test_a_run_that_overrides_a_locked_field_is_refused_naming_the_run_and_the_runtime(
    operator: Any, namespace: str, kubectl: Kubectl, runtime_name: str
) -> None:
    locked = runtime_doc(runtime_name)
    locked["spec"]["locks"]["fields"] = ["image"]
    apply(kubectl, locked)
    apply(kubectl, run_doc("rebel", namespace, runtime_name, image="registry.example.com/ml/mine:1"))
    status = wait_for("Failed", lambda: phase_is(kubectl, namespace, "rebel", "Failed"))["status"]
    assert status["reason"] == "InvalidSpec"
    assert f"GRPORun {namespace}/rebel on GRPORuntime {runtime_name}" in status["message"]
    assert "spec.image" in status["message"]
    assert "locks.fields lists image" in status["message"]
    assert ray_cluster(kubectl, namespace, "rebel") is None


def test_grpo_validate_with_the_runtime_file_and_the_operator_give_the_same_verdict(
    operator: Any, namespace: str, kubectl: Kubectl, runtime_name: str, tmp_path: Path
) -> None:
    locked = runtime_doc(runtime_name)
    locked["spec"]["locks"]["fields"] = ["image"]
    locked["spec"]["locks"]["maxNodesPerRun"] = 1
    runtime_file, run_file = tmp_path / "runtime.yaml", tmp_path / "run.yaml"
    runtime_file.write_text(yaml.safe_dump(locked))
    ok = run_doc("agrees", namespace, runtime_name, topology={"actor": {"nodes": 1}, "rollout": {"memFraction": 0.7}})
    bad = run_doc("refused", namespace, runtime_name, image="registry.example.com/ml/mine:1")
    run_file.write_text(yaml.safe_dump(ok))
    assert grpo("validate", "-f", str(run_file), "--runtime", str(runtime_file)).returncode == 0
    run_file.write_text(yaml.safe_dump(bad))
    offline = grpo("validate", "-f", str(run_file), "--runtime", str(runtime_file))
    assert offline.returncode != 0
    apply(kubectl, locked)
    apply(kubectl, ok)
    apply(kubectl, bad)
    started(kubectl, namespace, "agrees")
    status = wait_for("Failed", lambda: phase_is(kubectl, namespace, "refused", "Failed"))["status"]
    problem = status["message"]
    assert "locks.fields lists image" in problem
    assert problem in offline.stdout + offline.stderr
