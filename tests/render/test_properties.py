"""Properties of rendering over many valid specs (hypothesis): what Kubernetes and Ray will accept."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import errors, validate
from grpo_operator.render import render, yamlout
from grpo_operator.render.names import head_service
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity

from tests.render.helpers import SETTINGS

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
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


def walk(node: Any, path: str = ""):  # type: ignore[no-untyped-def]
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")
    else:
        yield path, node


PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)


@PROPERTY
@given(valid_runs())
def test_manifests_round_trip_through_yaml(doc: dict[str, Any]) -> None:
    result = rendered(doc)
    assert list(yaml.safe_load_all(yamlout.dump_all(result.children))) == result.children


@PROPERTY
@given(valid_runs())
def test_names_are_dns_labels_of_at_most_63_characters(doc: dict[str, Any]) -> None:
    result = rendered(doc)
    names = [c["metadata"]["name"] for c in result.children] + [head_service(doc["metadata"]["name"])]
    # KubeRay names worker pods <cluster>-<group>-worker-<5 random>.
    cluster = next(c for c in result.children if c["kind"] == "RayCluster")
    names.append(f"{cluster['metadata']['name']}-{cluster['spec']['workerGroupSpecs'][0]['groupName']}-worker-abcde")
    for name in names:
        assert DNS_LABEL.match(name) and len(name) <= 63, name
    for child in result.children:
        for value in child["metadata"]["labels"].values():
            assert len(value) <= 63


@PROPERTY
@given(valid_runs())
def test_no_empty_strings_and_every_quantity_parses(doc: dict[str, Any]) -> None:
    result = rendered(doc)
    for path, value in walk(result.children):
        assert value != "", path
        if ".resources.requests." in path or ".resources.limits." in path or path.endswith("sizeLimit"):
            parse_quantity(value)


@PROPERTY
@given(valid_runs())
def test_entrypoint_splits_back_to_the_argv_and_json_parses(doc: dict[str, Any]) -> None:
    result = rendered(doc)
    assert shlex.split(result.job.entrypoint) == list(result.job.entrypoint_argv)
    assert json.loads(json.dumps(result.job.runtime_env)) == result.job.runtime_env
    config = next(c for c in result.children if c["kind"] == "ConfigMap")
    assert json.loads(config["data"]["run-config.json"])["argv"] == list(result.job.miles_argv)
    assert doc["spec"]["model"]["hfCheckpoint"] in result.job.miles_argv
