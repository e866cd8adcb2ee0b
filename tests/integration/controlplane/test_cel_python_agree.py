"""One answer for every cross-field rule: the real API server (CEL in the CRD) and `grpo validate`'s Python
mirror of those rules (`grpo_operator.planning.validation.api_server_rules`) accept and refuse exactly the
same generated specs.

Hypothesis draws specs across every CEL rule (colocated GPU equality, disaggregated rollout GPUs, engine
divisibility, engines inside a node, model and expert parallelism dividing the GPUs, TP inside a node, SGLang
EP inside an engine, GRPO batch identity, the clip range, the remote reward block, normalized paths, the
checkpoint and TensorBoard directories under the claim's mount, a mount path the pods already use, the
priority class that becomes a Volcano label, node selector keys), valid and invalid alike,
within the schema's bounds; each batch goes to the API server as one server-side dry-run. A rule changed on
one side only (e.g. the colocated `==` made `<=` in `api/spec.py`, then `make crds`) makes this test fail.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.validation import api_server_rules
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.support.builders import base

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
BATCH = 80  # 16 rules broken one or two at a time: enough specs that each is broken alone several times
POW2 = st.sampled_from([1, 2, 4, 8])


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec every cross-field rule accepts, built rule by rule."""
    doc = base()
    spec, topo = doc["spec"], doc["spec"]["topology"]
    nodes, per_node = draw(st.integers(1, 3)), draw(POW2)
    actor_gpus = nodes * per_node
    engine = draw(st.sampled_from(divisors(per_node)))
    topo["actor"] = {"nodes": nodes, "gpusPerNode": per_node}
    topo["rollout"] = {
        "gpusPerEngine": engine,
        "expertParallel": draw(st.sampled_from(divisors(engine))),
        "memFraction": 0.8,
    }
    topo["placement"] = draw(st.sampled_from(["Colocated", "Disaggregated"]))
    if topo["placement"] == "Disaggregated":
        topo["rollout"]["gpus"] = engine * draw(st.integers(1, 4))
    elif draw(st.booleans()):
        topo["rollout"]["gpus"] = actor_gpus
    tensor = draw(st.sampled_from(divisors(per_node)))
    pipeline = draw(st.sampled_from(divisors(actor_gpus // tensor)))
    context = draw(st.sampled_from(divisors(actor_gpus // (tensor * pipeline))))
    expert = draw(st.sampled_from(divisors(actor_gpus // pipeline)))
    expert_tensor = draw(st.sampled_from(divisors(actor_gpus // (pipeline * expert))))
    topo["parallelism"] = {
        "tensor": tensor,
        "pipeline": pipeline,
        "context": context,
        "expert": expert,
        "expertTensor": expert_tensor,
    }
    steps = draw(st.integers(1, 4))
    global_batch, samples = draw(st.integers(1, 64)), draw(st.sampled_from([1, 2, 4, 8]))
    spec["rollout"].update(batchSize=global_batch * steps, samplesPerPrompt=samples)
    spec["training"].update(stepsPerRollout=steps, globalBatchSize=global_batch * samples)
    clip = draw(st.sampled_from([0.1, 0.2, 0.28]))
    spec["training"].update(epsClip=clip, epsClipHigh=draw(st.sampled_from([c for c in (0.2, 0.28, 0.5) if c >= clip])))
    remote = draw(st.booleans())
    spec["reward"] = {"type": "remote", "remote": {"replicas": 1}} if remote else {"type": "deepscaler"}
    mount = draw(st.sampled_from(["/fsx", "/fsx/", "/mnt/shared", "/library"]))
    storage = spec["storage"]
    storage["mountPath"] = mount
    for key in draw(st.lists(st.sampled_from(["checkpointDir", "tensorboardDir"]), unique=True)):
        storage[key] = mount.rstrip("/") + draw(st.sampled_from(["/ckpt", "/a/.hidden/b/", "/..x", "/x..", "/.../y"]))
    scheduling = spec.setdefault("scheduling", {})
    if draw(st.booleans()):
        scheduling["gang"] = {"scheduler": "Volcano"}
        scheduling["priorityClassName"] = "p" * draw(st.integers(1, 63))
    if draw(st.booleans()):
        scheduling["gpuNodeSelector"] = {draw(st.sampled_from(["a", "example.com/gpu-type", "x" * 253 + "/y"])): "v"}
    return doc


def _break(doc: dict[str, Any], rule: str, pick: int) -> None:
    """Break one rule of a valid spec (others may break with it: the comparison is exact either way)."""
    spec, topo = doc["spec"], doc["spec"]["topology"]
    actor_gpus = topo["actor"]["nodes"] * topo["actor"]["gpusPerNode"]
    engine, p = topo["rollout"]["gpusPerEngine"], topo["parallelism"]
    if rule == "colocated-gpus":  # a multiple of the engine size, fewer or more than the actor's GPUs
        topo["placement"] = "Colocated"
        topo["rollout"]["gpus"] = max(engine, actor_gpus - engine) if pick % 2 else actor_gpus + engine
    elif rule == "disaggregated-gpus":
        topo["placement"] = "Disaggregated"
        topo["rollout"].pop("gpus", None)
    elif rule == "engine-multiple":
        topo["rollout"]["gpus"] = engine * (1 + pick % 3) + 1
    elif rule == "engine-in-node":
        topo["rollout"]["gpusPerEngine"] = topo["actor"]["gpusPerNode"] * 2 if topo["actor"]["gpusPerNode"] < 8 else 3
    elif rule == "model-parallel":
        p["context"] = actor_gpus + 1
    elif rule == "expert-parallel":
        p["expert"] = actor_gpus * 2 + 1
    elif rule == "tensor-in-node":
        p["tensor"] = topo["actor"]["gpusPerNode"] * 2
    elif rule == "sglang-ep":
        topo["rollout"]["expertParallel"] = engine * 2 if engine < 8 else 3
    elif rule == "batch-identity":
        spec["training"]["globalBatchSize"] += 1 + pick % 5
    elif rule == "eps-clip":
        spec["training"].update(epsClip=0.3, epsClipHigh=0.2)
    elif rule == "remote-block":
        spec["reward"] = {"type": "remote"} if pick % 2 else {"type": "dapo", "remote": {"replicas": 1}}
    elif rule == "unnormalized-path":
        section, key, path = [
            ("storage", "checkpointDir", "/fsx/../tmp/ckpt"),
            ("storage", "tensorboardDir", "/fsx/./tb"),
            ("storage", "mountPath", "/fsx//shared"),
            ("model", "hfCheckpoint", "/fsx/models/.."),
            ("data", "promptData", "/fsx/./data.jsonl"),
            ("storage", "checkpointDir", "/x/."),
        ][pick]
        spec[section][key] = path
    elif rule == "outside-mount":
        mount = spec["storage"]["mountPath"]
        key = "checkpointDir" if pick % 2 else "tensorboardDir"
        spec["storage"][key] = ["/tmp/ckpt", mount, mount.rstrip("/") + "x/tb"][pick % 3] if mount != "/" else "/"
    elif rule == "rendered-mount":
        spec["storage"]["mountPath"] = ["/dev/shm", "/etc/grpo/", "/", "/usr/local", "/var", "/lib64/x"][pick]
        spec["storage"].pop("checkpointDir", None)
        spec["storage"].pop("tensorboardDir", None)
    elif rule == "priority-label":
        spec.setdefault("scheduling", {}).update(gang={"scheduler": "Volcano"}, priorityClassName="p" * (64 + pick))
    elif rule == "node-selector-key":
        key = ["bad key", "-a", "x" * 254 + "/y", "a/" + "b" * 64, "Example.com/x", "a/b/c"][pick]
        spec.setdefault("scheduling", {})["headNodeSelector"] = {key: "v"}


RULES = [
    "colocated-gpus",
    "disaggregated-gpus",
    "engine-multiple",
    "engine-in-node",
    "model-parallel",
    "expert-parallel",
    "tensor-in-node",
    "sglang-ep",
    "batch-identity",
    "eps-clip",
    "remote-block",
    "unnormalized-path",
    "outside-mount",
    "rendered-mount",
    "priority-label",
    "node-selector-key",
]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid specs, and specs with one or two rules broken."""
    doc = draw(valid_specs())
    for rule in draw(st.lists(st.sampled_from(RULES), max_size=2)):
        _break(doc, rule, draw(st.integers(0, 5)))
    return doc


def python_refuses(doc: dict[str, Any]) -> list[str]:
    run, problems = parse_run(doc)
    if run is None:
        return [str(p) for p in problems]
    return [str(p) for p in api_server_rules(run.spec)]


def server_accepts(kubectl: Kubectl, namespace: str, docs: list[dict[str, Any]]) -> set[str]:
    listing = {"apiVersion": "v1", "kind": "List", "items": docs}
    result = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(listing), check=False)
    return set(re.findall(r"grporun\.grpo\.dev/(agree-\d+) (?:created|configured|unchanged)", result.stdout))


# No shrinking: a failure already names every disagreeing spec, and each shrink step is an API round trip.
@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(specs(), min_size=BATCH, max_size=BATCH))
def test_the_api_server_and_grpo_validate_agree_on_every_cross_field_rule(
    batch: list[dict[str, Any]], namespace: str, kubectl: Kubectl
) -> None:
    for i, doc in enumerate(batch):
        doc["metadata"] = {"name": f"agree-{i}"}
    accepted = server_accepts(kubectl, namespace, batch)
    disagreements = []
    for doc in batch:
        name, refused = doc["metadata"]["name"], python_refuses(doc)
        if (name in accepted) == bool(refused):
            verdict = "accepted" if name in accepted else "refused"
            disagreements.append(
                f"{name}: API server {verdict}, Python says {refused or 'valid'}; "
                f"spec {json.dumps(doc['spec']['topology'])} "
                f"batch {doc['spec']['rollout']} {doc['spec']['training']} {doc['spec']['reward']} "
                f"storage {doc['spec']['storage']} scheduling {doc['spec'].get('scheduling')}"
            )
    assert not disagreements, "\n".join(disagreements)
