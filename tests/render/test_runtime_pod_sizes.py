"""A runtime of a small node sizes the head and reward pods, so a whole run fits one node of a few CPUs: without
it the head alone asks for 2 CPUs and 8Gi and the reward pod for 2 CPUs, which a 2-CPU node beside its worker
cannot give. Runs without such a runtime keep the operator's sizes."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.planning.documents import parse_runtime

from tests.support.builders import kind
from tests.support.runtimes import SMALL_NODE, SMALL_RUNTIME, millicores, rendered_on, small_runtime


def _pods(runtime: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result = rendered_on(runtime)
    cluster = kind(result, "RayCluster")["spec"]
    return {
        "head": cluster["headGroupSpec"]["template"]["spec"],
        "worker": cluster["workerGroupSpecs"][0]["template"]["spec"],
        "reward": kind(result, "Deployment")["spec"]["template"]["spec"],
    }


def _mebibytes(quantity: str) -> int:
    return int(quantity[:-2]) * (1024 if quantity.endswith("Gi") else 1)


def test_a_run_on_a_small_nodes_runtime_fits_that_one_node_head_reward_and_worker_together() -> None:
    pods = _pods(SMALL_RUNTIME)
    requests = {name: pod["containers"][0]["resources"]["requests"] for name, pod in pods.items()}
    assert requests["head"] == {"cpu": "300m", "memory": "2Gi"}
    assert requests["reward"] == {"cpu": "500m", "memory": "512Mi"}
    assert all(pod["nodeSelector"] == SMALL_NODE for pod in pods.values())
    assert sum(millicores(r["cpu"]) for r in requests.values()) <= 2 * 1000
    assert sum(_mebibytes(r["memory"]) for r in requests.values()) <= 24 * 1024
    for name in ("head", "reward"):
        limits = pods[name]["containers"][0]["resources"]["limits"]
        assert limits == {"memory": requests[name]["memory"]}
    env = {e["name"]: e["value"] for e in pods["reward"]["containers"][0]["env"]}
    assert env["REWARD_WORKERS"] == "1"  # half a CPU still scores with one process


@pytest.mark.parametrize("cpu, processes", [("500m", "1"), ("1.5", "1"), ("2", "2"), ("4000m", "4")])
def test_the_reward_service_runs_one_scoring_process_per_whole_cpu_it_requests(cpu: str, processes: str) -> None:
    runtime = small_runtime()
    runtime["spec"]["defaults"]["scheduling"]["rewardResources"]["cpu"] = cpu
    env = {e["name"]: e["value"] for e in _pods(runtime)["reward"]["containers"][0]["env"]}
    assert env["REWARD_WORKERS"] == processes


def test_a_runtime_that_sizes_nothing_keeps_the_operators_head_and_reward_sizes() -> None:
    runtime = small_runtime()
    del runtime["spec"]["defaults"]["scheduling"]["headResources"]
    del runtime["spec"]["defaults"]["scheduling"]["rewardResources"]
    pods = _pods(runtime)
    assert pods["head"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "8Gi"}
    assert pods["reward"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}


@pytest.mark.parametrize(
    "size", [{"cpu": "half", "memory": "1Gi"}, {"cpu": "1", "memory": "1GB"}], ids=["a word for a cpu", "GB for memory"]
)
def test_a_size_kubernetes_would_not_take_is_refused_with_the_runtime(size: dict[str, str]) -> None:
    runtime = small_runtime()
    runtime["spec"]["defaults"]["scheduling"]["headResources"] = size
    rt, problems = parse_runtime(runtime)
    assert rt is None and any("headResources" in p.path for p in problems), problems
