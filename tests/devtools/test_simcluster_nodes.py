"""The simulated cluster's nodes are made from a runtime's instance types: a platform's own GRPORuntime (the
InfiniBand and the single-node examples) gets the node group it describes, and the built-in AWS types, which are
the default runtime, get theirs the same way."""

from __future__ import annotations

from typing import Any

import yaml
from grpo_dev.localcluster.simcluster import _allocatable, default_nodes, gpu_node, runtime_nodes
from grpo_operator.api.runtime import GRPORuntime
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.instances import INSTANCES

from tests.support.builders import EXAMPLES


def runtime(name: str) -> GRPORuntime:
    found, problems = parse_runtime(yaml.safe_load((EXAMPLES / "runtimes" / name).read_text()))
    assert found is not None, problems
    return found


def extended(node: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in node["status"]["allocatable"].items() if "/" in k}


def test_an_infiniband_runtime_gets_nodes_its_runs_select_with_its_gpus_and_rdma_devices() -> None:
    ib = runtime("h100-infiniband.yaml")
    *gpu, head = runtime_nodes(ib, {"h100-ib": 2})
    assert [n["metadata"]["name"] for n in gpu] == ["h100-ib-h100-ib-0", "h100-ib-h100-ib-1"]
    for node in gpu:
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert extended(node) == {"nvidia.com/gpu": "8", "rdma/ib": "8"}
        assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
        assert node["status"]["capacity"]["cpu"] == "128" and node["status"]["capacity"]["memory"] == "2048Gi"
        assert node["status"]["allocatable"]["memory"] == _allocatable(128, 2048, 100)["memory"]
    assert head["metadata"]["labels"]["node-role.example.com/cpu"] == "true"
    assert extended(head) == {} and "taints" not in head["spec"]


def test_a_runtime_without_a_fabric_gets_gpu_nodes_without_fabric_devices_or_taints() -> None:
    [node] = runtime_nodes(runtime("single-node.yaml"))  # no head node selector: no head node
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert extended(node) == {"nvidia.com/gpu": "2"}
    assert "taints" not in node["spec"]


def test_the_default_nodes_of_the_aws_types_carry_their_efa_devices_and_the_gpu_taint() -> None:
    nodes = {n["metadata"]["name"]: n for n in default_nodes()}
    p5en = nodes["p5en-48xlarge-0"]
    assert p5en["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "p5en.48xlarge"
    assert extended(p5en) == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "15"}
    assert p5en["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    degraded = gpu_node("p5en-no-efa", INSTANCES["p5en.48xlarge"], devices=0)  # type: ignore[index]
    assert extended(degraded) == {"nvidia.com/gpu": "8"}
