"""Every GPU worker runs the launcher's preflight before it joins the cluster, with its node's expectations and
floors taken from the instance type (not the driver's node alone, not zeros)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpo_operator.planning.instances import INSTANCES, InstanceTypeName

from tests.support.builders import example, kind, rendered, valid_examples


def _worker_pod(doc: dict) -> dict:  # type: ignore[type-arg]
    cluster = kind(rendered(doc), "RayCluster")
    return dict(cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"])


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_every_gpu_worker_runs_the_launchers_preflight_before_ray_starts_with_the_same_devices(path: Path) -> None:
    pod = _worker_pod(example(path.stem))
    (init,) = pod["initContainers"]
    (ray,) = pod["containers"]
    assert init["name"] == "preflight" and init["image"] == ray["image"]
    assert init["command"] == ["python3", "-m", "grpo_launcher", "preflight", "--config", "/etc/grpo/run-config.json"]
    assert init["resources"] == ray["resources"]  # its GPUs and EFA devices are the ones Ray gets next
    assert init["volumeMounts"] == ray["volumeMounts"] and init["env"] == ray["env"]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"  # the failure line reaches the pod status


@pytest.mark.parametrize(
    ("instance", "gpus", "floor"),
    [("p5en.48xlarge", 8, 112.5), ("p5.48xlarge", 4, 112.5), ("p6-b200.48xlarge", 8, 225.0), ("p5en.48xlarge", 1, 0.0)],
)
def test_the_preflight_floors_come_from_the_instance_type(instance: str, gpus: int, floor: float) -> None:
    doc = example(
        "qwen3-4b-colocated",
        {
            "topology": {
                "instanceType": instance,
                "actor": {"nodes": 1, "gpusPerNode": gpus},
                "rollout": {"gpusPerEngine": 1, "memFraction": 0.7},
            }
        },
    )
    result = rendered(doc)
    preflight = json.loads(kind(result, "ConfigMap")["data"]["run-config.json"])["preflight"]
    assert preflight["minBusBandwidthGBps"] == floor
    assert floor == INSTANCES[InstanceTypeName(instance)].allreduce_floor_gbps(gpus)
    assert preflight["gpus"] == gpus
    assert preflight["fabric"] == {"type": "efa", "devices": result.plan.fabric_devices_per_node}
