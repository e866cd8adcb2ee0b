"""The GRPORun CRD as users meet it: through the real kube-apiserver and the real kubectl.

Covers what only an API server can show: the checked-in CRD installs, every example is accepted, the
shared table of bad inputs is rejected at apply time naming the field (and Python validation agrees with
the API server on which inputs each of them rejects), printer columns, `kubectl explain` descriptions, and
status pruning of undeclared keys.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.validation import Severity, validate

from tests.support.builders import CEL_CASES, EXAMPLES, PYTHON_ONLY_INVALID_EXAMPLES, Case

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
CRD = Path(__file__).resolve().parents[3] / "crds" / "grporuns.grpo.dev.yaml"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
RENDERABLE = [p for p in EXAMPLE_FILES if p.name not in PYTHON_ONLY_INVALID_EXAMPLES]
REWARD_IMAGE = "registry.example/grpo/reward-service@sha256:" + "0" * 64


def python_errors(doc: dict[str, Any]) -> list[str]:
    run, problems = parse_run(doc)
    if run is not None:
        problems = validate(run)
    return [p.path for p in problems if p.severity is Severity.ERROR]


def dry_run(kubectl: Kubectl, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl("apply", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(doc), check=False)


def spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_crd_is_installed_and_established(kubectl: Kubectl) -> None:
    status = kubectl(
        "get", "crd", "grporuns.grpo.dev", "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    ).stdout
    assert status == "True"


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.name)
def test_every_example_is_accepted_by_kubectl_apply(example: Path, namespace: str, kubectl: Kubectl) -> None:
    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    applied = kubectl("apply", "-n", namespace, "-f", str(example))
    assert applied.stdout.strip() == f"grporun.grpo.dev/{name} created"
    stored = json.loads(kubectl("get", "grporun", name, "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["model"]["profile"] == yaml.safe_load(example.read_text())["spec"]["model"]["profile"]


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.name)
def test_python_validation_rejects_only_the_examples_the_table_says(example: Path) -> None:
    errors = python_errors(yaml.safe_load(example.read_text()))
    assert bool(errors) == (example.name in PYTHON_ONLY_INVALID_EXAMPLES), errors


@pytest.mark.parametrize("case", [c for c in CEL_CASES if c.api_server], ids=lambda c: c.id)
def test_bad_input_is_rejected_at_apply_time_naming_the_field(case: Case, kubectl: Kubectl) -> None:
    result = dry_run(kubectl, case.manifest("bad-input"))
    assert result.returncode != 0, f"the API server accepted {case.id}: {result.stdout}"
    assert "is invalid" in result.stderr
    assert case.field in result.stderr, result.stderr
    assert case.field in python_errors(case.manifest()), "Python validation disagrees with the API server"


@pytest.mark.parametrize("case", [c for c in CEL_CASES if not c.api_server], ids=lambda c: c.id)
def test_python_only_rules_are_accepted_by_the_api_server_and_rejected_by_python(case: Case, kubectl: Kubectl) -> None:
    result = dry_run(kubectl, case.manifest("python-only"))
    assert result.returncode == 0, result.stderr
    assert case.field in python_errors(case.manifest())


def test_kubectl_get_shows_the_printer_columns_with_status_values(namespace: str, kubectl: Kubectl) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "quickstart.yaml"))
    status = {"phase": "Running", "progress": "3/20", "metrics": {"rawReward": 0.42, "repetitionFrac": 0.05}}
    kubectl(
        "patch",
        "grporun",
        "quickstart",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    header, row = kubectl("get", "grporuns", "-n", namespace).stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "MODEL", "PROGRESS", "REWARD", "REPETITION", "EVAL", "GPU-HOURS", "AGE"]
    assert row.split()[:6] == ["quickstart", "Running", "qwen3-4b", "3/20", "0.42", "0.05"]
    short = kubectl("get", "grpo", "-n", namespace, "-o", "name").stdout.strip()
    assert short == "grporun.grpo.dev/quickstart"


def test_kubectl_explain_shows_the_topology_descriptions(kubectl: Kubectl) -> None:
    explained = kubectl("explain", "grporun.spec.topology").stdout
    flat = " ".join(explained.split())
    topology = spec_schema()["properties"]["spec"]["properties"]["topology"]
    assert " ".join(topology["description"].split()) in flat
    for field, schema in topology["properties"].items():
        assert f"\n  {field}\t" in explained, field
        assert " ".join(schema["description"].split()) in flat, field


def test_a_status_patch_keeps_declared_keys_and_prunes_undeclared_ones(namespace: str, kubectl: Kubectl) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "quickstart.yaml"))
    patch = {
        "status": {"phase": "Running", "notDeclared": "dropped", "metrics": {"rawReward": 0.5, "alsoNotDeclared": 1}}
    }
    kubectl(
        "patch",
        "grporun",
        "quickstart",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
    )
    status = json.loads(kubectl("get", "grporun", "quickstart", "-n", namespace, "-o", "json").stdout)["status"]
    assert status["phase"] == "Running"
    assert status["metrics"] == {"rawReward": 0.5}
    assert "notDeclared" not in status


def test_spec_changes_through_the_status_subresource_are_ignored(namespace: str, kubectl: Kubectl) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "quickstart.yaml"))
    kubectl(
        "patch",
        "grporun",
        "quickstart",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"image": "other:1"}, "status": {"phase": "Pending"}}),
    )
    stored = json.loads(kubectl("get", "grporun", "quickstart", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["image"] != "other:1"
    assert stored["status"]["phase"] == "Pending"


@pytest.mark.parametrize("example", RENDERABLE, ids=lambda p: p.name)
def test_every_manifest_grpo_render_produces_passes_server_side_dry_run(example: Path, kubectl: Kubectl) -> None:
    grpo = Path(sys.executable).parent / "grpo"
    rendered = subprocess.run(
        [str(grpo), "render", "-f", str(example), "--reward-image", REWARD_IMAGE],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    assert {d["kind"] for d in documents} >= {"ConfigMap", "RayCluster"}
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check=False)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(documents)
    assert all(line.endswith("created (server dry run)") for line in result.stdout.splitlines()), result.stdout
