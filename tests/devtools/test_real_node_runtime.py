"""The real node's GRPORuntime (grpo_dev.localcluster.realruntime) is one a platform could write: it parses as a
GRPORuntime, takes the node's own CPUs and memory, and a run on it renders a head, a worker and a reward pod that
all fit that one node beside the operator's pod (the chart's requests), with nothing edited after rendering."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from grpo_dev.localcluster.realnode import NODE_LABELS
from grpo_dev.localcluster.realruntime import real_node_runtime
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import errors, validate
from grpo_operator.render import render

from tests.support.builders import REPO, SETTINGS, kind
from tests.support.runtimes import millicores


def _node(cpu: str, memory: str, gpus: str = "1") -> dict[str, Any]:
    capacity = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}
    return {"metadata": {"name": "grpo-real-node"}, "status": {"capacity": capacity, "allocatable": capacity}}


def _kib(quantity: str) -> int:
    units = {"Ki": 1, "Mi": 1024, "Gi": 1024**2}
    return int(quantity[:-2]) * units[quantity[-2:]] if quantity[-2:] in units else int(quantity) // 1024


RUN = {
    "apiVersion": "grpo.dev/v1alpha1",
    "kind": "GRPORun",
    "metadata": {"name": "real-op", "namespace": "real-op"},
    "spec": {
        "runtimeRef": {"name": "real-node"},
        "model": {"profile": "qwen3-0.6b", "hfCheckpoint": "/shared/m", "torchDistCheckpoint": "/shared/t"},
        "data": {"promptData": "/shared/d.jsonl"},
        "rollout": {"numRollout": 4, "batchSize": 4, "samplesPerPrompt": 2},
        "training": {"globalBatchSize": 8},
        "topology": {"actor": {"nodes": 1, "gpusPerNode": 1}, "rollout": {"memFraction": 0.7}},
        "reward": {"type": "remote", "remote": {"replicas": 1}},
    },
}


@pytest.mark.parametrize(("cpu", "memory"), [("2", "24551508Ki"), ("4", "20Gi"), ("8", "64Gi")])
def test_a_run_on_the_real_nodes_runtime_fits_that_node_beside_the_operator(cpu: str, memory: str) -> None:
    node = _node(cpu, memory)
    manifest = real_node_runtime(node, trainer_image="localhost/t:dev", reward_image="localhost/r:dev", claim_name="c")
    runtime, problems = parse_runtime(manifest)
    assert runtime is not None, problems
    [instance] = runtime.spec.instance_types
    assert instance.vcpus == int(cpu) and instance.node_selector == NODE_LABELS
    run, problems = parse_run(RUN, runtime)
    assert run is not None, problems
    assert not errors(validate(run)), [str(p) for p in validate(run)]  # it plans: GPU and host memory fit
    result = render(run, make_plan(run), SETTINGS)
    cluster = kind(result, "RayCluster")["spec"]
    pods = [
        cluster["headGroupSpec"]["template"]["spec"],
        cluster["workerGroupSpecs"][0]["template"]["spec"],
        kind(result, "Deployment")["spec"]["template"]["spec"],
    ]
    assert all(pod["nodeSelector"] == NODE_LABELS for pod in pods)
    chart = yaml.safe_load((REPO / "charts" / "grpo-operator" / "values.yaml").read_text())["resources"]["requests"]
    requests = [chart] + [pod["containers"][0]["resources"]["requests"] for pod in pods]
    assert sum(millicores(r["cpu"]) for r in requests) <= millicores(cpu)
    # The kubelet keeps back its hard eviction threshold (100Mi, realnode.py) from the node's memory.
    assert sum(_kib(r["memory"]) for r in requests) <= _kib(memory) - 100 * 1024


def test_a_node_that_advertises_no_gpu_has_no_runtime() -> None:
    with pytest.raises(ValueError, match=r"advertises no nvidia\.com/gpu"):
        real_node_runtime(_node("2", "8Gi", "0"), trainer_image="t", reward_image="r", claim_name="c")
