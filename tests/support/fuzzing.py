"""Hypothesis budgets and strategies shared by the property and fuzz tests.

The root conftest registers two profiles: `ci` (the default: derandomized, no example database, so two runs in
one checkout try the same inputs) and `fuzz` (`make fuzz`: random, the example database on, and ten times the
examples). A test states its budget as `examples(n)`: n examples under `ci`, 10 n under `fuzz`.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import errors, validate
from grpo_operator.render import render
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

from tests.support.builders import SETTINGS


def examples(n: int) -> int:
    """n under the ci profile; scaled by the loaded profile's max_examples against ci's (10 n under `fuzz`)."""
    return max(1, n * settings.default.max_examples // settings.get_profile("ci").max_examples)


PATH_CHARS = st.text(alphabet=st.sampled_from("ab z_-.'\"$\\`;&|*!~#%()[]{}é"), min_size=1, max_size=20)


@st.composite
def valid_runs(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.from_regex(r"[a-z][a-z0-9-]{0,38}[a-z0-9]", fullmatch=True))
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = draw(st.integers(1, 4))
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if d <= gpn]))
    engine = draw(st.sampled_from([d for d in (1, 2, 4, 8) if gpn % d == 0]))
    placement = draw(st.sampled_from(["Colocated", "Disaggregated"]))
    dp = nodes * gpn // tp
    samples = draw(st.sampled_from([1, 4, 8, 16]))
    batch = dp * draw(st.integers(1, 8))
    path = "/fsx/" + draw(PATH_CHARS)
    topology: dict[str, Any] = {
        "placement": placement,
        "instanceType": draw(st.sampled_from(["p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge"])),
        "actor": {"nodes": nodes, "gpusPerNode": gpn},
        "rollout": {"gpusPerEngine": engine, "memFraction": 0.7},
        "parallelism": {"tensor": tp},
    }
    if placement == "Disaggregated":
        topology["rollout"]["gpus"] = engine * draw(st.integers(1, 8))
    spec: dict[str, Any] = {
        "model": {"profile": "qwen3-4b", "hfCheckpoint": path, "torchDistCheckpoint": path + "_dist"},
        "data": {"promptData": path + "/data.jsonl"},
        "rollout": {
            "numRollout": draw(st.integers(1, 500)),
            "batchSize": batch,
            "samplesPerPrompt": samples,
            "maxResponseLen": draw(st.sampled_from([1024, 4096, 8192])),
        },
        "training": {"globalBatchSize": batch * samples, "maxTokensPerGpu": 8192},
        "topology": topology,
        "storage": {"claimName": "fsx", "tensorboardDir": path + "/tb"},
        "image": "registry.example/miles@sha256:" + "a" * 64,
    }
    if draw(st.booleans()):
        spec["reward"] = {"type": "remote", "remote": {"replicas": draw(st.integers(1, 8))}}
    if draw(st.booleans()):
        spec["hfTokenSecret"] = {"name": "hf-token"}
    return {
        "apiVersion": "grpo.dev/v1alpha1",
        "kind": "GRPORun",
        "metadata": {"name": name, "namespace": draw(st.sampled_from(["default", "team-a"])), "uid": "u-1"},
        "spec": spec,
    }


def rendered(doc: dict[str, Any]):  # type: ignore[no-untyped-def]
    run, problems = parse_run(doc)
    assert run is not None, problems
    assume(not errors(validate(run)))
    return render(run, make_plan(run), SETTINGS)


PROPERTY = settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
