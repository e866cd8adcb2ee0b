"""A GRPORuntime of one small node and a run on it, shared by the render tests that size pods or grant debug
rights through a runtime: `SMALL_RUNTIME` (one 1-GPU, 2-CPU instance type, the head and reward pods sized to fit
beside the worker), `SMALL_RUN` (a run that names it), and `rendered_on(runtime)`, what the operator renders for
`SMALL_RUN` resolved against a (possibly edited) copy of the runtime. `short_run(patch)` is
examples/runtimes/quickstart.yaml (a run that leaves the platform's fields to its runtime) with a spec patch.
`millicores` reads a CPU quantity as the kubelet sums requests."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import Rendered, render

from tests.support.builders import EXAMPLES, SETTINGS, merge

RUNTIMES = EXAMPLES / "runtimes"

SMALL_NODE = {"grpo.dev/small": "true"}
SMALL_RUNTIME: dict[str, Any] = {
    "apiVersion": "grpo.dev/v1alpha1",
    "kind": "GRPORuntime",
    "metadata": {"name": "small"},
    "spec": {
        "instanceTypes": [
            {
                "name": "small-1x",
                "gpuModel": "H100",
                "gpusPerNode": 1,
                "gpuMemoryGiB": 79.6,
                "vcpus": 2,
                "memoryGiB": 24,
                "nodeSelector": SMALL_NODE,
                "fabric": {"type": "none"},
            }
        ],
        "defaults": {
            "trainerImage": "registry.example/trainer:1",
            "storage": {"claimName": "shared", "mountPath": "/shared"},
            "scheduling": {
                "headNodeSelector": SMALL_NODE,
                "headResources": {"cpu": "300m", "memory": "2Gi"},
                "rewardResources": {"cpu": "500m", "memory": "512Mi"},
            },
        },
    },
}
SMALL_RUN: dict[str, Any] = {
    "apiVersion": "grpo.dev/v1alpha1",
    "kind": "GRPORun",
    "metadata": {"name": "small-run", "namespace": "team"},
    "spec": {
        "runtimeRef": {"name": "small"},
        "model": {"profile": "qwen3-4b", "hfCheckpoint": "/shared/m", "torchDistCheckpoint": "/shared/t"},
        "data": {"promptData": "/shared/d.jsonl"},
        "rollout": {"numRollout": 4, "batchSize": 4, "samplesPerPrompt": 2},
        "training": {"globalBatchSize": 8},
        "topology": {"actor": {"nodes": 1, "gpusPerNode": 1}},
        "reward": {"type": "remote", "remote": {"replicas": 1}},
    },
}


def small_runtime() -> dict[str, Any]:
    """A copy of `SMALL_RUNTIME` to edit."""
    return copy.deepcopy(SMALL_RUNTIME)


def rendered_on(runtime: dict[str, Any]) -> Rendered:
    """`SMALL_RUN` resolved against `runtime` and rendered, asserting both parse."""
    rt, problems = parse_runtime(runtime)
    assert rt is not None, problems
    run, problems = parse_run(copy.deepcopy(SMALL_RUN), rt)
    assert run is not None, problems
    return render(run, make_plan(run), SETTINGS)


def short_run(patch: dict[str, Any] | None = None) -> dict[str, Any]:
    return merge(yaml.safe_load((RUNTIMES / "quickstart.yaml").read_text()), {"spec": patch or {}})


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)
