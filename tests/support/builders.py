"""GRPORun builders shared by every test tier, and tables of GRPORun inputs: seed defects as bad specs, used by
the Python validation tests and by the API-server tests (which check that CEL and the schema reject the same
inputs).

`example(name, patch, **meta)` is an example as a dict with a spec patch merged in; `run_of(doc)` parses and
validates it (asserting it is valid); `rendered(doc)` renders it with `SETTINGS`; `check(doc)` returns the run
and every problem; `spec(patch)` is the typed spec of the base example with a patch.

`base()` is examples/qwen3-4b-colocated.yaml as a dict; each case deep-merges a patch into it.
`field` is the path the rejection must name. `api_server` says whether the API server (schema or CEL)
rejects it too; rules that need profile, instance or memory data exist only in Python.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from grpo_operator.api import GRPORun, GRPORunSpec
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import Problem, errors, validate
from grpo_operator.render import Rendered, RenderSettings, render

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
BASE_EXAMPLE = EXAMPLES / "qwen3-4b-colocated.yaml"
# Examples the API server accepts but `grpo validate` rejects (memory does not fit).
PYTHON_ONLY_INVALID_EXAMPLES = {"qwen25-72b-disaggregated.yaml"}
SETTINGS = RenderSettings(reward_image="registry.example/grpo-reward@sha256:" + "0" * 64)


def base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(BASE_EXAMPLE.read_text())
    return data


def merge(into: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(into)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def check(doc: dict[str, Any]) -> tuple[GRPORun | None, list[Problem]]:
    run, problems = parse_run(doc)
    if run is None:
        return None, problems
    return run, validate(run)


def spec(patch: dict | None = None) -> GRPORunSpec:  # type: ignore[type-arg]
    run, _ = check(merge(base(), {"spec": patch or {}}))
    assert run is not None
    return run.spec


def example(name: str, patch: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    doc = merge(doc, {"spec": patch or {}})
    doc["metadata"].update(meta)
    return doc


def run_of(doc: dict[str, Any]) -> GRPORun:
    run, problems = parse_run(doc)
    assert run is not None, [str(p) for p in problems]
    assert not errors(validate(run)), [str(p) for p in validate(run)]
    return run


def rendered(doc: dict[str, Any]) -> Rendered:
    run = run_of(doc)
    return render(run, make_plan(run), SETTINGS)


def kind(result: Rendered, wanted: str) -> dict[str, Any]:
    return next(c for c in result.children if c["kind"] == wanted)


def pod_specs(result: Rendered) -> list[dict[str, Any]]:
    specs = []
    for child in result.children:
        spec = child.get("spec", {})
        if "template" in spec:
            specs.append(spec["template"]["spec"])
        if "headGroupSpec" in spec:
            specs.append(spec["headGroupSpec"]["template"]["spec"])
            specs += [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    return specs


def valid_examples() -> list[Path]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        run, problems = parse_run(yaml.safe_load(path.read_text()))
        if run is not None and not problems and not errors(validate(run)):
            out.append(path)
    return out


@dataclass(frozen=True)
class Case:
    id: str
    patch: dict[str, Any]
    field: str
    api_server: bool = True

    def manifest(self, name: str | None = None) -> dict[str, Any]:
        doc = merge(base(), {"spec": self.patch})
        if name:
            doc["metadata"]["name"] = name
        return doc


def topo(**kw: Any) -> dict[str, Any]:
    return {"topology": kw}


CEL_CASES: list[Case] = [
    Case("colocated-rollout-16-vs-actor-8", topo(rollout={"gpus": 16}), "spec.topology.rollout.gpus"),
    Case("disaggregated-without-rollout-gpus", topo(placement="Disaggregated"), "spec.topology.rollout.gpus"),
    Case(
        "rollout-gpus-not-multiple-of-engine",
        topo(placement="Disaggregated", rollout={"gpus": 6, "gpusPerEngine": 4}),
        "spec.topology.rollout.gpusPerEngine",
    ),
    Case(
        "engine-spans-nodes",
        topo(actor={"nodes": 2, "gpusPerNode": 6}, rollout={"gpusPerEngine": 4}),
        "spec.topology.rollout.gpusPerEngine",
    ),
    Case(
        "model-parallel-does-not-divide-gpus",
        topo(actor={"gpusPerNode": 6}, parallelism={"tensor": 4}),
        "spec.topology.parallelism",
    ),
    Case(
        "tensor-parallel-across-nodes",
        topo(actor={"nodes": 2, "gpusPerNode": 4}, parallelism={"tensor": 8}),
        "spec.topology.parallelism.tensor",
    ),
    Case(
        "rollout-expert-parallel-does-not-divide-engine",
        topo(rollout={"gpusPerEngine": 2, "expertParallel": 4}),
        "spec.topology.rollout.expertParallel",
    ),
    Case("batch-identity-broken", {"training": {"globalBatchSize": 64}}, "spec.training.globalBatchSize"),
    Case(
        "eps-clip-high-below-eps-clip", {"training": {"epsClip": 0.3, "epsClipHigh": 0.2}}, "spec.training.epsClipHigh"
    ),
    Case("remote-reward-without-remote-block", {"reward": {"type": "remote"}}, "spec.reward.remote"),
    Case(
        "remote-block-without-remote-type",
        {"reward": {"type": "dapo", "remote": {"replicas": 2}}},
        "spec.reward.remote",
    ),
    Case("word-for-a-number", topo(actor={"nodes": "two"}), "spec.topology.actor.nodes"),
    Case("leading-zero-number", topo(actor={"nodes": "08"}), "spec.topology.actor.nodes"),
    Case("expert-parallel-zero", topo(parallelism={"expert": 0}), "spec.topology.parallelism.expert"),
    Case("negative-batch", {"rollout": {"batchSize": -16}}, "spec.rollout.batchSize"),
    Case("placement-spelled-lowercase", topo(placement="colocated"), "spec.topology.placement"),
    Case("placement-as-boolean", topo(placement=True), "spec.topology.placement"),
    Case(
        "unknown-reward-backend",
        {"reward": {"type": "remote", "remote": {"backend": "math-verify"}}},
        "spec.reward.remote.backend",
    ),
    Case("unknown-profile", {"model": {"profile": "qwen3-5b"}}, "spec.model.profile"),
    Case("relative-checkpoint-path", {"model": {"hfCheckpoint": "models/Qwen3-4B"}}, "spec.model.hfCheckpoint"),
    Case("empty-image", {"image": ""}, "spec.image"),
    Case("mem-fraction-above-bound", topo(rollout={"memFraction": 0.99}), "spec.topology.rollout.memFraction"),
    # Python only: they need profile, instance or memory data.
    Case(
        "tensor-parallel-does-not-divide-query-groups",
        {"model": {"profile": "glm-z1-9b"}, "topology": {"parallelism": {"tensor": 4}}},
        "spec.topology.parallelism.tensor",
        api_server=False,
    ),
    Case(
        "expert-parallel-on-dense-model",
        topo(parallelism={"expert": 2}),
        "spec.topology.parallelism.expert",
        api_server=False,
    ),
    Case(
        "colocated-mem-fraction-085-oom",
        topo(rollout={"memFraction": 0.85}),
        "spec.topology.rollout.memFraction",
        api_server=False,
    ),
    Case(
        "managed-flag-in-extra-args",
        {"extraArgs": ["--sglang-log-level", "WARN"]},
        "spec.extraArgs[0]",
        api_server=False,
    ),
    Case(
        "managed-flag-with-equals-in-extra-args",
        {"extraArgs": ["--use-tensorboard", "--lr=1e-5"]},
        "spec.extraArgs[1]",
        api_server=False,
    ),
    Case("efa-above-instance", topo(efaPerNode=40), "spec.topology.efaPerNode", api_server=False),
    # Values that pass as strings but break the run where they land (#26): paths, labels, names, images.
    # The under-the-mount rules need the mount: with mountPath left to the run's runtime, the API server cannot
    # judge them and the operator does, after resolution (tests/planning/test_runtime.py).
    Case(
        "checkpoint-off-the-shared-volume",
        {"storage": {"mountPath": "/fsx", "checkpointDir": "/tmp/ckpt"}},
        "spec.storage.checkpointDir",
    ),
    Case(
        "checkpoint-dotdot-out-of-the-mount",
        {"storage": {"checkpointDir": "/fsx/../tmp/ckpt"}},
        "spec.storage.checkpointDir",
    ),
    Case(
        "tensorboard-dir-is-the-mount-itself",
        {"storage": {"mountPath": "/fsx", "tensorboardDir": "/fsx/"}},
        "spec.storage.tensorboardDir",
    ),
    Case(
        "tensorboard-dir-beside-the-mount",
        {"storage": {"mountPath": "/fsx", "tensorboardDir": "/fsx2/tb"}},
        "spec.storage.tensorboardDir",
    ),
    Case("prompt-data-with-a-dot-segment", {"data": {"promptData": "/fsx/./data/train.jsonl"}}, "spec.data.promptData"),
    Case("mount-path-with-double-slash", {"storage": {"mountPath": "/fsx//shared"}}, "spec.storage.mountPath"),
    Case("claim-mounted-over-dev-shm", {"storage": {"mountPath": "/dev/shm"}}, "spec.storage.mountPath"),
    Case("claim-mounted-over-the-run-config", {"storage": {"mountPath": "/etc/grpo/"}}, "spec.storage.mountPath"),
    Case(
        "priority-class-too-long-for-the-volcano-label",
        {"scheduling": {"gang": {"scheduler": "Volcano"}, "priorityClassName": "p" * 64}},
        "spec.scheduling.priorityClassName",
    ),
    Case(
        "node-selector-key-not-a-label-key",
        {"scheduling": {"gpuNodeSelector": {"gpu type": "h200"}}},
        "spec.scheduling.gpuNodeSelector",
    ),
    Case(
        "node-selector-key-prefix-too-long",
        {"scheduling": {"headNodeSelector": {"a" * 254 + "/role": "head"}}},
        "spec.scheduling.headNodeSelector",
    ),
    Case("secret-name-with-an-empty-label", {"hfTokenSecret": {"name": "a..b"}}, "spec.hfTokenSecret.name"),
    Case("claim-name-with-an-empty-label", {"storage": {"claimName": "fsx..claim"}}, "spec.storage.claimName"),
    Case("secret-key-dotdot", {"hfTokenSecret": {"name": "hf", "key": ".."}}, "spec.hfTokenSecret.key"),
    Case("image-digest-without-hex", {"image": "trainer@sha256:"}, "spec.image"),
    Case("image-short-sha256-digest", {"image": "trainer@sha256:" + "a" * 40}, "spec.image"),
    Case("image-uppercase-repository", {"image": "Trainer:v1"}, "spec.image"),
    Case(
        "reward-image-with-an-empty-tag",
        {"reward": {"type": "remote", "remote": {"image": "reward:"}}},
        "spec.reward.remote.image",
    ),
    Case(
        "toleration-seconds-beyond-int64",
        {
            "scheduling": {
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**63}]
            }
        },
        "spec.scheduling.tolerations[0].tolerationSeconds",
    ),
]
