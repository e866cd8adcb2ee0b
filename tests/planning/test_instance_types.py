"""The built-in AWS instance types and what a node type gives a run: the GPU memory nvidia-smi reports (in GiB,
to 0.1), host memory and NVLink as AWS and NVIDIA state them, /dev/shm as an eighth of host memory up to 256 GiB,
the GPU toleration as written (no null fields in the pods), no fabric devices on a type without a fabric, and
the preflight's all-reduce floor from two GPUs up."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from grpo_operator.api.catalog import InstanceTypeName
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.instances import DEFAULT_RUNTIME_DOCUMENT, INSTANCES, instance_of
from grpo_operator.planning.validation import check

from tests.support.builders import base

# nvidia-smi's total memory per GPU (MiB), or the datasheet's GB for B300; host memory in GiB (AWS); NVLink per
# GPU, one direction, GB/s (NVLink 4 on Hopper, 5 on Blackwell).
FACTS = {
    InstanceTypeName.P5: (81559 / 1024, 2048, 450),
    InstanceTypeName.P5EN: (143771 / 1024, 2048, 450),
    InstanceTypeName.P6_B200: (183359 / 1024, 2048, 900),
    InstanceTypeName.P6_B300: (288e9 / 2**30, 4096, 900),
}


@pytest.mark.parametrize("name", list(FACTS), ids=str)
def test_a_built_in_type_has_the_memory_and_nvlink_its_hardware_reports(name: InstanceTypeName) -> None:
    gpu_gib, memory_gib, nvlink = FACTS[name]
    node = INSTANCES[name]
    assert (node.gpu_gib, node.memory_gib, node.nvlink_gbps) == (round(gpu_gib, 1), memory_gib, nvlink)


def _run_on_p5en(change: dict[str, Any], spec_patch: dict[str, Any] | None = None) -> Any:
    runtime = copy.deepcopy(DEFAULT_RUNTIME_DOCUMENT)
    runtime["spec"]["instanceTypes"][1] |= change
    parsed, problems = parse_runtime(runtime)
    assert parsed is not None, problems
    doc = base()
    if spec_patch:
        doc["spec"]["topology"] |= spec_patch
    run, problems = parse_run(doc, parsed)
    assert run is not None, problems
    return run


@pytest.mark.parametrize(("memory_gib", "shm_gib"), [(512, 64), (2048, 256), (4096, 256)])
def test_dev_shm_is_an_eighth_of_host_memory_up_to_256_gib(memory_gib: int, shm_gib: int) -> None:
    plan = check(_run_on_p5en({"memoryGiB": memory_gib})).plan
    assert plan is not None and plan.shm_gib == shm_gib


def test_the_gpu_toleration_reaches_the_pods_as_written_without_null_fields() -> None:
    run = _run_on_p5en({})
    assert instance_of(run.spec).tolerations == (
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    )


def test_a_type_without_a_fabric_has_no_devices_to_request() -> None:
    run = _run_on_p5en({"fabric": {"type": "none"}}, {"efaPerNode": 1})
    messages = [p.message for p in check(run).problems if p.path == "spec.topology.efaPerNode"]
    assert any(m.startswith("1 exceeds the 0 ") for m in messages), messages


def test_an_infiniband_type_has_its_devices_and_no_efa() -> None:
    run = _run_on_p5en({"fabric": {"type": "infiniband", "resourceName": "rdma/ib", "count": 8}})
    node = instance_of(run.spec)
    assert (node.devices, node.efa) == (8, 0)


def test_the_all_reduce_floor_applies_from_two_gpus_and_not_to_one() -> None:
    node = INSTANCES[InstanceTypeName.P5EN]
    assert (node.allreduce_floor_gbps(1), node.allreduce_floor_gbps(2), node.allreduce_floor_gbps(8)) == (
        0.0,
        112.5,
        112.5,
    )


def test_a_runtime_toleration_with_seconds_reaches_the_pods_in_the_api_servers_spelling() -> None:
    spot = {"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    run = _run_on_p5en({"tolerations": [spot]})
    assert instance_of(run.spec).tolerations == (spot,)
