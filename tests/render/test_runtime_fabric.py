"""The worker pods take their fabric from the runtime's instance type: an InfiniBand type renders its RDMA
resource and IB env and no EFA, a RoCE type its RDMA resource and GID index, a type without fabric renders neither; `grpo validate|render --runtime` resolve the
same way offline."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from grpo_operator.cli import main
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import render

from tests.support.builders import EXAMPLES, SETTINGS, kind

RUNTIMES = EXAMPLES / "runtimes"


def _rendered(run_doc: dict[str, Any], runtime_file: str) -> tuple[dict[str, Any], dict[str, Any]]:
    rt, problems = parse_runtime(yaml.safe_load((RUNTIMES / runtime_file).read_text()))
    assert rt is not None, problems
    run, problems = parse_run(run_doc, rt)
    assert run is not None, problems
    result = render(run, make_plan(run), SETTINGS)
    cluster = kind(result, "RayCluster")
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    config = json.loads(kind(result, "ConfigMap")["data"]["run-config.json"])
    return worker, config


def _quickstart() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((RUNTIMES / "quickstart.yaml").read_text())
    return doc


def test_an_infiniband_type_renders_its_rdma_resource_and_ib_env_and_no_efa() -> None:
    worker, config = _rendered(_quickstart(), "h100-infiniband.yaml")
    container = worker["containers"][0]
    assert container["resources"]["limits"]["rdma/ib"] == "8"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_IB_HCA"] == "mlx5" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    text = json.dumps(worker)
    assert "vpc.amazonaws.com/efa" not in text and "FI_PROVIDER" not in text
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert container["image"].startswith("registry.example.com/ml/grpo-trainer@sha256:")
    claim = next(v for v in worker["volumes"] if v["name"] == "shared")
    assert claim["persistentVolumeClaim"]["claimName"] == "shared-rwx"
    preflight = config["preflight"]
    assert preflight["fabric"] == {"type": "infiniband", "devices": 8}


def test_a_roce_type_validates_plans_renders_its_rdma_resource_and_gid_index_and_asks_for_the_roce_check() -> None:
    doc = _quickstart()
    doc["spec"]["runtimeRef"] = {"name": "h200-roce"}
    rt, problems = parse_runtime(yaml.safe_load((RUNTIMES / "h200-roce.yaml").read_text()))
    assert rt is not None, problems
    run, problems = parse_run(doc, rt)
    assert run is not None, problems
    plan = make_plan(run)
    assert (plan.fabric, plan.fabric_devices_per_node, plan.worker_replicas) == ("roce", 8, 2)
    worker, config = _rendered(doc, "h200-roce.yaml")
    container = worker["containers"][0]
    assert container["resources"]["limits"]["rdma/rdma_shared_device_eth"] == "8"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["NCCL_IB_HCA"] == "mlx5"
    assert "vpc.amazonaws.com/efa" not in json.dumps(worker) and "rdma/ib" not in json.dumps(worker)
    assert config["preflight"]["fabric"] == {"type": "roce", "devices": 8}


def test_a_type_without_fabric_renders_no_fabric_resource_or_env() -> None:
    doc = _quickstart()
    del doc["spec"]["runtimeRef"]
    doc["spec"]["topology"] = {"actor": {"nodes": 1, "gpusPerNode": 2}, "rollout": {"memFraction": 0.6}}
    doc["spec"]["model"] |= {"hfCheckpoint": "/fsx/m", "torchDistCheckpoint": "/fsx/t"}
    doc["spec"]["data"] = {"promptData": "/fsx/d.jsonl"}
    worker, config = _rendered(doc, "single-node.yaml")
    limits = worker["containers"][0]["resources"]["limits"]
    assert set(limits) == {"nvidia.com/gpu", "memory"}
    text = json.dumps(worker)
    assert "vpc.amazonaws.com/efa" not in text and "FI_PROVIDER" not in text and "rdma" not in text
    assert "NCCL_IB_HCA" not in text
    assert config["preflight"]["fabric"] == {"type": "none", "devices": 0}


@pytest.mark.parametrize("command", ["validate", "plan", "render"])
def test_the_cli_resolves_a_short_run_against_a_runtime_file(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    run, runtime = str(RUNTIMES / "quickstart.yaml"), str(RUNTIMES / "h100-infiniband.yaml")
    assert main([command, "-f", run, "--runtime", runtime]) == 0
    assert main([command, "-f", run]) == 1
    out = capsys.readouterr().out
    assert (
        "spec.runtimeRef.name: h100-ib: the run resolves against that GRPORuntime; pass its file with --runtime" in out
    )


def test_the_cli_refuses_a_run_naming_another_runtime_than_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "-f", str(RUNTIMES / "quickstart.yaml"), "--runtime", str(RUNTIMES / "aws.yaml")])
    assert code == 1
    assert "spec.runtimeRef.name: h100-ib but --runtime gives GRPORuntime default" in capsys.readouterr().out


def test_without_a_head_selector_the_head_keeps_off_the_runtimes_gpu_types_too() -> None:
    rt, _ = parse_runtime(yaml.safe_load((RUNTIMES / "h100-infiniband.yaml").read_text()))
    assert rt is not None
    rt.spec.instance_types[0].node_selector = {"node.kubernetes.io/instance-type": "a3-highgpu-8g"}
    rt.spec.defaults.scheduling.head_node_selector = {}
    run, problems = parse_run(_quickstart(), rt)
    assert run is not None, problems
    head = kind(render(run, make_plan(run), SETTINGS), "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    [term] = head["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    avoided = next(e for e in term["matchExpressions"] if e["key"] == "node.kubernetes.io/instance-type")
    assert {"a3-highgpu-8g", "p5en.48xlarge"} <= set(avoided["values"])
