"""One answer for every cross-field rule: the real API server (CEL in the CRD) and `grpo validate`'s Python
mirror of those rules (`grpo_operator.planning.validation.api_server_rules`) accept and refuse exactly the
same generated specs.

Hypothesis draws specs across every CEL rule (colocated GPU equality, disaggregated rollout GPUs, engine
divisibility, engines inside a node, model and expert parallelism dividing the GPUs, TP inside a node, SGLang
EP inside an engine, GRPO batch identity, the clip range, the remote reward block), valid and invalid alike,
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

from tests.api.cases import base

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
BATCH = 40
POW2 = st.sampled_from([1, 2, 4, 8])


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    doc = base()
    spec = doc["spec"]
    topo = spec["topology"]
    topo["placement"] = draw(st.sampled_from(["Colocated", "Disaggregated"]))
    topo["actor"] = {"nodes": draw(st.integers(1, 3)), "gpusPerNode": draw(POW2)}
    rollout: dict[str, Any] = {"gpusPerEngine": draw(POW2), "expertParallel": draw(st.sampled_from([1, 2, 4])),
                               "memFraction": 0.8}  # fmt: skip
    actor_gpus = topo["actor"]["nodes"] * topo["actor"]["gpusPerNode"]
    gpus = draw(st.one_of(st.none(), st.just(actor_gpus), st.integers(1, 24)))
    if gpus is not None:
        rollout["gpus"] = gpus
    topo["rollout"] = rollout
    topo["parallelism"] = {k: draw(st.sampled_from([1, 2, 4])) for k in ("tensor", "pipeline", "context", "expert", "expertTensor")}
    batch, samples, steps = draw(st.integers(1, 32)), draw(st.integers(1, 16)), draw(st.integers(1, 4))
    matched = max(1, batch * samples // steps)
    spec["rollout"].update(batchSize=batch, samplesPerPrompt=samples)
    spec["training"].update(stepsPerRollout=steps,
                            globalBatchSize=draw(st.one_of(st.just(matched), st.integers(1, 512))))  # fmt: skip
    clip = draw(st.sampled_from([0.1, 0.2, 0.28, 0.5]))
    spec["training"].update(epsClip=clip, epsClipHigh=draw(st.sampled_from([0.1, 0.2, 0.28, 0.5])))
    reward = draw(st.sampled_from(["deepscaler", "remote"]))
    spec["reward"] = {"type": reward}
    if draw(st.booleans()):
        spec["reward"]["remote"] = {"replicas": 1}
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
@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
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
            disagreements.append(f"{name}: API server {verdict}, Python says {refused or 'valid'}; "
                                 f"spec {json.dumps(doc['spec']['topology'])} "
                                 f"batch {doc['spec']['rollout']} {doc['spec']['training']} {doc['spec']['reward']}")  # fmt: skip
    assert not disagreements, "\n".join(disagreements)
