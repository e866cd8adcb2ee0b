"""Properties of rendering over many valid specs (hypothesis): what Kubernetes and Ray will accept."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml
from grpo_operator.render import yamlout
from grpo_operator.render.names import head_service
from hypothesis import given
from kubernetes.utils.quantity import parse_quantity

from tests.support.fuzzing import PROPERTY, rendered, valid_runs

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def walk(node: Any, path: str = ""):  # type: ignore[no-untyped-def]
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")
    else:
        yield path, node


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
