"""Values a GRPORuntime or a run on it may hold that the schema lets through and the cluster would break, one table
per class (issue #46): an env name the render sets itself, a fabric resource the render requests itself, a memory
size without a unit, a mount over a system directory or the render's own mounts, an image prefix matched past a
boundary, a gpuNodeSelector that contradicts its instance type's. Each is refused where the runtime or the run is
read (`planning.documents.parse_runtime`, `planning.runtime.resolve`, `planning.validation.check`), the code the
operator and `grpo validate` share, naming the field, the value, the rule and the fix."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from grpo_operator.planning import documents
from grpo_operator.planning.validation import check, errors

from tests.support.builders import EXAMPLES, example, merge

RUNTIME = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())
RUN = yaml.safe_load((EXAMPLES / "runtimes" / "quickstart.yaml").read_text())


def _runtime_problems(patch: dict[str, Any]) -> list[str]:
    runtime, problems = documents.parse_runtime(merge(RUNTIME, {"spec": patch}))
    assert (runtime is None) == bool(problems)
    return [str(p) for p in problems]


def _fabric(**fabric: Any) -> dict[str, Any]:
    types = [merge(RUNTIME["spec"]["instanceTypes"][0], {"fabric": fabric})]
    return {"instanceTypes": types}


def _run_problems(doc: dict[str, Any], runtime_patch: dict[str, Any] | None = None) -> list[str]:
    runtime, said = documents.parse_runtime(merge(RUNTIME, {"spec": runtime_patch or {}}))
    assert runtime is not None, said
    run, problems = documents.parse_run(doc, runtime)
    if run is not None:
        problems = errors(check(run).problems)
    return [str(p) for p in problems]


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        pytest.param(
            {"defaults": {"env": {"HF_TOKEN": "hf_x"}}},
            "spec.defaults.env.HF_TOKEN: HF_TOKEN is set by spec.hfTokenSecret of a run",
            id="hf-token-in-defaults-env",
        ),
        pytest.param(
            {"defaults": {"env": {"RAY_AUTH_TOKEN": "t"}}},
            "spec.defaults.env.RAY_AUTH_TOKEN: RAY_AUTH_TOKEN is set by the operator in every Ray pod for Ray's token",
            id="ray-auth-token-in-defaults-env",
        ),
        pytest.param(
            {"defaults": {"env": {"GRPO_RUN": "x"}}},
            "spec.defaults.env.GRPO_RUN: GRPO_RUN is set by the operator in the Ray job's runtime env",
            id="job-env-in-defaults-env",
        ),
        pytest.param(
            _fabric(env={"MILES_HOST_IP": "10.0.0.1"}),
            "spec.instanceTypes[0].fabric.env.MILES_HOST_IP: MILES_HOST_IP is set by the operator in every Ray pod",
            id="miles-host-ip-in-fabric-env",
        ),
        pytest.param(
            {"defaults": {"secretEnv": [{"name": "RAY_AUTH_MODE", "secretKeyRef": {"name": "s", "key": "k"}}]}},
            "spec.defaults.secretEnv[0].name: RAY_AUTH_MODE is set by the operator in every Ray pod",
            id="ray-auth-mode-in-defaults-secret-env",
        ),
    ],
)
def test_a_runtime_env_name_the_render_sets_is_refused_naming_who_sets_it(patch: dict[str, Any], words: str) -> None:
    [problem] = _runtime_problems(patch)
    assert problem.startswith(words), problem
    assert problem.endswith("remove it from the runtime (it is the operator's to set)"), problem


def test_tuning_env_the_render_replaces_in_place_stays_a_runtimes_to_set() -> None:
    assert _runtime_problems({"defaults": {"env": {"NCCL_DEBUG": "INFO", "TOKENIZERS_PARALLELISM": "true"}}}) == []
    assert _runtime_problems(_fabric(env={"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5"})) == []


@pytest.mark.parametrize(
    "resource",
    [
        pytest.param("nvidia.com/gpu", id="the-gpu-resource"),
        pytest.param("kubernetes.io/batch", id="kubernetes-domain"),
        pytest.param("requests.kubernetes.io/x", id="kubernetes-subdomain"),
    ],
)
def test_a_fabric_resource_the_render_requests_itself_is_refused(resource: str) -> None:
    [problem] = _runtime_problems(_fabric(type="infiniband", resourceName=resource, count=8))
    assert problem.startswith(
        f"spec.instanceTypes[0].fabric.resourceName: {resource} is a resource the render requests itself "
        "(nvidia.com/gpu, cpu, memory, ephemeral-storage)"
    ), problem
    assert "name the fabric device plugin's own resource" in problem


@pytest.mark.parametrize(
    ("where", "memory", "said"),
    [
        pytest.param("headResources", "8", "8 is 8 bytes", id="head-bare-number"),
        pytest.param("rewardResources", "512", "512 is 512 bytes", id="reward-bare-number"),
        pytest.param("headResources", "64Ki", "64Ki is 64 KiB", id="head-kibibytes"),
    ],
)
def test_a_pod_memory_without_its_unit_is_refused_naming_the_likely_one(where: str, memory: str, said: str) -> None:
    number = memory.rstrip("Ki")
    [problem] = _runtime_problems({"defaults": {"scheduling": {where: {"cpu": "2", "memory": memory}}}})
    assert problem == (
        f"spec.defaults.scheduling.{where}.memory: {said}: Kubernetes reads a size without a unit as bytes, and no "
        f"process starts in less than 1Mi; write the unit (did you mean {number}Gi?)"
    )


@pytest.mark.parametrize("memory", ["1Mi", "1048576", "8Gi", "512Mi"])
def test_a_pod_memory_of_a_mebibyte_or_more_passes(memory: str) -> None:
    assert _runtime_problems({"defaults": {"scheduling": {"headResources": {"cpu": "2", "memory": memory}}}}) == []


MOUNTS = [
    pytest.param("/", "is the root", id="root"),
    pytest.param("/usr", "is, lies under or holds /usr", id="usr"),
    pytest.param("/proc/x", "is, lies under or holds /proc", id="under-proc"),
    pytest.param("/lib64", "is, lies under or holds /lib64", id="lib64"),
    pytest.param("/var", "is, lies under or holds /var/run", id="holds-var-run"),
    pytest.param("/etc/grpo/data", "is, lies under or holds /etc/grpo", id="under-the-run-config-mount"),
    pytest.param("/dev/shm", "is, lies under or holds /dev/shm", id="the-shm-mount"),
]


@pytest.mark.parametrize(("mount", "words"), MOUNTS)
def test_a_runtime_default_mount_over_a_system_directory_is_refused(mount: str, words: str) -> None:
    [problem] = _runtime_problems({"defaults": {"storage": {"mountPath": mount}}})
    assert problem.startswith(f"spec.defaults.storage.mountPath: {mount} {words}"), problem
    assert problem.endswith("choose a directory of its own such as /fsx"), problem


@pytest.mark.parametrize(("mount", "words"), MOUNTS)
def test_a_runs_mount_over_a_system_directory_is_refused(mount: str, words: str) -> None:
    doc = example("quickstart", {"storage": {"mountPath": mount}})
    run, problems = documents.parse_run(doc)
    assert run is not None, problems
    found = [str(p) for p in errors(check(run).problems) if p.path == "spec.storage.mountPath"]
    assert len(found) == 1 and found[0].startswith(f"spec.storage.mountPath: {mount} {words}"), found


@pytest.mark.parametrize("mount", ["/fsx", "/shared", "/mnt/data", "/library", "/runs", "/var/lib/data"])
def test_a_mount_of_its_own_passes(mount: str) -> None:
    assert _runtime_problems({"defaults": {"storage": {"mountPath": mount}}}) == []


@pytest.mark.parametrize(
    ("prefix", "image", "allowed"),
    [
        pytest.param("registry.example.com", "registry.example.com.evil.io/x:1", False, id="registry-suffix"),
        pytest.param("registry.example.com/ml", "registry.example.com/ml-untrusted/x:1", False, id="path-suffix"),
        pytest.param("registry.example.com/ml/", "registry.example.com/mlx/x:1", False, id="slash-prefix-other"),
        pytest.param("registry.example.com", "registry.example.com/ml/x:1", True, id="registry-boundary"),
        pytest.param("registry.example.com/ml", "registry.example.com/ml/x:1", True, id="path-boundary"),
        pytest.param("registry.example.com/ml/x", "registry.example.com/ml/x:1", True, id="tag-boundary"),
        pytest.param("registry.example.com/ml/x", "registry.example.com/ml/x@sha256:" + "a" * 64, True, id="digest"),
    ],
)
def test_an_image_prefix_matches_only_at_a_registry_or_path_boundary(prefix: str, image: str, allowed: bool) -> None:
    problems = _run_problems(merge(RUN, {"spec": {"image": image}}), {"locks": {"imagePrefixes": [prefix]}})
    said = [p for p in problems if p.startswith("spec.image:")]
    if allowed:
        assert said == [], said
    else:
        assert (
            len(said) == 1
            and f"is not from a registry GRPORun default/quickstart-ib on GRPORuntime h100-ib allows (locks.imagePrefixes: {prefix}, each matched up to a '/', ':' or '@')"
            in said[0]
        ), said


@pytest.mark.parametrize(
    ("selector", "refused"),
    [
        pytest.param({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, True, id="same-key-other-value"),
        pytest.param({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, False, id="same-key-same-value"),
        pytest.param({"pool": "team-a"}, False, id="a-key-of-its-own-narrows"),
    ],
)
def test_a_gpu_node_selector_narrows_the_instance_types_and_a_conflict_is_refused(
    selector: dict[str, str], refused: bool
) -> None:
    problems = _run_problems(merge(RUN, {"spec": {"scheduling": {"gpuNodeSelector": selector}}}))
    if not refused:
        assert problems == []
        return
    [problem] = problems
    assert problem.startswith(
        "spec.scheduling.gpuNodeSelector: nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB conflicts with "
        "nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3 of instance type h100-ib"
    ), problem
    assert "a run's selector narrows its type's, it cannot replace it" in problem
