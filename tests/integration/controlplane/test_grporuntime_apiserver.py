"""The GRPORuntime CRD and the runtime-filled GRPORun through the real kube-apiserver and kubectl: the runtime
examples are accepted, the CEL rules refuse what `grpo validate` refuses, `kubectl get grporuntimes` shows the
instance types and their fabric, and a ten-line run without image or storage is stored as written."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.planning.documents import parse_runtime

from tests.support.builders import EXAMPLES, merge

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
RUNTIMES = sorted((EXAMPLES / "runtimes").glob("*.yaml"))
RUNTIME_FILES = [p for p in RUNTIMES if yaml.safe_load(p.read_text())["kind"] == "GRPORuntime"]


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def dry_run(kubectl: Kubectl, doc: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return kubectl("create", "--dry-run=server", *args, "-f", "-", input=json.dumps(doc), check=False)


def test_the_runtime_crd_is_established_and_cluster_scoped(kubectl: Kubectl) -> None:
    scope = kubectl("get", "crd", "grporuntimes.grpo.dev", "-o", "jsonpath={.spec.scope}").stdout
    established = kubectl(
        "get", "crd", "grporuntimes.grpo.dev", "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    ).stdout
    assert (scope, established) == ("Cluster", "True")


@pytest.mark.parametrize("path", RUNTIME_FILES, ids=lambda p: p.name)
def test_every_runtime_example_is_accepted(path: Path, kubectl: Kubectl) -> None:
    result = dry_run(kubectl, _load(path))
    assert result.returncode == 0, result.stderr
    assert parse_runtime(_load(path))[1] == []


_T: dict[str, Any] = {
    "name": "a",
    "gpuModel": "H100",
    "gpusPerNode": 8,
    "gpuMemoryGiB": 79.6,
    "vcpus": 8,
    "memoryGiB": 64,
    "fabric": {"type": "none"},
}
BAD = {
    "duplicate-names": (
        {"spec": {"instanceTypes": [_T, _T]}},
        "instanceTypes names must be unique",
    ),
    "none-with-count": (
        {"spec": {"instanceTypes": [_T | {"fabric": {"type": "none", "count": 2}}]}},
        "must be unset for none",
    ),
    "infiniband-without-resource": (
        {"spec": {"instanceTypes": [_T | {"fabric": {"type": "infiniband"}}]}},
        "resourceName and count are required",
    ),
    "env-name": (
        {"spec": {"instanceTypes": [_T | {"fabric": {"type": "efa", "resourceName": "x.io/y", "count": 1,
                                                     "env": {"1BAD": "x"}}}]}},
        "an environment variable name",
    ),
    "mount-over-a-system-directory": (
        {"spec": {"instanceTypes": [_T], "defaults": {"storage": {"mountPath": "/usr/local"}}}},
        "the volume would hide what the image or the operator keeps there",
    ),
    "default-type-unknown": (
        {"spec": {"instanceTypes": [_T], "defaults": {"instanceType": "b"}}},
        "defaults.instanceType",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_api_server_and_grpo_validate_refuse_the_same_runtimes(case: str, kubectl: Kubectl) -> None:
    patch, words = BAD[case]
    doc = {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPORuntime", "metadata": {"name": f"bad-{case}"}, **patch}
    result = dry_run(kubectl, doc)
    assert result.returncode != 0 and words in result.stderr, result.stderr
    runtime, problems = parse_runtime(doc)
    assert runtime is None and any(words in p.message for p in problems), problems


@pytest.fixture
def installed(kubectl: Kubectl) -> Iterator[str]:
    doc = _load(EXAMPLES / "runtimes" / "h100-infiniband.yaml")
    doc["metadata"]["name"] = "columns-h100-ib"
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    yield "columns-h100-ib"
    kubectl("delete", "grporuntime", "columns-h100-ib", "--wait=false", check=False)


def test_kubectl_get_grporuntimes_shows_instance_types_and_fabric(installed: str, kubectl: Kubectl) -> None:
    header, *rows = kubectl("get", "grporuntimes", installed).stdout.splitlines()
    assert header.split()[:3] == ["NAME", "INSTANCE-TYPES", "FABRIC"]
    assert rows[0].split()[:3] == [installed, "h100-ib", "infiniband"]


def test_a_ten_line_run_without_image_or_storage_is_stored_as_written(namespace: str, kubectl: Kubectl) -> None:
    run = _load(EXAMPLES / "runtimes" / "quickstart.yaml")
    result = kubectl("create", "-n", namespace, "-f", "-", "-o", "json", input=json.dumps(run), check=False)
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)["spec"]
    assert "image" not in stored and "storage" not in stored and "guards" not in stored
    assert "instanceType" not in stored["topology"]  # the runtime's default applies, not the CRD's
    edited = merge(json.loads(result.stdout), {"spec": {"image": "registry.example.com/ml/other:1"}})
    refused = kubectl("replace", "-n", namespace, "-f", "-", input=json.dumps(edited), check=False)
    assert refused.returncode != 0 and "only spec.suspend and spec.guards can change" in refused.stderr
